"""Render a `ReportData` into static pages: `index.html`, one page per version and per gate decision.

Templates are Jinja files under `ole/report/templates/` with autoescaping on (bundle
notes and LLM-written text are untrusted); charts and the lineage are inline SVG, so
the folder opens from disk with no server, no network and no script.
"""
from __future__ import annotations

import json
from pathlib import Path

from evogym.durable import atomic_write
from ole.report.charts import STATUS_COLORS, curves_chart, generations_chart
from ole.report.records import STATUS_TEXT, STATUSES, Interval, ReportData
from ole.report.lineage_svg import DARK_TEXT, champion_paths, interval_text, lineage_svg, siblings


def _num(value: object, spec: str = "+.4f") -> str:
    return "-" if not isinstance(value, (int, float)) else format(value, spec)


def _level_text(level: float | None) -> str:
    return "" if level is None else f"{level:.0%}"


def _interval(i: Interval, with_level: bool = True) -> str:
    if i.low is None or i.high is None:
        return "-"
    level = f" ({_level_text(i.level)})" if i.level is not None and with_level else ""
    return f"[{i.low:+.3f}, {i.high:+.3f}]{level}"


def _diff_class(line: str) -> str:
    if line.startswith(("+++", "---")):
        return "file"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")


def _environment():
    from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape
    env = Environment(loader=PackageLoader("ole.report", "templates"), autoescape=select_autoescape(["j2", "html"]),
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.globals.update(num=_num, interval=_interval, interval_text=interval_text, level_text=_level_text,
                       status_text=lambda s: STATUS_TEXT.get(s, s), diff_class=_diff_class, colors=STATUS_COLORS,
                       statuses=STATUSES, light=DARK_TEXT)
    return env


def _write(path: Path, text: str) -> None:
    """Atomic write: a reader (or a browser reload) never sees half a page."""
    atomic_write(path, text, durable=False)


def render(data: ReportData, out: Path) -> list[Path]:
    """Write every page of the report into `out` (created); returns the pages, index first."""
    out.mkdir(parents=True, exist_ok=True)
    env = _environment()
    page_of = {v.ref: v.page for v in data.versions}
    gates_by_seq = {g.seq: g for g in data.gates}
    common = {"data": data, "page_of": page_of, "gates_by_seq": gates_by_seq}
    champions = set(data.champions.values()) | {g.champion for g in data.gates}
    index = env.get_template("index.html.j2").render(
        **common, lineage_svg=lineage_svg(data.versions), lineage_paths=champion_paths(data.versions),
        siblings=siblings(data.versions), generations_chart=generations_chart(data.versions),
        curves_chart=curves_chart(data.curves, data.anchors, champions))
    written = [out / "index.html"]
    _write(written[0], index)
    for v in data.versions:
        written.append(out / v.page)
        _write(written[-1], env.get_template("version.html.j2").render(**common, v=v))
    for g in data.gates:
        written.append(out / g.page)
        _write(written[-1], env.get_template("gate.html.j2").render(
            **common, g=g, config_text=json.dumps(g.config, indent=2, sort_keys=True)))
    return written
