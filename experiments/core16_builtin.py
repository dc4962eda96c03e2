"""Core16 with the built-in agent and the seed bundle: held-out mean per env vs the paper.

One run per env (agent seed fixed) through `ole.runner.run_task`, i.e. a real
`evogym serve` host per env. Results are appended to a JSON file as each env finishes
(so an interrupted sweep keeps what it measured) and rendered to Markdown next to the
paper's five rows, with a rank-normalized score and best-so-far curves.

    nice -n 10 python experiments/core16_builtin.py --profile bench --out experiments/results/core16_builtin

Run names (trace ids) encode env, bundle, seed and time. CarRacing episodes cost ~15 s
each under the sandbox; `--budget-override gym/racing=32` runs it at a reduced budget
(reported as such), `--skip gym/racing` leaves it out.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
import re
import time
from pathlib import Path

from evogym.anchors import AGENTS, PAPER_ROWS, RANDOM
from evogym.envs import CORE16
from ole.runner import run_task
from ole.trace import RunCondition, TaskSpec

ROWS = (*AGENTS, RANDOM)
COMMANDS = (
    "nice -n 10 python experiments/core16_builtin.py --profile bench --envs <7 envs> --out <dir>/a   # two shards side by side",
    "nice -n 10 python experiments/core16_builtin.py --profile bench --envs <8 envs> --out <dir>/b",
    "nice -n 5 python experiments/core16_builtin.py --profile bench --envs gym/racing --out <dir>/racing",
    "python experiments/core16_builtin.py --render-only --out experiments/results/core16_builtin "
    "--merge <dir>/a.json <dir>/b.json <dir>/racing.json --notes experiments/results/core16_builtin_notes.md",
)
"""How the committed results were made (cheap envs at bench; CarRacing and parking reduced, see the notes)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="bench", help="host profile (paper | bench | quick)")
    p.add_argument("--bundle", default="coder@1", help="bundle ref, or `routed`: what the registry routes each task "
                   "to at its task boundary (scope champions where their scope matches, the seed elsewhere)")
    p.add_argument("--reuse", default=None, metavar="JSON",
                   help="with --bundle routed: take an env's row from this sweep when its task is routed to "
                        "--reuse-ref (the same bundle, task and agent seed give the same run; check one env by "
                        "running it with --no-reuse ENV)")
    p.add_argument("--reuse-ref", default="coder@1", help="the bundle the --reuse sweep ran (default %(default)s)")
    p.add_argument("--no-reuse", nargs="*", default=[], metavar="ENV", help="envs to run even when reusable")
    p.add_argument("--root", default=None, help="registry root (default: $OLE_ROOT, else bundles/)")
    p.add_argument("--seed", type=int, default=0, help="agent seed")
    p.add_argument("--envs", nargs="*", default=list(CORE16), help="env slugs (default: all of Core16)")
    p.add_argument("--skip", nargs="*", default=[], help="env slugs to leave out")
    p.add_argument("--budget", type=int, help="episode budget for every env (default: the profile's)")
    p.add_argument("--budget-override", nargs="*", default=[], metavar="ENV=N", help="per-env budget")
    p.add_argument("--isolation", default="bwrap", choices=("bwrap", "none"))
    p.add_argument("--host-jobs", type=int, default=1, help="host worker processes for hidden evaluation")
    p.add_argument("--runs-dir", default="runs/core16_builtin", help="host runs")
    p.add_argument("--traces-dir", default="traces", help="trace archive")
    p.add_argument("--lessons", default=None, help="lessons file (default: none, so envs stay independent)")
    p.add_argument("--out", default="experiments/results/core16_builtin", help="output stem (.json, .md, .png)")
    p.add_argument("--render-only", action="store_true", help="only re-render the Markdown/PNG from the JSON")
    p.add_argument("--recover", nargs=4, action="append", default=[], metavar=("ENV", "RUN_DIR", "PROFILE", "BUDGET"),  # BUDGET "-" = the profile's
                   help="take an env's result from a scored host run.json (when the sweep died after scoring)")
    p.add_argument("--notes", help="Markdown file appended to the rendered table (what limits the results)")
    p.add_argument("--baseline", default=None, metavar="JSON",
                   help="results file of another bundle's sweep, shown as a column beside ours")
    p.add_argument("--merge", nargs="*", default=[], metavar="JSON",
                   help="results files of other (parallel) sweeps to merge into this one first")
    return p.parse_args(argv)


def curve(trace) -> list[list[float]]:
    """Best-so-far train mean return against episodes used, one point per ok submit."""
    used, best, out = 0, None, []
    for it in trace.history:
        used += it.episodes_charged
        if it.mean_return is not None:
            best = it.mean_return if best is None else max(best, it.mean_return)
            out.append([used, best])
    return out


