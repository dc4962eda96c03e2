"""`ole report`: what the static pages show, read from a real registry and workdir (issue 13).

The fixture (`report_fixture.py`) holds every version status, a rejected and a released
gate decision, a recombination, a scoped version and host run folders. The pages are
checked as HTML text here; `test_report_browser.py` drives a real Chromium over them.
"""
from __future__ import annotations

import json
import re
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest

import report_fixture
from ole.cli import main
from ole.gate import GateConfig, compute_stats
from ole.registry import Registry
from ole.report import build_report
from ole.report.collect import ci_level
from ole.report.serve import ReportServer


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    fx = report_fixture.build(tmp)
    with Registry(fx.root) as reg:
        data, pages = build_report(reg, [fx.workdir], tmp / "out")
    return fx, data, pages, tmp / "out"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        inline = False
        for key, value in attrs:
            if key in ("href", "src") and value:
                if value.startswith("data:"):  # inline: the favicon
                    inline = True
                elif re.match(r"^[a-z]+:", value):
                    self.external.append(value)
                else:
                    self.links.append(value)
        if tag in ("script", "link", "img", "iframe") and not inline:
            self.external.append(f"<{tag}>")


@pytest.mark.heavy
def test_every_version_has_its_status_scope_and_page(built):
    fx, data, pages, out = built
    assert {v.ref: v.status for v in data.versions} == report_fixture.EXPECTED_STATUS
    index = (out / "index.html").read_text()
    for ref, status in report_fixture.EXPECTED_STATUS.items():
        assert f'data-ref="{ref}" data-status="{status}"' in index  # the lineage box
        assert (out / data.version(ref).page).is_file()
    scoped = data.version("coder@6")
    assert scoped.scope == "families=curated;envs=gym/acrobot"
    assert scoped.scope_fields == (("env_families", "curated"), ("env_ids", "gym/acrobot"))
    page = (out / scoped.page).read_text()
    assert "families=curated;envs=gym/acrobot" in page and "env_families" in page
    assert data.version("coder@1").scope == "general"
    for status in ("seed", "registered", "evaluated", "gated", "rejected", "released", "active", "rolled back", "retired"):
        assert re.search(rf'data-legend="[a-z_]+"><span class="swatch"[^>]*></span>{status}<', index), status


def test_the_lineage_shows_paired_mean_r_with_the_recorded_interval(built):
    fx, data, _, out = built
    stats = fx.decisions["release"]["stats"]
    gated = data.version("coder@4").interval
    assert (gated.mean_r, gated.low, gated.high, gated.source) == (stats["mean_r"], stats["ci_low"], stats["ci_high"],
                                                                   "gate")
    assert gated.level == pytest.approx(0.8)  # alpha 0.1: the 0.1 and 0.9 bootstrap quantiles
    index = (out / "index.html").read_text()
    assert f"r̄ {stats['mean_r']:+.3f} [{stats['ci_low']:+.3f}, {stats['ci_high']:+.3f}] 80%" in index
    searched = data.version("coder@6").interval
    assert searched.low is None and searched.source == "search-g2" and searched.n == 2


def test_a_gate_page_shows_each_pair_and_every_check_measured_vs_required(built):
    fx, data, _, out = built
    gate = next(g for g in data.gates if g.seq == fx.reject_seq)
    record = fx.decisions["reject"]
    page = (out / gate.page).read_text()
    assert gate.verdict == "reject" and 'id="verdict">reject<' in page
    assert len(gate.pairs) == len(record["pairs"]) == page.count("<tr data-instance=")
    for pair in record["pairs"]:
        assert f"{pair['task']['env']} pool {pair['task']['pool_seed']} seed 0" in page
        assert f"{pair['champion']['q']:.2f}" in page and f"{pair['challenger']['q']:.2f}" in page
        assert f"{pair['r']:+.3f}" in page
    benefit = next(c for c in gate.criteria if c.name == "benefit")
    assert not benefit.passed and [k.passed for k in benefit.checks] == [False, False, False]
    assert [(k.measured, k.required) for k in benefit.checks][0] == (f"{record['stats']['mean_r']:+.4f}", "> +0.0000")
    assert all(c.passed for c in gate.criteria if c.name not in ("benefit", "tail"))
    tail = next(c for c in gate.criteria if c.name == "tail")  # a loss on every env the release would serve
    assert not tail.passed and all("mean r" in r and "would serve it" in r for r in tail.reasons)
    assert 'id="interval">' in page and "80% bootstrap interval of mean r" in page
    released = next(g for g in data.gates if g.seq == fx.release_seq)
    assert released.verdict == "release" and all(c.passed for c in released.criteria)
    assert all(k.passed for c in released.criteria for k in c.checks)


