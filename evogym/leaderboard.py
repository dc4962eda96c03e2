"""Leaderboard: our runs next to the EvoPolicyGym paper's five rows.

Compute first, then present: `build(results)` returns a plain dict (per env: our
held-out mean, the paper's rows, ranks and rank-normalized scores s = 1 − (rank−1)/(N−1)
among the N entrants; per-family means; the overall mean), `markdown(board)` renders it
and `plot_curves(...)` draws best-so-far validation curves (the paper's Figure 3 view).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from evogym.anchors import AGENTS, PAPER_ROWS, RANDOM

FAMILIES = {
    "classic": ("gym/acrobot", "gym/continuouscar"),
    "box2d": ("gym/bipedal", "gym/racing"),
    "mujoco": ("gym/halfcheetah5", "gym/ant5", "gym/pusher5", "gym/reacher5"),
    "minigrid": ("gymnasium/MiniGrid-DoorKey-16x16-v0", "gymnasium/MiniGrid-KeyCorridorS4R3-v0",
                 "gymnasium/MiniGrid-FourRooms-v0", "gymnasium/MiniGrid-ObstructedMaze-1Q-v1"),
    "highway": ("gymnasium/parking-v0", "gymnasium/roundabout-v0"),
    "robotics": ("gymnasium/FetchPush-v4", "gymnasium/FetchPickAndPlace-v4"),
}
PAPER_ENTRANTS = (*AGENTS, RANDOM)


def family_of(slug: str) -> str:
    return next((f for f, slugs in FAMILIES.items() if slug in slugs), "other")


def rank_scores(values: dict[str, float]) -> dict[str, float]:
    """s = 1 − (rank−1)/(N−1), rank 1 = highest; tied values share the best rank."""
    n = len(values)
    if n < 2:
        return {k: 1.0 for k in values}
    ordered = sorted(values.values(), reverse=True)
    return {k: 1 - (ordered.index(v)) / (n - 1) for k, v in values.items()}


def build(results: dict[str, float | None], name: str = "ours") -> dict:
    """results: env slug -> our held-out mean (None = no score). Returns the board."""
    rows: list[dict[str, Any]] = []
    scores: dict[str, list[float]] = {e: [] for e in (name, *PAPER_ENTRANTS)}
    for slug, ours in results.items():
        paper = PAPER_ROWS.get(slug)
        row: dict[str, Any] = {"env": slug, "family": family_of(slug), name: ours, "paper": paper}
        if paper is not None and ours is not None:
            s = rank_scores({name: ours, **paper})
            row["rank_score"] = s
            for k, v in s.items():
                scores[k].append(v)
            row["beats"] = [a for a in PAPER_ENTRANTS if ours > paper[a]]
        rows.append(row)
    fam: dict[str, dict[str, list]] = {}
    for row in rows:
        for k, v in (row.get("rank_score") or {}).items():
            fam.setdefault(row["family"], {}).setdefault(k, []).append(v)
    return {"name": name, "rows": rows,
            "mean_rank_score": {k: (float(np.mean(v)) if v else None) for k, v in scores.items()},
            "family_rank_score": {f: {k: float(np.mean(v)) for k, v in d.items()} for f, d in fam.items()}}


RESULTS_SCHEMA = "evopolicygym/leaderboard-results/v1"
"""EvoPolicyGym main's leaderboard file (`site/leaderboards/<slug>/results.json`)."""


