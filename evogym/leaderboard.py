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
from evogym.durable import SUMMARY_MAX_BYTES, read_regular

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


def leaderboard_family(slug: str) -> str:
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
        row: dict[str, Any] = {"env": slug, "family": leaderboard_family(slug), name: ours, "paper": paper}
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
"""EvoPolicyGym main's leaderboard file (`site/leaderboards/<slug>/results.json`); its site
validates it with `site/lib/leaderboard/validate.ts`, whose rules tests/evogym/leaderboard_rules.py
ports: every export of ours must pass them."""
PRIMARY_METRIC = "assessment_mean_return"
FINAL_RERUNS = 1
"""Each score is one run's held-out mean (no reruns averaged in)."""
CATEGORIES = {"classic": "Classic control", "box2d": "Box2D", "mujoco": "MuJoCo", "minigrid": "Navigation",
              "highway": "Driving", "robotics": "Robotics", "other": "Other"}


def results_v1(runs: dict[str, dict], *, config_id: str, entry: dict, generated_at: str) -> dict:
    """A `leaderboard-results/v1` document of one suite: `runs` maps env slug -> a finished
    run's run.json. `entry`: `id`, `display` (default the id), `harness`, `kind` (default
    agent), `thinking_effort` (left out when None: upstream allows no null). The score of an
    env is its held-out mean (`final_score`, upstream's `assessment_mean_return`) under its
    test configuration: the run's run-record/v8 settings as flat parameters, one configuration
    per distinct setting (MiniGrid's assessment size may differ), `config_id` suffixed
    `-a<episodes>` when there is more than one. A run with no score (a host error) has none."""
    settings = {slug: _parameters(doc) for slug, doc in runs.items()}
    distinct = list(dict.fromkeys(json.dumps(p, sort_keys=True) for p in settings.values()))
    names = _configuration_ids(config_id, distinct)
    of_env = {slug: names[json.dumps(p, sort_keys=True)] for slug, p in settings.items()}
    configurations = [_configuration(names[key], json.loads(key)) for key in distinct]
    scores = {}
    for slug, doc in runs.items():
        score = (doc.get("outcome") or {}).get("final_score")
        if doc.get("outcome", {}).get("status") in ("completed", "no_ok_submit") and isinstance(score, (int, float)) \
                and np.isfinite(score):
            scores[slug] = {of_env[slug]: float(score)}
    return {"schema": RESULTS_SCHEMA, "generated_at": generated_at, "final_reruns": FINAL_RERUNS,
            "test_configurations": configurations,
            "environments": [_environment(slug, order, of_env[slug]) for order, slug in enumerate(runs)],
            "entries": [{"id": entry["id"], "display": entry.get("display") or entry["id"],
                         "harness": entry["harness"], "kind": entry.get("kind", "agent"),
                         **({"thinking_effort": entry["thinking_effort"]} if entry.get("thinking_effort") else {}),
                         "scores": scores}]}


def _configuration_ids(config_id: str, distinct: list[str]) -> dict[str, str]:
    """An id per distinct parameter set: `config_id` alone, else `config_id-a<assessment
    episodes>`, numbered where two sets share that."""
    if len(distinct) == 1:
        return {distinct[0]: config_id}
    names: dict[str, str] = {}
    for key in distinct:
        name = f"{config_id}-a{json.loads(key).get('assessment_episodes')}"
        names[key] = name if name not in names.values() else f"{name}-{len(names) + 1}"
    return names


def _parameters(doc: dict) -> dict:
    """A run's settings as upstream's flat configuration parameters (strings, numbers, booleans;
    a setting that is unset here is left out, as upstream allows no null)."""
    config = doc.get("config") or {}
    validation, assessment = config.get("validation") or {}, config.get("assessment") or {}
    flat = {"profile": doc.get("profile"), "run_seed": config.get("seed"), "training_split": config.get("split"),
            "episode_budget": config.get("episode_budget"), "episode_pool_size": config.get("episode_pool_size"),
            "max_submissions": config.get("max_submissions"),
            "max_episodes_per_submission": config.get("max_episodes_per_submission"),
            "finish_budget_policy": config.get("finish_budget_policy"), "validation_split": validation.get("split"),
            "validation_episodes_per_candidate": validation.get("episodes_per_candidate"),
            "validation_max_candidates": validation.get("max_candidates"), "assessment_split": assessment.get("split"),
            "assessment_episodes": assessment.get("episodes"),
            "episode_timeout_seconds": config.get("episode_timeout_seconds"),
            "agent_timeout_seconds": config.get("agent_timeout_seconds")}
    return {k: v for k, v in flat.items() if isinstance(v, (str, int, float)) and v == v}


def _configuration(config_id: str, parameters: dict) -> dict:
    budget, valid = parameters.get("episode_budget"), parameters.get("validation_episodes_per_candidate")
    heldout, profile = parameters.get("assessment_episodes"), parameters.get("profile", "evogym")
    return {"id": config_id,
            "label": {"en": f"{profile} · {budget} train / {valid} validation / {heldout} assessment",
                      "zh": f"{profile} · {budget} 训练 / {valid} Validation / {heldout} Assessment"},
            "description": {
                "en": f"Spend up to {budget} training Episodes, select with {valid} Validation Episodes per "
                      f"candidate, then measure the selected Program on {heldout} held-out Assessment Episodes.",
                "zh": f"最多使用 {budget} 个训练 Episode，每个候选用 {valid} 个 Validation Episode 选择，"
                      f"再在 {heldout} 个 held-out Assessment Episodes 上评测所选 Program。"},
            "parameters": parameters}


def _environment(slug: str, order: int, config_id: str) -> dict:
    from evogym import envs
    try:
        title = envs.resolve(slug).title
    except Exception:  # noqa: BLE001 - an env not installed here still gets its row, under its id
        title = slug
    return {"id": slug, "display": title, "category": CATEGORIES[leaderboard_family(slug)], "order": order,
            "primary_metric": PRIMARY_METRIC, "score_direction": "maximize",
            "configuration_ids": [config_id], "default_configuration_id": config_id,
            "summary": {"en": f"{title}, ranked by mean held-out return.",
                        "zh": f"{title}，按 held-out mean return 排名。"}}


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
            s = json.loads(read_regular(fb / "summary.json", SUMMARY_MAX_BYTES))
            n, index = int(s["n_episodes"]), int(s["submit_index"])
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
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