def test_a_version_page_shows_the_yaml_diff_against_each_parent(built):
    _, data, _, out = built
    page = (out / data.version("coder@2").page).read_text()
    assert '<span class="del">-    step_size: 0.3</span>' in page
    assert '<span class="add">+    step_size: 0.5</span>' in page
    recombined = data.version("coder@5")
    assert [d.parent for d in recombined.diffs] == ["coder@2", "coder@3"]
    assert [c[:2] for c in recombined.diffs[0].changes] == [("verification", "retest_episodes")]
    assert [c[:2] for c in recombined.diffs[1].changes] == [("action", "step_size")]
    assert data.version("coder@1").diffs == ()


def test_score_per_generation_and_run_curves_are_drawn(built):
    fx, data, _, out = built
    index = (out / "index.html").read_text()
    assert index.count('class="chart"') == 2
    assert len(data.curves) == 12  # 4 champion runs shared by both gates + 4 per challenger
    assert {c.bundle for c in data.curves} == {"coder@1", "coder@3", "coder@4"}
    curve = next(c for c in data.curves if c.run_id == "gym_acrobot-coder@1-p201")
    assert curve.xs == (2, 4, 6) and curve.ys == (-150.0, -130.0, -120.0)
    acrobot = next(a for a in data.anchors if a.env == "gym/acrobot")
    assert acrobot.random == -500.0 and acrobot.paper_best_agent == "GPT-5.5"
    assert "gym/acrobot" in index and "GPT-5.5" in index


def test_the_pages_are_self_contained_and_every_link_resolves(built):
    _, _, pages, out = built
    for page in pages:
        parser = _Links()
        parser.feed(page.read_text())
        assert parser.external == [], (page.name, parser.external)
        for link in parser.links:
            target = link.split("#")[0]
            assert not target or (out / target).is_file(), (page.name, link)


