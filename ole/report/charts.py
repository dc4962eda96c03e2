"""Charts of the report as inline SVG, drawn with matplotlib (no image files, no scripts).

Each function returns one `<svg>` element as text. Text stays text (`svg.fonttype: none`)
so the numbers on the axes are searchable, and every figure gets its own id salt so two
charts on one page never share clip-path ids.
"""
from __future__ import annotations

import itertools
from collections.abc import Sequence

from evogym.report import svg_of
from ole.report.records import EnvAnchors, RunCurve, Version

STATUS_COLORS = {
    "seed": "#9e9e9e", "registered": "#64b5f6", "evaluated": "#9575cd", "gated": "#5e35b1", "rejected": "#e53935",
    "released": "#fb8c00", "canary": "#fdd835", "active": "#43a047", "rolled_back": "#6d4c41", "retired": "#cfd8dc",
    "damaged": "#212121",
}
"""One colour per display status (`ole.report.records.STATUSES`, every registry status among them);
the legend, the lineage and the charts all use this table."""

_counter = itertools.count()


def _figure(width: float, height: float, ncols: int = 1, nrows: int = 1):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    matplotlib.rcParams.update({"svg.fonttype": "none", "svg.hashsalt": f"ole-report-{next(_counter)}",
                                "font.size": 9, "axes.spines.top": False, "axes.spines.right": False})
    return plt.subplots(nrows, ncols, figsize=(width, height), squeeze=False)


def search_score(version: Version) -> float | None:
    """Mean r of the version's last evaluation outside the gate (its search score), if any."""
    for e in reversed(version.evaluations):
        if not e.stage.startswith("gate") and e.mean_r is not None:
            return float(e.mean_r)
    return None


LABELLED_STATUSES = ("rejected", "released", "active", "rolled_back", "retired")
"""Candidates named on the score-per-generation chart besides each generation's best: those a gate
judged. The rest are dots in their status colour (every one is in the versions table)."""
LABEL_OFFSETS = [(4, 3), (4, -9)] + [(4, dy) for k in range(1, 12) for dy in (3 + 11 * k, -9 - 11 * k)]
"""Offsets (points) tried in turn for a label until it overlaps no label placed before it."""