def routed_to(args: argparse.Namespace, env: str, budget: int | None):
    """The selection a task boundary would make for this env's task (nothing activated)."""
    from ole.registry import Registry
    from ole.registry.scopes import context_for
    cond = RunCondition(host="builtin", seed=args.seed)
    with Registry(args.root) as reg:
        return reg.select("default", context_for(TaskSpec(env=env, profile=args.profile, budget=budget), cond),
                          activate=False)


def run_env(args: argparse.Namespace, env: str, budget: int | None) -> dict:
    t0 = time.monotonic()
    task = TaskSpec(env=env, profile=args.profile, budget=budget)
    bundle = None if args.bundle == "routed" else args.bundle
    trace = run_task(task, bundle, "builtin", RunCondition(host="builtin", seed=args.seed), root=args.root,
                     runs_dir=args.runs_dir, traces_dir=args.traces_dir, lessons_path=args.lessons,
                     isolation=args.isolation, serve_args=("--jobs", str(args.host_jobs)), progress=lambda line: print(f"  {line}", flush=True))
    o = trace.outcome
    mechs = [it.mechanism for it in trace.history if it.submit_id is not None]
    return {"env": env, "trace_id": trace.trace_id, "status": o.status, "final_score": o.final_score,
            "normalized_score": o.normalized_score, "best_val_score": o.best_val_score,
            "episodes_used": o.episodes_used, "n_submits": o.n_submits, "budget": budget,
            "profile": args.profile, "mechanisms": sorted(set(m for m in mechs if m)),
            "curve": curve(trace), "wall_s": round(time.monotonic() - t0, 1),
            "bundle": trace.selection.ref if trace.selection else bundle,
            "scope": trace.selection.scope if trace.selection else None}


def reusable(args: argparse.Namespace, env: str, budget: int | None) -> dict | None:
    """With `--bundle routed --reuse JSON`: the JSON's row for an env whose task is routed to `--reuse-ref`."""
    if args.bundle != "routed" or not args.reuse or env in args.no_reuse:
        return None
    chosen = routed_to(args, env, budget)
    rows = json.loads(Path(args.reuse).read_text())
    if chosen.ref != args.reuse_ref or env not in rows or rows[env].get("budget") != budget:
        return None
    print(f"   {env}: routed to {chosen.ref} (scope {chosen.scope}): row reused from {args.reuse}", flush=True)
    return {**rows[env], "bundle": chosen.ref, "scope": chosen.scope, "reused_from": args.reuse}


def recover(env: str, run_dir: Path, profile: str, budget: str) -> dict:
    """A result entry from a host run folder: the verified run.json plus the feedback summaries."""
    doc = json.loads((run_dir / "run.json").read_text())
    o = doc["outcome"]
    used, best, pts = 0, None, []
    for path in sorted((run_dir / "workspace" / "feedback").glob("submit_*/summary.json")):
        summary = json.loads(path.read_text())
        used += summary.get("n_episodes") or 0
        if summary.get("mean_return") is not None:
            best = summary["mean_return"] if best is None else max(best, summary["mean_return"])
            pts.append([used, best])
    vals = o.get("val_scores") or {}
    mechs = {m.group(1) for path in (run_dir / "checkpoints").glob("submit_*/policy.py")
             if (m := re.search(r"mechanism: (\w+)", path.read_text(errors="replace")))}
    return {"env": env, "trace_id": None, "recovered_from": str(run_dir), "status": o["status"],
            "final_score": o["final_score"], "normalized_score": o["normalized_score"],
            "best_val_score": vals.get(str(o.get("best_submit_index"))), "episodes_used": used,
            "n_submits": len(pts), "budget": None if budget == "-" else int(budget), "profile": profile,
            "mechanisms": sorted(mechs), "curve": pts, "wall_s": None}


def rank_normalized(env: str, score: float) -> float:
    """(number of the paper's five rows strictly below ours + half the ties) / 5."""
    row = PAPER_ROWS[env]
    below = sum(v < score for v in row.values()) + 0.5 * sum(v == score for v in row.values())
    return below / len(row)


def made_with(args: argparse.Namespace) -> list[str]:
    """The command lines of the table: this invocation when it reuses the seed's rows (one command
    makes the whole table), else the seed sweep's batches."""
    if args.reuse and not args.render_only:
        return ["    " + shlex.join(["python", "experiments/core16_builtin.py", *sys.argv[1:]]), "",
                f"Rows of envs routed to `{args.reuse_ref}` are reused from `{args.reuse}` (same bundle, task and "
                f"agent seed: the same run); the envs named by `--no-reuse` were run again as a check that they are. `--root` is "
                f"the registry a fresh evolution released into (`experiments/evolved_vs_initial.py`'s "
                f"`<workdir>/seed/root`, evolved exactly as `make evolve` runs)."]
    lines = ["    " + c for c in COMMANDS]
    if args.bundle != "coder@1":
        lines.insert(0, f"    the commands below with `--root ROOT --bundle {args.bundle}` (ROOT holding the bundle's YAML)")
    return [*lines, "", "(The committed table was assembled from several batches with `--merge`/`--recover`; see the notes.)"]


