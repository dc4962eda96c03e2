"""Sensitivity map: what each Loop Policy field does to held-out outcomes, per env family and budget.

For every field of the schema (or `--fields`), one or more single-field moves away from the
seed bundle `coder@1` are run by the built-in agent on identical instances (env × pool seed,
agent seed 0) and paired with the seed: r = δq / max(|q_seed|, 1) as in the gate. Beside
them stands the **noise floor**: the seed bundle itself under other agent seeds, paired with
agent seed 0 on the same instances — how much r moves when nothing but the agent's own
randomness changes. A move "moves the score" in a family when its 90 % bootstrap interval
of mean r excludes 0 and |mean r| exceeds the noise floor's mean |r|.

Fields that only LLM agents read (`budget.max_llm_calls`, `max_tokens`, `max_usd`) are
listed but not run: the built-in agent makes no LLM calls. Every run goes through the real
host (`ole.runner`), results are stored in `--workdir` (re-running resumes, nothing is paid
twice), and the pools (501+ by default) are disjoint from the search, gate and comparison
pools of `ole evolve` and `experiments/evolved_vs_initial.py`.

    nice -n 10 python experiments/sensitivity.py --out experiments/results/sensitivity.md
    python experiments/sensitivity.py --smoke       # 2 fields, 1 env, budget 4 (the test)
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ole.bundle import bundle_from_data  # noqa: E402
from ole.chosen import ChosenVersion  # noqa: E402
from ole.evolve.store import EvaluationStore  # noqa: E402
from ole.executors import LocalExecutor  # noqa: E402
from ole.loop_policy import COMPONENTS, LoopPolicy  # noqa: E402
from ole.jobs import run_job  # noqa: E402
from ole.paired import PairedEvaluation, eval_key, make_pair  # noqa: E402
from ole.registry import Registry  # noqa: E402
from ole.trace import RunCondition, TaskSpec  # noqa: E402

LLM_ONLY = ("budget.max_llm_calls", "budget.max_tokens", "budget.max_usd")
"""Read by LLM agents only (the built-in agent makes no LLM calls): listed, not run."""

MOVES: dict[str, tuple] = {
    "observation.summary_fields": (("status", "mean_return", "episode_lengths", "errors"),
                                   ("status", "mean_return", "returns")),
    "observation.worst_k_episodes": (0, 8),
    "observation.trajectory_window": (0, 500),
    "observation.read_stdout": (False,),
    "observation.max_context_chars": (500,),
    "planning.phases": (("tuning", "confirmation"), ("synthesis", "tuning"), ("synthesis", "confirmation")),
    "planning.max_mechanisms": (1, 2, 8),
    "planning.plateau_submits": (2, 16),
    "planning.on_plateau": ("restructure", "widen_search"),
    "memory.top_k_programs": (1, 8),
    "memory.edit_log_size": (0, 4),
    "memory.carry_lessons": (False,),
    "action.episodes_per_submit": (1, 2, 8),
    "action.index_selection": ("fresh", "mixed"),
    "action.step_size": (0.1, 1.0),
    "action.population": (2, 3, 12),
    "action.edit_granularity": ("function", "file"),
    "verification.static_checks": (False,),
    "verification.retest_episodes": (0, 1, 8),
    "verification.margin": (0.05, 0.2),
    "verification.matched_comparison": (False,),
    "recovery.on_error_verdict": ("retry", "restructure"),
    "recovery.on_regression": ("keep", "restructure"),
    "recovery.max_retries": (0, 6),
    "stopping.mode": ("finish_early",),
    "stopping.patience_submits": (2,),
    "stopping.reserve_episodes": (4,),
    "budget.synthesis_fraction": (0.1, 0.6),
    "budget.confirmation_fraction": (0.0, 0.4),
    "budget.wall_time_s": (1.0,),
}
"""Hand-picked moves per field: values a user would plausibly try, spanning each field's range.
A field of the schema missing here is still run, with `default_moves` (so a new field is never
silently left out of the map)."""

DEPENDS = {"stopping.patience_submits": {"stopping.mode": "finish_early"},
           "stopping.reserve_episodes": {"stopping.mode": "finish_early"}}
"""Fields that only act together with another setting (documented in docs/loop-policy.md):
their move is made with that setting, and the row says so."""


def all_fields() -> list[str]:
    return [f"{c}.{f}" for c in COMPONENTS for f in type(getattr(LoopPolicy(), c)).model_fields]


def default_moves(value) -> tuple:
    """Moves for a field without hand-picked ones: flip a bool, x1/3 and x3 of a number."""
    if isinstance(value, bool):
        return (not value,)
    if isinstance(value, (int, float)):
        return (type(value)(max(1, value / 3)) if value else 1, type(value)(value * 3) if value else 1)
    return ()


def variants(fields: list[str]) -> list[tuple[str, dict]]:
    """(label, {path: value}) for every move of every field, the seed's own value excluded."""
    seed = LoopPolicy().model_dump(mode="json")
    out = []
    for path in fields:
        comp, name = path.split(".")
        for value in MOVES.get(path) or default_moves(seed[comp][name]):
            value = list(value) if isinstance(value, tuple) else value
            if value == seed[comp][name]:
                continue
            change = {**DEPENDS.get(path, {}), path: value}
            out.append((f"{path}={_show(value)}", change))
    return out