def test_untrusted_notes_are_escaped(tmp_path):
    fx = report_fixture.build(tmp_path)
    child = tmp_path / "evil.yaml"
    text = (fx.root / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.9")
    child.write_text(text)
    with Registry(fx.root) as reg:
        assert main(["--root", str(fx.root), "bundle", "register", str(child), "--parent", "1",
                     "--note", "<script>alert(1)</script>"]) == 0
        _, pages = build_report(reg, [], tmp_path / "out")
    for page in pages:
        assert "<script>" not in page.read_text()


def test_a_damaged_version_degrades_only_itself(tmp_path):
    fx = report_fixture.build(tmp_path)
    with Registry(fx.root) as reg:
        blob = reg.blob_path(reg.get("coder@6").blob_hash)
    blob.unlink()
    with Registry(fx.root) as reg:
        data, _ = build_report(reg, [fx.workdir], tmp_path / "out")
    damaged = data.version("coder@6")
    assert damaged.status == "damaged" and "missing" in damaged.damage and damaged.yaml is None
    assert {v.ref: v.status for v in data.versions if v.ref != "coder@6"} == {
        k: v for k, v in report_fixture.EXPECTED_STATUS.items() if k != "coder@6"}
    assert "stored YAML is damaged" in (tmp_path / "out" / damaged.page).read_text()


def test_ci_level_reads_the_record_else_matches_the_gate_computation():
    assert ci_level({"ci_level": 0.9}, {"alpha": 0.1}) == 0.9
    assert ci_level({}, {"alpha": 0.05, "ci_level": 0.95}) == 0.95
    # a record without a level: the interval ole.gate computes must have coverage 1 - 2 alpha
    cfg = GateConfig(alpha=0.1, bootstrap_resamples=4000, seed=3)
    rng = np.random.default_rng(0)
    from ole.paired import RunResult, make_pair
    from ole.trace import RunCondition, TaskSpec
    pairs = []
    for i, r in enumerate(rng.normal(0.05, 0.1, size=12)):
        base = RunResult(trace_id=f"a{i}", bundle_hash="a", q=50.0, q_source="normalized", status="completed",
                         verified=True, episodes=8, wall_s=1.0)
        chall = base.model_copy(update={"trace_id": f"b{i}", "bundle_hash": "b", "q": 50.0 * (1 + r)})
        pairs.append(make_pair(TaskSpec(env="gymnasium/CartPole-v1", pool_seed=i), RunCondition(host="builtin"),
                               "classic_control", base, chall))
    stats = compute_stats(pairs, cfg)
    level = ci_level(stats.model_dump(), cfg.model_dump())
    r = np.array(stats.r)
    means = r[np.random.default_rng(cfg.seed).integers(0, len(r), size=(cfg.bootstrap_resamples, len(r)))].mean(1)
    inside = np.mean((means >= stats.ci_low) & (means <= stats.ci_high))
    assert inside == pytest.approx(level, abs=0.01)


def test_cli_writes_the_report_and_refuses_a_missing_workdir(tmp_path, capsys, monkeypatch):
    fx = report_fixture.build(tmp_path)
    out = tmp_path / "site"
    code = main(["--root", str(fx.root), "report", "--workdir", str(fx.workdir), "--out", str(out), "--json"])
    summary = json.loads(capsys.readouterr().out)
    assert code == 0 and summary["versions"] == 8 and summary["gates"] == 2 and summary["runs"] == 12
    assert Path(summary["index"]) == (out / "index.html").resolve()
    code = main(["--root", str(fx.root), "report", "--workdir", str(tmp_path / "nope"), "--out", str(tmp_path / "x")])
    err = capsys.readouterr().err
    assert code == 2 and "--workdir" in err and "hint" in err and not (tmp_path / "x").exists()
    # defaults: runs/evolve-* of the current directory, out runs/report
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    fx.workdir.rename(tmp_path / "runs" / "evolve-offline")
    assert main(["--root", str(fx.root), "report"]) == 0
    assert "12 runs" in capsys.readouterr().out and (tmp_path / "runs" / "report" / "index.html").is_file()


def test_serve_answers_on_loopback_only(built):
    _, _, _, out = built
    server = ReportServer(out).start()
    try:
        assert server.url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(server.url, timeout=10) as response:
            assert response.status == 200 and b"Evolution report" in response.read()
    finally:
        server.stop()


def test_a_scoped_adaptive_decision_shows_its_relaxed_requirement_and_every_look(tmp_path):
    from ole.gate import GateConfig, Look, decide
    from ole.paired import RunResult, make_pair
    from ole.trace import RunCondition, TaskSpec
    fx = report_fixture.build(tmp_path)
    pairs = []
    for pool in range(6):
        champ = RunResult(trace_id=f"a{pool}", bundle_hash="a", q=None, q_source="normalized", score=-150.0,
                          status="completed", verified=True, episodes=8, wall_s=1.0)
        chall = champ.model_copy(update={"trace_id": f"b{pool}", "bundle_hash": "b", "score": -100.0 - pool})
        pairs.append(make_pair(TaskSpec(env="gym/acrobot", pool_seed=300 + pool), RunCondition(host="builtin"),
                               "curated", champ, chall))
    cfg = GateConfig(min_pairs=4, min_families=2, max_pairs=8)
    looks = [Look(n_pairs=4, alpha=0.05, p_value=0.06, mean_r=0.3, verdict="reject", extend="p above this look's alpha"),
             Look(n_pairs=6, alpha=0.025, p_value=0.016, mean_r=0.32, verdict="release")]
    decision = decide(pairs, cfg, champion="coder@1", challenger="coder@6", alpha=0.025,
                      scope_families=["curated"], looks=looks)
    assert decision.verdict == "release"
    with Registry(fx.root) as reg:
        seq = reg.record_gate_decision("coder@6", {**decision.model_dump(mode="json"), "accepted": True})
        data, _ = build_report(reg, [], tmp_path / "out")
    gate = next(g for g in data.gates if g.seq == seq)
    families = next(k for c in gate.criteria for k in c.checks if k.what == "env families where pairs differed")
    assert families.passed and families.required == ">= 1 (a scope of 1 family)"  # the bound the gate applied
    p_check = next(k for c in gate.criteria for k in c.checks if "one-sided p" in k.what)
    assert p_check.required == "< alpha 0.025" and p_check.passed
    page = (tmp_path / "out" / gate.page).read_text()
    assert page.count("<tr><td class=\"num\">") == 2 and "p above this look&#39;s alpha" in page


def test_every_registry_status_has_a_colour_and_a_canary_is_drawn(tmp_path):
    """A staged release (`release --exposure`) made `ole report` fail with UndefinedError: the
    display tables had no `canary`."""
    import typing

    from ole.registry.records import Status
    from ole.report.charts import STATUS_COLORS
    from ole.report.records import STATUSES
    assert set(typing.get_args(Status)) <= set(STATUSES) == set(STATUS_COLORS)
    fx = report_fixture.build(tmp_path)
    child = tmp_path / "staged.yaml"
    child.write_text((fx.root / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.7"))
    with Registry(fx.root) as reg:
        before = {v.version for v in reg.versions("coder")}
    assert main(["--root", str(fx.root), "bundle", "register", str(child), "--parent", "1"]) == 0
    with Registry(fx.root) as reg:
        version = max({v.version for v in reg.versions("coder")} - before)
    assert main(["--root", str(fx.root), "release", f"coder@{version}", "--reason", "staged",
                 "--exposure", "0.5"]) == 0
    assert main(["--root", str(fx.root), "champion", "activate"]) == 0
    with Registry(fx.root) as reg:
        data, pages = build_report(reg, [], tmp_path / "out")
    assert data.version(f"coder@{version}").status == "canary"
    assert "canary (staged)" in (tmp_path / "out" / "index.html").read_text()