def render(results: dict[str, dict], args: argparse.Namespace) -> str:
    base = json.loads(Path(args.baseline).read_text()) if args.baseline else None
    head = ["env", "ours", *(["baseline"] if base is not None else []), *ROWS, "rank-norm",
            *(["routed to"] if args.bundle == "routed" else []), "episodes", "mechanism(s)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    beats = {name: 0 for name in ROWS}
    ranks = []
    for env, r in results.items():
        score = r["final_score"]
        row = PAPER_ROWS[env]
        if score is not None:
            ranks.append(rank_normalized(env, score))
            for name in ROWS:
                beats[name] += score > row[name]
        theirs = [] if base is None else [_score_text((base.get(env) or {}).get("final_score"))]
        cells = [env, _score_text(score), *theirs, *(f"{row[n]:.4g}" for n in ROWS),
                 "-" if score is None else f"{rank_normalized(env, score):.2f}",
                 *([] if args.bundle != "routed" else [(r.get("bundle") or "?") + (" (reused)" if r.get("reused_from") else "")]),
                 f"{r['episodes_used']} ({r['profile']}" + ("" if r["budget"] is None else f", budget {r['budget']}") + ")",
                 ", ".join(r["mechanisms"])]
        lines.append("| " + " | ".join(cells) + " |")
    n = len([r for r in results.values() if r["final_score"] is not None])
    summary = [f"Envs measured: {n}/16. Mean rank-normalized score: "
               f"{(sum(ranks) / len(ranks)) if ranks else float('nan'):.3f} (1.0 = above all five rows).",
               "Beats (strictly higher held-out mean): " + ", ".join(f"{k} {v}/{n}" for k, v in beats.items()) + "."]
    if base is not None:
        worse = []
        for env, r in results.items():
            theirs = (base.get(env) or {}).get("final_score")
            if r["final_score"] is not None and theirs is not None and r["final_score"] < theirs - 0.02 * abs(theirs):
                worse.append(f"{env} ({r['final_score']:.4g} vs {theirs:.4g})")
        summary.append("More than 2 % below the baseline column: " + (", ".join(worse) or "none") + ".")
    title = ("the seed bundle" if args.bundle == "coder@1" else "the routed champions (scope champions where their "
             "scope matches, the seed elsewhere)" if args.bundle == "routed" else f"bundle `{args.bundle}`")
    compared = [] if base is None else [f"Column `baseline`: held-out means of `{args.baseline}` (same envs, profile and seed).", ""]
    head = [f"# Core16 with the built-in agent and {title}", "",
            f"Bundle `{args.bundle}`, agent seed {args.seed}, one run per env through `ole.runner.run_task` "
            "(a real `evogym serve` per env). Score = held-out mean return of the validation-selected "
            "checkpoint; the other columns are the paper's rows (reference §6.2). Made with:", "",
            *made_with(args), "",
            f"Best-so-far curves: `{Path(args.out).name}.png`; per-env details: `{Path(args.out).name}.json`.", "",
            *compared]
    notes = Path(args.notes).read_text() if args.notes else ""
    return "\n".join(head + lines) + "\n\n" + "\n".join(summary) + "\n" + ("\n" + notes if notes else "")


def _score_text(score) -> str:
    return "-" if score is None else f"{score:.4g}"


def plot(results: dict[str, dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    envs = list(results)
    cols = 4
    rows = max(1, (len(envs) + cols - 1) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 2.6 * rows), squeeze=False)
    for ax, env in zip(axes.flat, envs):
        pts = results[env]["curve"]
        if pts:
            ax.step([p[0] for p in pts], [p[1] for p in pts], where="post")
        ax.set_title(env.split("/")[-1], fontsize=9)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(envs):]:
        ax.axis("off")
    fig.supxlabel("episodes used")
    fig.supylabel("best-so-far train mean return")
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    store = out.with_suffix(".json")
    results = json.loads(store.read_text()) if store.is_file() else {}
    for env, run_dir, profile, budget in args.recover:
        results[env] = recover(env, Path(run_dir), profile, budget)
    for other in args.merge:
        results.update(json.loads(Path(other).read_text()))
    if args.merge or args.recover:
        store.write_text(json.dumps(results, indent=2) + "\n")
    overrides = dict(item.split("=", 1) for item in args.budget_override)
    if not args.render_only:
        for env in args.envs:
            if env in args.skip or env in results:
                continue
            print(f"== {env}", flush=True)
            budget = int(overrides[env]) if env in overrides else args.budget
            reused = reusable(args, env, budget)
            results[env] = reused if reused is not None else run_env(args, env, budget)
            store.write_text(json.dumps(results, indent=2) + "\n")
            print(f"   {env}: {results[env]['final_score']} ({results[env]['wall_s']} s)", flush=True)
    ordered = {env: results[env] for env in CORE16 if env in results}
    out.with_suffix(".md").write_text(render(ordered, args))
    plot(ordered, out.with_suffix(".png"))


if __name__ == "__main__":
    main()
