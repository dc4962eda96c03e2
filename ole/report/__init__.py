"""The evolution report: a static HTML view of a registry and its evolve workdirs.

`build_report(registry, workdirs, out)` reads (`collect.py`, into the records of `records.py`),
then writes (`render.py`)
`out/index.html` — lineage with statuses, scopes and paired mean r, gate decisions,
score per generation, best-so-far curves against the anchors, champion history — plus
one page per version (YAML diff against its parents) and per gate decision (per-pair
table, every check measured vs required, verdict). The pages reference nothing outside
the folder: open `index.html` from disk, or `ole report --serve` for loopback HTTP.
"""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ole.report.collect import collect
from ole.report.records import ReportData
from ole.report.render import render


def build_report(registry, workdirs: Sequence[Path | str], out: Path | str, *,
                 warnings: Sequence[str] = ()) -> tuple[ReportData, list[Path]]:
    """Collect and render; returns the data shown and the pages written (index first)."""
    data = collect(registry, workdirs, warnings=warnings)
    return data, render(data, Path(out))


__all__ = ["ReportData", "build_report", "collect", "render"]
