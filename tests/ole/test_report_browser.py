"""The report in a real headless Chromium: loads cleanly, shows every version, gate numbers, links.

Marked `browser` (deselected in the default tier; `make test-browser` and CI run them).
The pages are opened from disk (file://), as a user opens them, and once over the
loopback server of `ole report --serve`.
"""
from __future__ import annotations

import pytest

import report_fixture
from browser import chromium, console_errors
from ole.registry import Registry
from ole.report import build_report
from ole.report.serve import ReportServer

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("browser")
    fx = report_fixture.build(tmp)
    with Registry(fx.root) as reg:
        data, _ = build_report(reg, [fx.workdir], tmp / "out")
    return fx, data, tmp / "out"


@pytest.fixture(scope="module")
def driver():
    with chromium() as d:
        yield d


def _open(driver, url: str) -> None:
    driver.get(url)
    assert driver.execute_script("return document.readyState") == "complete"


def test_index_loads_without_console_errors_and_shows_every_version_with_its_status(site, driver):
    _, data, out = site
    _open(driver, (out / "index.html").as_uri())
    assert console_errors(driver) == []
    assert driver.title.startswith("OLE report: 8 versions, 2 gate decisions")
    driver.find_element("css selector", "#lineage-all summary").click()  # the whole lineage, collapsed at first
    nodes = driver.find_elements("css selector", "svg.lineage[data-view=all] a.node")
    shown = {n.get_attribute("data-ref"): n.get_attribute("data-status") for n in nodes}
    assert shown == report_fixture.EXPECTED_STATUS
    for node in nodes:  # each box is drawn (has a size) and says its status in words
        assert node.rect["width"] > 50 and node.rect["height"] > 20
    texts = {n.get_attribute("data-ref"): n.text for n in nodes}
    assert "rolled back" in texts["coder@4"] and "rejected" in texts["coder@3"]
    legend = [e.get_attribute("data-legend") for e in driver.find_elements("css selector", "#legend [data-legend]")]
    assert set(report_fixture.EXPECTED_STATUS.values()) <= set(legend)
    champion = driver.find_element("css selector", "[data-champion=default]")
    assert champion.text == "coder@5"


def test_a_gate_page_shows_the_recorded_numbers(site, driver):
    fx, _, out = site
    _open(driver, (out / "index.html").as_uri())
    driver.find_element("css selector", f"tr[data-gate='{fx.reject_seq}'] td a").click()
    assert driver.current_url.endswith(f"gate-{fx.reject_seq}.html")
    record = fx.decisions["reject"]
    assert driver.find_element("id", "verdict").text == "REJECT" or \
        driver.find_element("id", "verdict").text.lower() == "reject"
    assert driver.find_element("id", "n-pairs").text == str(len(record["pairs"]))
    assert driver.find_element("id", "mean-r").text == f"{record['stats']['mean_r']:+.4f}"
    assert driver.find_element("id", "interval").text == \
        f"[{record['stats']['ci_low']:+.3f}, {record['stats']['ci_high']:+.3f}]"
    rows = driver.find_elements("css selector", "#pairs tr[data-instance]")
    assert len(rows) == len(record["pairs"])
    by_instance = {r.get_attribute("data-instance"): r.find_element("css selector", "td.r").text for r in rows}
    for pair in record["pairs"]:
        name = f"{pair['task']['env']} pool {pair['task']['pool_seed']} seed 0 budget {pair['task']['budget']}"
        assert by_instance[name] == f"{pair['r']:+.3f}"
    failed = [r.text for r in driver.find_elements("css selector", "#criteria tr[data-criterion=benefit] td.fail")]
    assert failed == ["no", "no", "no"]
    assert console_errors(driver) == []


def test_every_link_of_every_page_works(site, driver):
    _, data, out = site
    pages = [(out / "index.html").as_uri()]
    seen: set[str] = set()
    while pages:
        url = pages.pop()
        if url in seen:
            continue
        seen.add(url)
        _open(driver, url)
        assert console_errors(driver) == [], url
        assert driver.find_element("css selector", "h1").text, url
        for a in driver.find_elements("css selector", "a[href]"):
            href = a.get_attribute("href")
            if href.startswith("file://") and "#" not in href.split("/")[-1]:
                pages.append(href)
    expected = 1 + len(data.versions) + len(data.gates)
    assert len(seen) == expected


def test_clicking_a_lineage_box_opens_its_version_with_the_diff(site, driver):
    _, _, out = site
    _open(driver, (out / "index.html").as_uri())
    driver.find_element("css selector", "svg.lineage[data-view=paths] a.node[data-ref='coder@2']").click()
    assert driver.current_url.endswith("version-coder-2.html")
    assert driver.find_element("id", "status").get_attribute("data-status") == "released"
    added = [e.text for e in driver.find_elements("css selector", "pre.diff .add")]
    assert "+    step_size: 0.5" in added
    driver.find_element("link text", "coder@1").click()
    assert driver.current_url.endswith("version-coder-1.html")


def test_the_served_report_loads_over_loopback(site, driver):
    _, _, out = site
    server = ReportServer(out).start()
    try:
        _open(driver, server.url)
        assert driver.find_elements("css selector", "svg.lineage a.node")
        assert console_errors(driver) == []
    finally:
        server.stop()


