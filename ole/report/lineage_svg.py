"""The lineage as inline SVG: a box per version, coloured by status, linked to its page.

Layout: each bundle name is a tree along first parents (a recombination's second parent
gets a dashed edge); leaves take consecutive slots, a parent sits above the middle of
its children, depth is the row. Every box is an `<a>` to the version page and carries
`data-ref` / `data-status`, so a reader (or a browser test) can find each version and
its status without parsing pictures.

A real evolve registers many more versions than it releases (25 versions and one release
is a typical `make evolve`), and drawn whole its lineage is wider than any window: the
page opened scrolled to the middle, away from the seed and the released path. So the index
first shows `champion_paths`: each seed and the path from it to every champion (active or
released version), with the path's children first; every other child is listed, collapsed,
under its parent (`siblings`), and the whole graph (`lineage_svg`, path children leftmost)
sits in a collapsed section below.
"""
from __future__ import annotations

from collections.abc import Sequence, Set
from html import escape

from ole.report.charts import STATUS_COLORS
from ole.report.records import STATUS_TEXT, Version

BOX_W, BOX_H = 200, 58
GAP_X, GAP_Y = 18, 46
PAD = 12
MORE_H, MORE_W = 16, 24
"""Room below the last row and right of the last column for a `+k more` note."""
DARK_TEXT = {"retired", "seed", "registered", "canary"}
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


CHAMPION_STATUSES = ("active", "released")
"""Statuses of the versions whose path from the seed is shown first (a release pending at the next
task boundary counts: it is the champion-to-be)."""


def on_paths(versions: Sequence[Version]) -> set[str]:
    """Refs of every seed (a version without a parent here) and of every version on a first-parent
    path from a seed to a champion (`CHAMPION_STATUSES`)."""
    by_ref = {v.ref: v for v in versions}
    keep = {v.ref for v in versions if not v.parents or v.parents[0] not in by_ref}
    for v in versions:
        ref = v.ref if v.status in CHAMPION_STATUSES else None
        while ref is not None and ref in by_ref:
            keep.add(ref)
            parents = by_ref[ref].parents
            ref = parents[0] if parents else None
    return keep


def siblings(versions: Sequence[Version]) -> list[tuple[Version, list[Version]]]:
    """(a version on a champion's path, its children that are not) for each such version with any,
    in the order of the page: what the collapsed lists under the path view hold."""
    keep = on_paths(versions)
    by_ref = {v.ref: v for v in versions}
    children: dict[str, list[Version]] = {}
    for v in versions:
        if v.ref not in keep and v.parents and v.parents[0] in by_ref:
            children.setdefault(v.parents[0], []).append(v)
    return [(by_ref[ref], sorted(kids, key=lambda v: v.version)) for ref, kids in
            sorted(children.items(), key=lambda kv: (by_ref[kv[0]].name, by_ref[kv[0]].version)) if ref in keep]


def _positions(versions: Sequence[Version], first: Set[str] = frozenset()) -> dict[str, tuple[float, int]]:
    """Slot (x) and depth of every version; children in `first` take the leftmost slots under their parent."""
    by_ref = {v.ref: v for v in versions}
    children: dict[str, list[str]] = {v.ref: [] for v in versions}
    roots = []
    for v in versions:
        parent = v.parents[0] if v.parents else None
        if parent in by_ref:
            children[parent].append(v.ref)
        else:
            roots.append(v.ref)
    pos: dict[str, tuple[float, int]] = {}
    slot = [0.0]

    def place(ref: str, depth: int) -> float:
        kids = sorted(children[ref], key=lambda r: (r not in first, by_ref[r].version))
        if not kids:
            x = float(slot[0])
            slot[0] += 1
        else:
            xs = [place(k, depth + 1) for k in kids]
            x = xs[0] if kids[0] in first else (xs[0] + xs[-1]) / 2  # a path stays a straight line on the left
        pos[ref] = (x, depth)
        return x

    for root in sorted(roots, key=lambda r: (r not in first, by_ref[r].name, by_ref[r].version)):
        place(root, 0)
        slot[0] += 0.3  # a little air between bundle names
    return pos


def champion_paths(versions: Sequence[Version]) -> str:
    """The seeds and the paths from them to every champion, as an `<svg data-view="paths">`; each
    path version with other children says how many (`+k more`), listed by `siblings`."""
    keep = on_paths(versions)
    shown = [v for v in versions if v.ref in keep]
    more = {parent.ref: len(kids) for parent, kids in siblings(versions)}
    return lineage_svg(shown, view="paths", more=more)


def lineage_svg(versions: Sequence[Version], *, view: str = "all", more: dict[str, int] | None = None) -> str:
    """The lineage of `versions` (every name) as an `<svg data-view=VIEW>`; the versions on a
    champion's path take the leftmost slots, so the drawing starts at the seed and that path.
    `more`: ref -> number of children left out of this view (drawn as `+k more` under the box)."""
    if not versions:
        return '<p class="empty">no versions registered</p>'
    more = more or {}
    pos = _positions(versions, on_paths(versions))
    width = int(max(x for x, _ in pos.values()) * (BOX_W + GAP_X) + BOX_W + 2 * PAD + (MORE_W if more else 0))
    height = int(max(d for _, d in pos.values()) * (BOX_H + GAP_Y) + BOX_H + 2 * PAD + (MORE_H if more else 0))

    def corner(ref: str) -> tuple[float, float]:
        x, d = pos[ref]
        return PAD + x * (BOX_W + GAP_X), PAD + d * (BOX_H + GAP_Y)

    parts = [f'<svg class="lineage" data-view="{escape(view)}" xmlns="http://www.w3.org/2000/svg" '
             f'viewBox="0 0 {width} {height}" style="width: {width}px; max-width: none" role="img" '
             f'aria-label="lineage graph ({escape(view)})">']  # natural size: the scroll box starts at the seed
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
    for ref, k in more.items():
        if ref in pos:
            x, y = corner(ref)
            parts.append(f'<text class="more" data-more="{escape(ref)}" x="{x + BOX_W / 2 + 6:.1f}" '
                         f'y="{y + BOX_H + 13:.1f}">+{k} more</text>')  # right of the edge; listed below the drawing
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