def generations_chart(versions: Sequence[Version]) -> str | None:
    """Search score (mean r against the champion) of every candidate, by generation.

    Each candidate is one dot in its status colour; the line joins each generation's best.
    The champion sits at r = 0 by definition (dashed). Labels name each generation's best and
    every gated candidate, each moved off the labels placed before it (a 25-version evolve
    stacked two dozen names on one spot before).
    """
    search: list[tuple[float, float, Version]] = [
        (float(v.generation), score, v) for v in versions if v.parents and (score := search_score(v)) is not None]
    if not search:
        return None
    fig, axes = _figure(6.5, 2.8)
    ax = axes[0][0]
    ax.axhline(0.0, ls="--", lw=0.8, color="#616161", label="champion (r = 0)")
    spread: dict[int, list[str]] = {}
    for _, _, v in search:  # candidates of one generation side by side, not on top of each other
        spread.setdefault(v.generation, []).append(v.ref)
    width = 0.7 / max(len(refs) for refs in spread.values())  # a generation's dots stay within ±0.35 of it
    search = [(g + width * (spread[v.generation].index(v.ref) - (len(spread[v.generation]) - 1) / 2), r, v)
              for g, r, v in search]
    for status in sorted({v.status for _, _, v in search}):
        mine = [(x, r) for x, r, v in search if v.status == status]
        ax.scatter([x for x, _ in mine], [r for _, r in mine], s=28, color=STATUS_COLORS.get(status, "#000"),
                   edgecolor="white", linewidth=0.5, zorder=3, label=status.replace("_", " "))
    gens = sorted(spread)
    tops = [max((p for p in search if p[2].generation == g), key=lambda p: p[1]) for g in gens]
    best = {v.generation: v.ref for _, _, v in tops}
    ax.plot([x for x, _, _ in tops], [r for _, r, _ in tops], color="#212121", lw=1.0, label="best of generation")
    ax.set_xticks(gens)
    ax.set_xlim(min(gens) - 0.5, max(gens) + 0.6)  # room for the labels beside the last generation
    ax.set_xlabel("generation")
    ax.set_ylabel("mean r vs champion (search)")
    ax.legend(fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    named = [p for p in search if p[2].ref in best.values() or p[2].status in LABELLED_STATUSES]
    _place_labels(fig, ax, sorted(named, key=lambda p: (-p[1], p[0])))
    return svg_of(fig)


def _place_labels(fig, ax, points) -> None:
    """Annotate each (x, r, version) with its ref at the first offset whose box overlaps no earlier label."""
    renderer = fig.canvas.get_renderer()
    placed: list = []
    for x, r, v in points:
        label = ax.annotate(v.ref, (x, r), textcoords="offset points", xytext=LABEL_OFFSETS[0], fontsize=7,
                            color="#424242", gid=f"gen-label-{v.ref.replace('@', '-')}")
        for offset in LABEL_OFFSETS:
            label.xyann = offset
            box = label.get_window_extent(renderer).expanded(1.05, 1.1)
            if not any(box.overlaps(other) for other in placed):
                break
        placed.append(label.get_window_extent(renderer))


def curves_chart(curves: Sequence[RunCurve], anchors: Sequence[EnvAnchors], champions: set[str]) -> str | None:
    """Best-so-far validation mean return per run, one panel per env, with the anchors.

    Runs of a champion are drawn thick and dark, challengers thin in one colour per
    bundle; the dotted line is our measured uniform-random baseline, the dashed one the
    best published agent (paper §6.2).
    """
    envs = sorted({c.env for c in curves if c.xs})
    if not envs:
        return None
    cols = min(3, len(envs))
    rows = (len(envs) + cols - 1) // cols
    fig, axes = _figure(3.3 * cols, 2.5 * rows, ncols=cols, nrows=rows)
    bundles = sorted({c.bundle for c in curves if c.bundle not in champions})
    palette = ["#1e88e5", "#8e24aa", "#f4511e", "#00897b", "#c0ca33", "#d81b60", "#5e35b1", "#fdd835",
               "#3949ab", "#6d4c41"]
    colour = {b: palette[i % len(palette)] for i, b in enumerate(bundles)}
    by_env = {a.env: a for a in anchors}
    labelled: set[str] = set()
    for ax, env in zip(axes.flat, envs):
        for c in (c for c in curves if c.env == env and c.xs):
            champ = c.bundle in champions
            label = c.bundle if c.bundle not in labelled else None
            labelled.add(c.bundle)
            ax.step(c.xs, c.ys, where="post", lw=1.8 if champ else 0.9, alpha=0.95 if champ else 0.7,
                    color="#1b5e20" if champ else colour[c.bundle], label=label, zorder=3 if champ else 2)
        a = by_env.get(env)
        if a is not None and a.random is not None:
            ax.axhline(a.random, ls=":", lw=0.9, color="#757575", label="random" if "random" not in labelled else None)
            labelled.add("random")
        if a is not None and a.paper_best is not None:
            ax.axhline(a.paper_best, ls="--", lw=0.9, color="#424242",
                       label="paper best" if "paper" not in labelled else None)
            labelled.add("paper")
            ax.annotate(a.paper_best_agent, (1.0, a.paper_best), xycoords=("axes fraction", "data"),
                        ha="right", va="bottom", fontsize=7, color="#424242")
        ax.set_title(env, fontsize=9)
        ax.set_xlabel("train episodes used", fontsize=8)
        ax.set_ylabel("best-so-far validation mean", fontsize=8)
    for ax in list(axes.flat)[len(envs):]:
        ax.axis("off")
    fig.tight_layout()
    fig.legend(fontsize=8, frameon=False, loc="lower center", ncol=min(8, len(bundles) + 3),
               bbox_to_anchor=(0.5, 1.0))
    return svg_of(fig)