def test_a_run_report_loads_and_marks_the_selected_submit(tmp_path, driver):
    import json
    from evogym.report import write_html
    run = tmp_path / "run"
    vals = {"0": -190.0, "1": -140.0, "2": -150.0}
    for i, mean in enumerate((-200.0, -150.0, -145.0)):
        fb = run / "workspace" / "feedback" / f"submit_{i:03d}"
        fb.mkdir(parents=True)
        (fb / "summary.json").write_text(json.dumps({"submit_index": i, "status": "ok", "n_episodes": 4,
                                                     "mean_return": mean}))
    metrics = {str(i): {"source_lines": 40 + 5 * i, "functions": 3, "branches": 2, "loops": 1,
                        "cyclomatic_total": 5 + i, "max_ast_depth": 6} for i in range(3)}
    (run / "run.json").write_text(json.dumps({
        "env": "gym/acrobot", "profile": "quick", "model": "builtin", "isolation": {"level": "bwrap"},
        "outcome": {"status": "completed", "final_score": -142.5, "normalized_score": 86.0, "best_submit_index": 1,
                    "val_scores": vals, "auxiliary": {"episodes_used": 12, "code_metrics_by_submit": metrics,
                                                       "edit_kinds": {"0": "synthesis", "1": "tuning",
                                                                      "2": "tuning"}}}}))
    write_html(run)
    _open(driver, (run / "report.html").as_uri())
    assert console_errors(driver) == []
    assert driver.find_element("id", "final-score").text == "-142.5"
    selected = driver.find_element("css selector", "#submits tr.selected")
    assert selected.get_attribute("data-submit") == "1"
    rows = driver.find_elements("css selector", "#submits tr[data-submit]")
    assert [r.find_element("css selector", "td.mean").text for r in rows] == ["-200", "-150", "-145"]
    assert "(+5)" in rows[1].text
    assert driver.find_elements("css selector", "svg.chart")


# ----- a real-size evolve: 25 versions, one release --------------------------------------------

@pytest.fixture(scope="module")
def large(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("large")
    fx = report_fixture.build_large(tmp)
    with Registry(fx.root) as reg:
        data, _ = build_report(reg, [fx.workdir], tmp / "out")
    return fx, data, tmp / "out"


def _visible_in(driver, element, box) -> bool:
    """True when `element` lies inside the viewport and inside the scroll box `box` as it opened."""
    r = driver.execute_script("return arguments[0].getBoundingClientRect().toJSON()", element)
    b = driver.execute_script("return arguments[0].getBoundingClientRect().toJSON()", box)
    width, height = driver.execute_script("return [window.innerWidth, window.innerHeight]")
    return (r["width"] > 50 and b["left"] <= r["left"] and r["right"] <= b["right"] + 1
            and 0 <= r["left"] and r["right"] <= width and 0 <= r["top"] < height * 2)


def test_a_25_version_lineage_opens_on_the_seed_and_the_released_path(large, driver):
    fx, data, out = large
    assert len(data.versions) == 25
    driver.set_window_size(1280, 900)
    _open(driver, (out / "index.html").as_uri())
    assert console_errors(driver) == []
    box = driver.find_element("id", "lineage-paths")
    assert driver.execute_script("return arguments[0].scrollLeft", box) == 0
    shown = [n.get_attribute("data-ref") for n in box.find_elements("css selector", "a.node")]
    assert sorted(shown) == sorted(fx.path)  # the seed and the path to the released champion, nothing else
    for ref in fx.path:
        node = box.find_element("css selector", f"a.node[data-ref='{ref}']")
        assert _visible_in(driver, node, box), ref
    assert box.find_element("css selector", f"a.node[data-ref='{fx.released}']").get_attribute("data-status") == "active"
    # every other version is one click away, listed under its parent on the path
    groups = driver.find_elements("css selector", "#siblings details.siblings")
    assert [g.get_attribute("data-parent") for g in groups] == fx.path[:-1]
    listed = groups[1].find_elements("css selector", "tr[data-ref]")
    assert listed and not listed[0].is_displayed()
    groups[1].find_element("css selector", "summary").click()
    assert len(listed) == report_fixture.LARGE_POPULATION - 1 and all(r.is_displayed() for r in listed)
    # the whole lineage, when opened, draws all 25 and still starts at the seed and its path
    driver.find_element("css selector", "#lineage-all summary").click()
    whole = driver.find_element("css selector", "#lineage-all .scroll")
    assert len(whole.find_elements("css selector", "a.node")) == 25
    assert driver.execute_script("return arguments[0].scrollLeft", whole) == 0
    driver.execute_script("arguments[0].scrollIntoView()", whole)
    assert _visible_in(driver, whole.find_element("css selector", "a.node[data-ref='coder@1']"), whole)
    for ref in fx.path:
        node = whole.find_element("css selector", f"a.node[data-ref='{ref}']")
        assert node.rect["x"] < whole.rect["x"] + 400, ref  # the path is the leftmost column


def test_the_score_per_generation_labels_do_not_overlap(large, driver):
    fx, _, out = large
    _open(driver, (out / "index.html").as_uri())
    boxes = driver.execute_script(
        "return Array.from(document.querySelectorAll('#generations ~ svg.chart [id^=gen-label-] text, "
        "#generations ~ svg.chart g[id^=gen-label-]')).map(e => [e.id || e.parentNode.id, "
        "e.getBoundingClientRect().toJSON()])")
    labels = {}
    for gid, rect in boxes:
        if gid.startswith("gen-label-") and rect["width"] > 0:
            labels[gid] = rect
    # each generation's best is named; the gated (released) one is among them
    assert {f"gen-label-{ref.replace('@', '-')}" for ref in fx.path[1:]} <= set(labels)
    items = list(labels.items())
    for i, (a, ra) in enumerate(items):
        for b, rb in items[i + 1:]:
            apart = (ra["right"] <= rb["left"] or rb["right"] <= ra["left"] or ra["bottom"] <= rb["top"]
                     or rb["bottom"] <= ra["top"])
            assert apart, (a, b, ra, rb)