def results_v1(runs: dict[str, dict], *, config_id: str, entry: dict, generated_at: str) -> dict:
    """A `leaderboard-results/v1` document of one suite: `runs` maps env slug -> a finished
    run's run.json; the entry's score per env is its held-out mean (`final_score`, the
    upstream `assessment_mean_return`) under the one test configuration `config_id`, whose
    settings are the runs' run-record/v8 config (assessment sizes per env, as MiniGrid's may
    differ). Unscored runs have no score."""
    first: dict = next((doc["config"] for doc in runs.values() if doc.get("config")), {})
    configuration = {"id": config_id, "profile": next((doc.get("profile") for doc in runs.values()), None),
                     **{k: first.get(k) for k in ("episode_budget", "episode_pool_size", "max_submissions",
                                                  "max_episodes_per_submission", "finish_budget_policy",
                                                  "validation", "episode_timeout_seconds")},
                     "assessment_episodes": {slug: (doc.get("config") or {}).get("assessment", {}).get("episodes")
                                             for slug, doc in runs.items()}}
    scores = {slug: {config_id: doc["outcome"]["final_score"]} for slug, doc in runs.items()
              if doc.get("outcome", {}).get("status") == "completed" and doc["outcome"].get("final_score") is not None}
    return {"schema": RESULTS_SCHEMA, "generated_at": generated_at, "test_configurations": [configuration],
            "environments": [{"id": slug, "primary_metric": "assessment_mean_return", "score_direction": "maximize"}
                             for slug in runs],
            "entries": [{**entry, "scores": scores}]}


def markdown(board: dict) -> str:
    name = board["name"]
    head = ["env", name, *PAPER_ENTRANTS, f"s({name})", "beats"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in board["rows"]:
        paper = r["paper"] or {}
        ours = "–" if r[name] is None else f"{r[name]:.4g}"
        s = r.get("rank_score", {}).get(name)
        lines.append("| " + " | ".join([r["env"], ours, *(f"{paper[a]:.4g}" if a in paper else "–"
                                                            for a in PAPER_ENTRANTS),
                                        "–" if s is None else f"{s:.2f}", ", ".join(r.get("beats", []))]) + " |")
    lines += ["", "Mean rank-normalized score s = 1 − (rank−1)/(N−1) over envs with a score (N = 6 entrants):", ""]
    lines += [f"- {k}: {v:.3f}" for k, v in board["mean_rank_score"].items() if v is not None]
    lines += ["", "Per family:", ""]
    for fam, d in board["family_rank_score"].items():
        lines.append(f"- {fam}: " + ", ".join(f"{k} {v:.2f}" for k, v in d.items()))
    return "\n".join(lines) + "\n"


def validation_curve(run_dir: Path) -> tuple[list[int], list[float]]:
    """Best-so-far validation score against cumulative train episodes, from a finished run."""
    run_dir = Path(run_dir)
    doc = json.loads((run_dir / "run.json").read_text())
    val = (doc["outcome"].get("val_scores") or {})
    xs, ys, used, best = [], [], 0, None
    for fb in sorted((run_dir / "workspace" / "feedback").glob("submit_*")):
        try:  # the agent's workspace: a folder of its own or a summary it broke is passed over
            s = json.loads((fb / "summary.json").read_text())
            n, index = int(s["n_episodes"]), int(s["submit_index"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if fb.name != f"submit_{index:03d}":
            continue
        used += n
        v = val.get(str(index))
        if v is not None:
            best = v if best is None else max(best, v)
        if best is not None and n:
            xs.append(used)
            ys.append(best)
    return xs, ys


def plot_curves(curves: dict[str, tuple[list[int], list[float]]], out: Path) -> Path:
    """One small panel per env; the paper's best agent as a dashed line where known."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    n = max(1, len(curves))
    cols = min(4, n)
    rows = (n + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
    for ax, (slug, (xs, ys)) in zip(axes.flat, curves.items()):
        ax.step(xs, ys, where="post")
        paper = PAPER_ROWS.get(slug)
        if paper:
            ax.axhline(max(paper[a] for a in AGENTS), ls="--", lw=0.8, color="grey")
            ax.axhline(paper[RANDOM], ls=":", lw=0.8, color="grey")
        ax.set_title(slug.split("/")[-1], fontsize=8)
        ax.tick_params(labelsize=6)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    fig.supxlabel("train episodes used", fontsize=8)
    fig.supylabel("best-so-far validation mean", fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