def parse_budget_fields(spec: str) -> dict[int, list[str]]:
    """`BUDGET:FIELD,FIELD;BUDGET:FIELD` (fields also joined by `+`) -> {budget: fields}.

    Every name must be a Loop Policy field: a typo would otherwise run no move at that budget
    and leave a table with only its noise floor."""
    known, out = set(all_fields()), {}
    for part in (x.strip() for x in spec.split(";")):
        if not part:
            continue
        budget, sep, names = part.partition(":")
        fields = [f.strip() for f in names.replace("+", ",").split(",") if f.strip()]
        if not sep or not budget.strip().isdigit() or not fields:
            raise SystemExit(f"--budget-fields: '{part}' is not BUDGET:FIELD[,FIELD...]")
        unknown = [f for f in fields if f not in known]
        if unknown:
            raise SystemExit(f"--budget-fields: unknown field(s) {', '.join(unknown)} (fields: component.name, "
                             f"e.g. action.population)")
        out[int(budget)] = fields
    return out


def combos(specs: list[str]) -> list[tuple[str, dict]]:
    """`LABEL=PATH:VALUE,PATH:VALUE` -> (label, {path: value}); values are JSON (strings may be bare)."""
    out = []
    for spec in specs:
        label, _, body = spec.partition("=")
        change = {}
        for part in body.split(","):
            path, _, raw = part.partition(":")
            try:
                change[path.strip()] = json.loads(raw)
            except json.JSONDecodeError:
                change[path.strip()] = raw.strip()
        out.append((f"combo {label}: " + ", ".join(f"{k}={_show(v)}" for k, v in change.items()), change))
    return out


def _show(value) -> str:
    return "[" + ",".join(value) + "]" if isinstance(value, list) else str(value)


def variant_bundle(base, change: dict, label: str):
    data = json.loads(base.model_dump_json())
    for path, value in change.items():
        comp, name = path.split(".")
        data["loop_policy"][comp][name] = value
    data["provenance"] = {**data["provenance"], "parents": [1], "edge": "manual", "mode": "manual",
                          "proposer": "human", "created_at": None, "note": f"sensitivity move {label}",
                          "generation": 1, "evidence_ids": []}
    return bundle_from_data(data)


