"""The lineage graph as one inline SVG: a box per version, coloured by status, linked to its page.

Layout: each bundle name is a tree along first parents (a recombination's second parent
gets a dashed edge); leaves take consecutive slots, a parent sits above the middle of
its children, depth is the row. Every box is an `<a>` to the version page and carries
`data-ref` / `data-status`, so a reader (or a browser test) can find each version and
its status without parsing pictures.
"""
from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ole.report.charts import STATUS_COLORS
from ole.report.collect import STATUS_TEXT, Version

BOX_W, BOX_H = 200, 58
GAP_X, GAP_Y = 18, 46
PAD = 12
DARK_TEXT = {"retired", "seed", "registered"}
"""Statuses whose fill is light enough for dark text."""


def interval_text(version: Version) -> str:
    """`r̄ +0.012 [−0.010, +0.031] 80%` (gate) or `r̄ +0.012 search-g1 n=4`; empty without a score."""
    i = version.interval
    if i is None:
        return ""
    if i.low is not None and i.high is not None:
        level = f" {i.level:.0%}" if i.level is not None else ""
        return f"r̄ {i.mean_r:+.3f} [{i.low:+.3f}, {i.high:+.3f}]{level}"
    return f"r̄ {i.mean_r:+.3f} ({i.source}, n={i.n})"


def _positions(versions: Sequence[Version]) -> dict[str, tuple[float, int]]:
    by_ref = {v.ref: v for v in versions}
    children: dict[str, list[str]] = {v.ref: [] for v in versions}
    roots = []
    for v in versions:
        first = v.parents[0] if v.parents else None
        if first in by_ref:
            children[first].append(v.ref)
        else:
            roots.append(v.ref)
    pos: dict[str, tuple[float, int]] = {}
    slot = [0]

    def place(ref: str, depth: int) -> float:
        kids = sorted(children[ref], key=lambda r: by_ref[r].version)
        if not kids:
            x = float(slot[0])
            slot[0] += 1
        else:
            xs = [place(k, depth + 1) for k in kids]
            x = (xs[0] + xs[-1]) / 2
        pos[ref] = (x, depth)
        return x

    for root in sorted(roots, key=lambda r: (by_ref[r].name, by_ref[r].version)):
        place(root, 0)
        slot[0] += 0.3  # a little air between bundle names
    return pos


def lineage_svg(versions: Sequence[Version]) -> str:
    """The whole lineage (every name) as an `<svg>` element."""
    if not versions:
        return '<p class="empty">no versions registered</p>'
    pos = _positions(versions)
    width = int(max(x for x, _ in pos.values()) * (BOX_W + GAP_X) + BOX_W + 2 * PAD)
    height = int(max(d for _, d in pos.values()) * (BOX_H + GAP_Y) + BOX_H + 2 * PAD)

    def corner(ref: str) -> tuple[float, float]:
        x, d = pos[ref]
        return PAD + x * (BOX_W + GAP_X), PAD + d * (BOX_H + GAP_Y)

    parts = [f'<svg class="lineage" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'style="max-width: 100%; width: {width}px; min-width: {int(width * 0.75)}px" role="img" '
             'aria-label="lineage graph">']  # shrink to fit, but scroll before the text gets too small
    for v in versions:
        for i, parent in enumerate(v.parents):
            if parent not in pos:
                continue
            (px, py), (cx, cy) = corner(parent), corner(v.ref)
            x1, y1, x2, y2 = px + BOX_W / 2, py + BOX_H, cx + BOX_W / 2, cy
            mid = (y1 + y2) / 2
            dash = ' stroke-dasharray="4 3"' if i > 0 else ""
            parts.append(f'<path class="edge" data-parent="{escape(parent)}" data-child="{escape(v.ref)}" '
                         f'd="M{x1:.1f},{y1:.1f} C{x1:.1f},{mid:.1f} {x2:.1f},{mid:.1f} {x2:.1f},{y2:.1f}" '
                         f'fill="none" stroke="#90a4ae" stroke-width="1.4"{dash}/>')
            if i == 0 and v.edge:
                parts.append(f'<text class="edge-label" x="{x2 + 4:.1f}" y="{y2 - 6:.1f}">{escape(v.edge)}</text>')
    for v in versions:
        x, y = corner(v.ref)
        fill = STATUS_COLORS.get(v.status, "#000")
        ink = "#212121" if v.status in DARK_TEXT else "#ffffff"
        border = ' stroke="#212121" stroke-width="2.5"' if v.seed else ' stroke="#ffffff" stroke-width="1"'
        status = STATUS_TEXT.get(v.status, v.status) + (" · seed" if v.seed and v.status != "seed" else "")
        tip = "\n".join(filter(None, [f"{v.ref}: {status}", interval_text(v), f"scope: {v.scope}",
                                      v.note[:200]]))
        parts.append(
            f'<a class="node" href="{escape(v.page)}" data-ref="{escape(v.ref)}" data-status="{escape(v.status)}">'
            f"<title>{escape(tip)}</title>"
            f'<rect x="{x:.1f}" y="{y:.1f}" width="{BOX_W}" height="{BOX_H}" rx="7" fill="{fill}"{border}/>'
            f'<text x="{x + 8:.1f}" y="{y + 16:.1f}" fill="{ink}" class="ref">{escape(v.ref)}'
            f'<tspan class="status" dx="6">{escape(status)}</tspan></text>'
            f'<text x="{x + 8:.1f}" y="{y + 33:.1f}" fill="{ink}" class="score">{escape(interval_text(v) or "—")}</text>'
            f'<text x="{x + 8:.1f}" y="{y + 49:.1f}" fill="{ink}" class="scope">{escape(_clip(v.scope, 30))}</text>'
            "</a>")
    parts.append("</svg>")
    return "".join(parts)


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1] + "…"