def bootstrap_ci(r: np.ndarray, level: float = 0.9, n: int = 4000, seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (two-sided, `level` coverage)."""
    if r.size < 2:
        return float(r.mean()), float(r.mean())
    rng = np.random.default_rng(seed)
    means = rng.choice(r, size=(n, r.size), replace=True).mean(axis=1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="gym/acrobot,gym/continuouscar,gym/reacher5,gym/pusher5,gym/halfcheetah5,"
                   "gymnasium/MiniGrid-FourRooms-v0,gymnasium/roundabout-v0",
                   help="comma-separated env slugs (several families)")
    p.add_argument("--budgets", default="32,128", help="episode budgets; <=32 runs the quick profile, else bench")
    p.add_argument("--pools", default="501,502,503", help="pool seeds (instances per env and budget)")
    p.add_argument("--noise-seeds", default="1,2", help="other agent seeds of the seed bundle (noise floor)")
    p.add_argument("--fields", default="", help="comma-separated field paths (default: every field; none: only --combo)")
    p.add_argument("--budget-fields", default="", help="budget:fields overrides, e.g. "
                   "'128:action.population,action.episodes_per_submit;64:budget.synthesis_fraction' to run only "
                   "some fields at a budget")
    p.add_argument("--combo", action="append", default=[], metavar="LABEL=PATH:VALUE,...",
                   help="also run a multi-field move, e.g. 'lean=verification.retest_episodes:0,"
                        "budget.confirmation_fraction:0.0' (values parsed as JSON; repeatable)")
    p.add_argument("--workers", type=int, default=2, help="parallel runs")
    p.add_argument("--workdir", default="experiments/out/sensitivity", help="registry, store, runs, traces")
    p.add_argument("--fresh", action="store_true", help="delete --workdir first (default: resume)")
    p.add_argument("--out", default=None, help="Markdown table path (JSON of every pair beside it)")
    p.add_argument("--smoke", action="store_true", help="tiny run: 2 fields, acrobot, budget 4, 1 pool")
    args = p.parse_args()
    if args.smoke:
        args.envs, args.budgets, args.pools, args.noise_seeds = "gym/acrobot", "4", "501", "1"
        args.fields = args.fields or "action.episodes_per_submit,budget.max_tokens"
    return args


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def run(args) -> dict:
    work = Path(args.workdir)
    if args.fresh and work.exists():
        shutil.rmtree(work)
    (work / "bundles").mkdir(parents=True, exist_ok=True)
    if not (work / "bundles" / "coder.yaml").exists():
        shutil.copy(ROOT / "bundles" / "coder.yaml", work / "bundles" / "coder.yaml")
    reg = Registry(work / "bundles")
    seed = reg.get("coder@1")
    fields = [] if args.fields == "none" else [f for f in (args.fields.split(",") if args.fields else all_fields()) if f]
    per_budget = parse_budget_fields(args.budget_fields)
    envs, pools, noise = args.envs.split(","), _ints(args.pools), _ints(args.noise_seeds)
    store = EvaluationStore(work / "evaluations.sqlite3")
    rows: list[dict] = []
    t0 = time.time()
    with LocalExecutor(args.workers) as ex:
        done = [0]

        def on_result(job, res):
            done[0] += 1
            q = "failed" if res.q is None else f"q={res.q:.1f}"
            print(f"  [{done[0]}] {job.bundle_ref:<10} {job.task.env:<34} b{job.task.budget} pool {job.task.pool_seed}"
                  f" seed {job.condition.seed}: {q} ({(time.time() - t0) / 60:.1f} min)", flush=True)

        paired = PairedEvaluation(ex, store, run_job, traces_root=str(work / "traces"), runs_root=str(work / "runs"),
                                  on_result=on_result)
        for budget in _ints(args.budgets):
            profile = "quick" if budget <= 32 else "bench"
            chosen = [f for f in fields if f not in LLM_ONLY and (budget not in per_budget or f in per_budget[budget])]
            cands = []
            for label, change in variants(chosen) + combos(args.combo):
                b = variant_bundle(seed.bundle, change, label)
                known = reg.find_content(b.name, b.content_hash)
                cands.append((label, known or reg.register(b)))
            tasks = [TaskSpec(env=e, profile=profile, budget=budget, pool_seed=p) for e in envs for p in pools]
            base = [(t, RunCondition(host="builtin", seed=0)) for t in tasks]
            noisy = [(t, RunCondition(host="builtin", seed=s)) for t in tasks for s in noise]
            print(f"budget {budget} ({profile}): {len(cands)} moves x {len(base)} instances + noise floor "
                  f"({len(noisy)} runs)", flush=True)
            paired.run([ChosenVersion(seed.ref, seed.bundle)], base + noisy)
            for t in tasks:
                s0, fam = store.get(eval_key(seed.bundle.content_hash, t, RunCondition(host="builtin", seed=0)))
                for s in noise:
                    cond = RunCondition(host="builtin", seed=s)
                    other, _ = store.get(eval_key(seed.bundle.content_hash, t, cond))
                    rows.append(_row("noise floor", "noise", budget, t, fam, make_pair(t, cond, fam, s0, other)))
            pairs = paired.pairs(ChosenVersion(seed.ref, seed.bundle), [ChosenVersion(reg_.ref, reg_.bundle) for _, reg_ in cands], base)
            for label, reg_ in cands:
                for p in pairs[reg_.ref]:
                    rows.append(_row(label, label.split(":")[0] if label.startswith("combo") else label.split("=")[0],
                                 budget, p.task, p.family, p))
    store.close()
    return {"rows": rows, "envs": envs, "pools": pools, "noise_seeds": noise, "budgets": _ints(args.budgets),
            "fields": fields, "wall_min": (time.time() - t0) / 60}


def _row(label: str, field: str, budget: int, task: TaskSpec, family: str, pair) -> dict:
    return {"variant": label, "field": field, "budget": budget, "env": task.env, "pool": task.pool_seed,
            "family": family, "r": pair.r, "q_seed": pair.champion.q, "q_variant": pair.challenger.q,
            "score_seed": pair.champion.score, "score_variant": pair.challenger.score, "failure": pair.failure,
            "wall_seed": pair.champion.wall_s, "wall_variant": pair.challenger.wall_s,
            "episodes_seed": pair.champion.episodes, "episodes_variant": pair.challenger.episodes}


def summarize(rows: list[dict]) -> dict:
    """Per (variant, budget, family): n, mean r, 90 % CI, mean |r|, share of bit-identical scores."""
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        groups[(row["variant"], row["budget"], row["family"])].append(row)
        groups[(row["variant"], row["budget"], "all")].append(row)
    out = {}
    for key, rs in groups.items():
        r = np.array([x["r"] for x in rs], dtype=float)
        lo, hi = bootstrap_ci(r)
        same = sum(x["score_seed"] is not None and x["score_seed"] == x["score_variant"] for x in rs)
        out[key] = {"n": len(rs), "mean_r": float(r.mean()), "lo": lo, "hi": hi, "abs_r": float(np.abs(r).mean()),
                    "identical": same / len(rs)}
    return out


def moves_score(cell: dict, noise: dict | None) -> bool:
    """Above noise: >= 3 pairs, the 90 % interval excludes 0, |mean r| exceeds the noise floor's mean |r|."""
    floor = noise["abs_r"] if noise else 0.0
    return cell["n"] >= 3 and (cell["lo"] > 0 or cell["hi"] < 0) and abs(cell["mean_r"]) > floor


def markdown(res: dict, argv: list[str]) -> str:
    stats = summarize(res["rows"])
    fams = sorted({r["family"] for r in res["rows"]})
    lines = ["# Sensitivity map: Loop Policy fields vs held-out outcome (built-in agent)", "",
             f"Command: `python experiments/sensitivity.py {' '.join(argv)}`", "",
             f"Envs {', '.join(res['envs'])}; pools {res['pools']}; agent seed 0 for every move; noise floor = "
             f"the seed bundle under agent seeds {res['noise_seeds']} paired with seed 0. Cell: mean r over "
             "the family's pairs [90 % percentile-bootstrap interval]; **bold** = moves the score above noise "
             "(interval excludes 0 and |mean r| > the noise floor's mean |r|); `=` = every pair's held-out "
             f"score bit-identical to the seed's. Wall time {res['wall_min']:.0f} min on a shared 2-core machine.", ""]
    for budget in res["budgets"]:
        noise = {f: stats.get(("noise floor", budget, f)) for f in fams + ["all"]}
        labels = sorted({r["variant"] for r in res["rows"] if r["budget"] == budget and r["variant"] != "noise floor"})
        lines += [f"## Budget {budget} ({'quick' if budget <= 32 else 'bench'} profile)", "",
                  "| move | " + " | ".join(fams) + " | all |", "|---" * (len(fams) + 2) + "|"]
        nrow = ["noise floor (mean \\|r\\|)"]
        for f in fams + ["all"]:
            c = noise[f]
            nrow.append("-" if c is None else f"{c['abs_r']:.3f} (mean {c['mean_r']:+.3f})")
        lines.append("| " + " | ".join(nrow) + " |")
        for label in labels:
            cells = [label.replace("|", "\\|")]
            for f in fams + ["all"]:
                c = stats.get((label, budget, f))
                if c is None:
                    cells.append("-")
                    continue
                text = f"{c['mean_r']:+.3f} [{c['lo']:+.2f}, {c['hi']:+.2f}]"
                if c["identical"] == 1.0:
                    text += " ="
                cells.append(f"**{text}**" if moves_score(c, noise[f]) else text)
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
        lines += _per_env(res, budget)
    inert = [f for f in res["fields"] if f not in LLM_ONLY and _inert(stats, res, f)]
    lines += ["## Fields with no effect anywhere in this map", "",
              ("Every move of these left every pair's held-out score bit-identical: " + ", ".join(f"`{f}`" for f in inert))
              if inert else "None: every field run moved at least one held-out score.",
              "", "LLM-only fields, not run for the built-in agent: " + ", ".join(f"`{f}`" for f in LLM_ONLY), ""]
    return "\n".join(lines) + "\n"


def _per_env(res: dict, budget: int) -> list[str]:
    """Per env: seed q, noise floor, and the best and worst moves (where the signal is)."""
    lines = [f"Per env at budget {budget}: seed's mean q, noise floor mean |r|, strongest moves (mean r).", "",
             "| env | q seed | noise \\|r\\| | best moves | worst moves | bit-identical moves |", "|---|---|---|---|---|---|"]
    for env in res["envs"]:
        rs = [r for r in res["rows"] if r["budget"] == budget and r["env"] == env]
        if not rs:
            continue
        noise = [abs(r["r"]) for r in rs if r["variant"] == "noise floor"]
        qs = [r["q_seed"] for r in rs if r["variant"] == "noise floor" and r["q_seed"] is not None]
        by: dict[str, list[float]] = defaultdict(list)
        same: dict[str, bool] = defaultdict(lambda: True)
        for r in rs:
            if r["variant"] != "noise floor":
                by[r["variant"]].append(r["r"])
                same[r["variant"]] &= r["score_seed"] == r["score_variant"]
        ranked = sorted(((sum(v) / len(v), k) for k, v in by.items()), reverse=True)
        best = ", ".join(f"{k} {m:+.2f}" for m, k in ranked[:3])
        worst = ", ".join(f"{k} {m:+.2f}" for m, k in ranked[-2:])
        n_same = sum(same[k] for k in by)
        lines.append(f"| {env} | {np.mean(qs):.1f} | {np.mean(noise):.3f} | {best} | {worst} | {n_same}/{len(by)} |"
                     if qs and noise else f"| {env} | - | - | {best} | {worst} | {n_same}/{len(by)} |")
    return lines + [""]


def _inert(stats: dict, res: dict, field: str) -> bool:
    rows = [r for r in res["rows"] if r["field"] == field]
    return bool(rows) and all(r["score_seed"] == r["score_variant"] for r in rows)


def main() -> None:
    args = parse()
    res = run(args)
    text = markdown(res, sys.argv[1:])
    print(text)
    if args.out:
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(res, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
