"""Evolved vs initial: `ole evolve` from a fresh registry, then the released champion(s) vs the seed on unseen tasks.

1. Offline evolution exactly as `make evolve` runs it (`ole evolve --mode offline` with the
   flags below, in its own registry and workdir; re-running resumes from the stored results).
2. Every evaluation task is routed the way a real task boundary routes it
   (`Registry.select`: the most specific released bundle whose scope matches, else the
   channel's general champion) and paired with the seed bundle on **pools used neither in
   search nor in the gate**, over the search envs and over `--heldout-envs` that evolution
   never saw at all, at **every budget of `--budgets`** (32 and 128: a release covers only the
   budget band its gate sampled). A task the evolved registry still routes to the seed is a pair
   with r = 0 by construction (same bundle, same task, same agent seed: the runs are identical)
   and is reported as such without a run. Reported per budget: mean r with a 90 % percentile-
   bootstrap interval (two-sided, labelled as such), over the workload envs, over the unseen
   envs, per family and per env, and the win rate.
3. Ablation: the same evolution from a deliberately minimal starting policy
   (`experiments/bundles/minimal.yaml`: one mechanism, tuning only, large submits, no retests,
   no confirmation), then minimal vs evolved-from-minimal vs the hand-written seed on the same
   unseen tasks: the share of the hand-written seed's quality OLE recovers by itself.
4. The lineage picture (PNG) and, where `ole report` exists, the HTML report are written next
   to the results.

    nice -n 10 python experiments/evolved_vs_initial.py --out experiments/results/evolved_vs_initial.md
    python experiments/evolved_vs_initial.py --smoke      # tiny budget, one env (the test)
"""
from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from intervals import ci90  # noqa: E402  (experiments/, the script's own folder)

from ole.chosen import ChosenVersion  # noqa: E402
from ole.evolve.store import EvaluationStore  # noqa: E402
from ole.executors import LocalExecutor  # noqa: E402
from ole.jobs import run_job  # noqa: E402
from ole.registry.lineage import Lineage  # noqa: E402
from ole.paired import PairedEvaluation, env_family, make_pair  # noqa: E402
from ole.registry import Registry  # noqa: E402
from ole.trace import RunCondition, TaskSpec  # noqa: E402

MINIMAL = ROOT / "experiments" / "bundles" / "minimal.yaml"
TEST_ENVS = ("gym/acrobot", "gymnasium/CartPole-v1", "gymnasium/LunarLander-v3", "gymnasium/Hopper-v5",
             "gymnasium/Swimmer-v5", "gymnasium/InvertedPendulum-v5", "gymnasium/MiniGrid-DoorKey-8x8-v0",
             "gymnasium/MiniGrid-Empty-8x8-v0", "gymnasium/highway-fast-v0", "gym/ant5")
"""Test envs of the releases-that-travel table: 4 families, none a search env of `make evolve`
(halfcheetah5, pusher5, continuouscar) nor a default transfer env (`ole.evolve.DEFAULT_TRANSFER`)."""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--evolve-args", default="", help="extra `ole evolve --mode offline` flags, as one string "
                   "(default: none, i.e. exactly what `make evolve` runs)")
    p.add_argument("--eval-pools", default="301,302,303,304,305,306", help="pools of this comparison (unseen)")
    p.add_argument("--heldout-envs", default=",".join(TEST_ENVS),
                   help="test envs never used by evolution in any role (not search, transfer or gate), also compared")
    p.add_argument("--budgets", default="32,128", help="episode budgets of the comparison tasks")
    p.add_argument("--no-ablation", action="store_true", help="skip the minimal-seed ablation")
    p.add_argument("--workers", type=int, default=2, help="parallel runs of the comparison")
    p.add_argument("--workdir", default="experiments/out/evolved_vs_initial", help="registries, stores, runs, traces")
    p.add_argument("--fresh", action="store_true", help="delete --workdir first (default: resume)")
    p.add_argument("--out", default=None, help="Markdown report path (lineage PNG and JSON beside it)")
    p.add_argument("--smoke", action="store_true", help="tiny run for the test")
    args = p.parse_args()
    if args.smoke:
        args.evolve_args = ("--envs gym/acrobot --budget 4 --search-pools 101 --gate-pools 201 --population 2 "
                            "--generations 1 --workers 1")
        args.evolve_args += " --gate-budgets 4"
        args.eval_pools, args.heldout_envs, args.workers, args.budgets = "301", "gym/reacher5", 1, "4,8"
    return args


def evolve(args, root: Path, work: Path) -> dict:
    """`ole evolve --mode offline` in its own registry root, once per workdir.

    An interrupted evolution resumes when this script runs again; a finished one is read back
    from `evolve.json` (running `ole evolve` again would start the next round from the champion
    it released, which is not the evolution this comparison is about)."""
    done = work / "evolve.json"
    if done.is_file():
        return json.loads(done.read_text())
    cmd = [sys.executable, "-m", "ole.cli", "--root", str(root), "--json", "evolve", "--mode", "offline",
           "--workdir", str(work / "evolve"), "--traces", str(work / "traces"), *args.evolve_args.split()]
    print("$ " + " ".join(cmd[2:]), flush=True)
    out = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    data = json.loads(out.stdout)
    done.parent.mkdir(parents=True, exist_ok=True)
    done.write_text(json.dumps(data, indent=1))
    return data


def fresh_root(work: Path, seed_file: Path) -> Path:
    root = work / "root"
    if not root.exists():
        root.mkdir(parents=True)
        shutil.copy(seed_file, root / seed_file.name)
    return root


def instances(summary: dict, args) -> list[tuple[TaskSpec, RunCondition]]:
    """Search envs and held-out envs, each on every comparison pool, under the evolution's profile/budget."""
    cfg = summary["config"]
    envs = list(cfg["suite"]["envs"]) + [e for e in args.heldout_envs.split(",") if e]
    pools = [int(x) for x in args.eval_pools.split(",")]
    used = set(cfg["search_pools"]) | set(cfg["gate_pools"]) | set(cfg["gate_extra_pools"])
    if used & set(pools):
        raise SystemExit(f"--eval-pools {sorted(used & set(pools))} were used in search or gate; pick unused pools")
    s = cfg["suite"]
    budgets = [int(b) for b in args.budgets.split(",")]
    return [(TaskSpec(env=e, profile=s["profile"], budget=b, pool_seed=p),
             RunCondition(host=s["host"], seed=seed, model=s["model"]))
            for b in budgets for p in pools for e in envs for seed in cfg["agent_seeds"]]


def routed(reg: Registry, channel: str, task: TaskSpec, cond: RunCondition):
    """What a task boundary would hand this task (the scoped champion): the task's context with
    its features (`context_for`, as `ole run` and `ole agent work` build it), so feature scopes match."""
    from ole.registry.scopes import context_for
    return reg.select(channel, context_for(task, cond))


def compare(paired: PairedEvaluation, base, reg: Registry, channel: str, insts) -> list[dict]:
    """Routed bundle vs `base` on every instance; same-bundle tasks are r = 0 without a run."""
    routes = [routed(reg, channel, t, c) for t, c in insts]
    by_bundle: dict[str, list] = defaultdict(list)  # each routed bundle runs only where it is routed
    for inst, sel in zip(insts, routes):
        if sel.bundle.bundle.content_hash != base.bundle.content_hash:
            by_bundle[sel.ref].append((inst, sel.bundle.bundle))
    for ref, items in by_bundle.items():
        paired.run([ChosenVersion(base.ref, base.bundle), ChosenVersion(ref, items[0][1])], [inst for inst, _ in items])
    rows = []
    for (task, cond), sel in zip(insts, routes):
        fam = env_family(task.env)
        if sel.bundle.bundle.content_hash == base.bundle.content_hash:
            rows.append({"env": task.env, "family": fam, "pool": task.pool_seed, "budget": task.budget,
                         "bundle": sel.ref, "scope": sel.scope, "r": 0.0, "q_base": None, "q_evolved": None,
                         "same_bundle": True})
            continue
        from ole.paired import eval_key
        champ, _ = paired.store.get(eval_key(base.bundle.content_hash, task, cond))
        chall, _ = paired.store.get(eval_key(sel.bundle.bundle.content_hash, task, cond))
        pair = make_pair(task, cond, fam, champ, chall)
        rows.append({"env": task.env, "family": fam, "pool": task.pool_seed, "budget": task.budget,
                     "bundle": sel.ref, "scope": sel.scope, "r": pair.r, "q_base": pair.champion.q,
                     "q_evolved": pair.challenger.q, "same_bundle": False})
    return rows


def table(rows: list[dict], key: str) -> list[str]:
    by: dict[str, list[dict]] = defaultdict(list)
    for row in rows:
        by[row[key]].append(row)
    out = [f"| {key} | pairs | routed to | q seed (mean) | q routed (mean) | mean r [90 % CI] | win rate |",
           "|---|---|---|---|---|---|---|"]
    for name, rs in sorted(by.items()):
        m, lo, hi = ci90([x["r"] for x in rs])
        qb = [x["q_base"] for x in rs if x["q_base"] is not None]
        qe = [x["q_evolved"] for x in rs if x["q_evolved"] is not None]
        win = (sum(x["r"] > 0 for x in rs) + 0.5 * sum(x["r"] == 0 for x in rs)) / len(rs)
        out.append(f"| {name} | {len(rs)} | {', '.join(sorted({x['bundle'] for x in rs}))} | {_m(qb)} | {_m(qe)} | "
                   f"{m:+.4f} [{lo:+.4f}, {hi:+.4f}] | {win:.2f} |")
    return out


def _m(values) -> str:
    return f"{sum(values) / len(values):.2f}" if values else "-"


def evolution_lines(summary: dict, args) -> list[str]:
    """What `ole evolve` gated and released, scope by scope."""
    out = [f"Evolution (`ole evolve --mode offline {args.evolve_args}`): {len(summary['candidates'])} candidates "
           f"proposed; {len(summary.get('gates') or [])} scope(s) gated; released: "
           + (", ".join(summary.get("released") or []) or "nothing") + ".", ""]
    for g in summary.get("gates") or []:
        gain = g.get("gain") or {}
        out.append(f"- `{g['final']}` (from `{g['source']}`) for {', '.join(g['envs'])}: **{g['verdict']}**"
                   + (f" — gate mean r {gain['mean_r']:+.3f}, {gain['ci_level']:.0%} CI [{gain['ci_low']:+.3f}, "
                      f"{gain['ci_high']:+.3f}] on {gain['n_pairs']} pairs" if gain else "")
                   + (f"; released for `{g['released_scope']}`" if g.get("released_scope") else "")
                   + f"; changed: {'; '.join(g.get('changes') or []) or 'nothing'}")
    out += ["", f"Comparison pools {args.eval_pools} (unseen by search and gate) at budgets {args.budgets}; "
            f"unseen envs {args.heldout_envs} (never used by evolution). Each task gets what a task boundary "
            "would hand it (`Registry.select`); a task routed to the seed is r = 0 by construction.", ""]
    return out


def ablation(args, work: Path, paired: PairedEvaluation, seed_reg: Registry, insts) -> list[str]:
    """Evolve from the minimal seed; how much of the hand-written seed's quality does OLE recover?"""
    root = fresh_root(work / "minimal", MINIMAL)
    summary = evolve(args, root, work / "minimal")
    reg = Registry(root)
    minimal = reg.get(f"{reg.names()[0]}@1")
    seed = seed_reg.get("coder@1")
    rows = compare(paired, minimal, reg, summary["config"]["channel"], insts)
    paired.run([ChosenVersion(seed.ref, seed.bundle)], insts)
    q = {"minimal": [], "evolved": [], "seed": []}
    from ole.paired import eval_key
    for (task, cond), row in zip(insts, rows):
        qm, _ = paired.store.get(eval_key(minimal.bundle.content_hash, task, cond))
        qs, _ = paired.store.get(eval_key(seed.bundle.content_hash, task, cond))
        if qm.q is None or qs.q is None:
            continue
        q["minimal"].append(qm.q)
        q["seed"].append(qs.q)
        q["evolved"].append(qm.q if row["same_bundle"] else row["q_evolved"] if row["q_evolved"] is not None else qm.q)
    mean = {k: float(np.mean(v)) if v else float("nan") for k, v in q.items()}
    gap = mean["seed"] - mean["minimal"]
    share = (mean["evolved"] - mean["minimal"]) / gap if gap else float("nan")
    return ["## Ablation: evolution from a deliberately minimal starting policy", "",
            f"Start: `{MINIMAL.relative_to(ROOT)}` ({minimal.ref}); same evolve flags.", "",
            *evolution_lines(summary, args),
            f"On the same {len(q['seed'])} unseen tasks: mean q minimal {mean['minimal']:.2f}, evolved from minimal "
            f"{mean['evolved']:.2f}, hand-written seed {mean['seed']:.2f}. **Share of the seed's advantage over the "
            "minimal policy that OLE recovered by itself: "
            + (f"{share:.0%}**" if np.isfinite(share) else "undefined** (the seed is no better than the minimal policy here)")
            + " ((q evolved − q minimal) / (q seed − q minimal), means over tasks).", "",
            *table(rows, "family"), ""]


def main() -> None:
    args = parse()
    work = Path(args.workdir)
    if args.fresh and work.exists():
        shutil.rmtree(work)
    t0 = time.time()
    root = fresh_root(work / "seed", ROOT / "bundles" / "coder.yaml")
    summary = evolve(args, root, work / "seed")
    reg = Registry(root)
    seed = reg.get("coder@1")
    insts = instances(summary, args)
    store = EvaluationStore(work / "comparison.sqlite3")
    lines = ["# Evolved vs initial bundle (offline mode, built-in agent and proposer)", "",
             "Command: `python experiments/evolved_vs_initial.py " + " ".join(sys.argv[1:]) + "`", ""]
    with LocalExecutor(args.workers) as ex:
        paired = PairedEvaluation(ex, store, run_job, traces_root=str(work / "comparison-traces"),
                                  runs_root=str(work / "comparison-runs"))
        rows = compare(paired, seed, reg, summary["config"]["channel"], insts)
        lines += evolution_lines(summary, args)
        workload = set(summary["config"]["suite"]["envs"])
        for budget in sorted({x["budget"] for x in rows}):
            at = [x for x in rows if x["budget"] == budget]
            lines += [f"## Budget {budget}", ""]
            for label, subset in (("workload envs", [x for x in at if x["env"] in workload]),
                                  ("unseen envs", [x for x in at if x["env"] not in workload]), ("all", at)):
                if subset:
                    m, lo, hi = ci90([x["r"] for x in subset])
                    routed_seed = sum(x["same_bundle"] for x in subset)
                    lines.append(f"- **{label}** ({len(subset)} pairs, {routed_seed} routed to the seed itself): "
                                 f"mean r **{m:+.4f}**, 90 % CI [{lo:+.4f}, {hi:+.4f}]")
            per_env = {e: float(np.mean([x["r"] for x in at if x["env"] == e])) for e in sorted({x["env"] for x in at})}
            worst = min(per_env, key=per_env.get)
            lines += [f"- lowest env mean r: {per_env[worst]:+.4f} ({worst})", "",
                      "Per family:", "", *table(at, "family"), "", "Per env:", "", *table(at, "env"), ""]
        if not args.no_ablation:
            lines += ablation(args, work, paired, reg, insts)
    lines += ["Gate records (registry `gate_decision` events):", ""]
    for e in reg.events(kind="gate_decision"):
        st = e.payload["stats"]
        lines.append(f"- #{e.seq} `{e.ref}` vs `{e.payload['champion']}`: {e.payload['verdict']} — {st['n_pairs']} pairs"
                     f" in {max(1, len(e.payload.get('looks') or []))} look(s), mean r {st['mean_r']:+.4f}, "
                     f"p {st['p_value']:.4f}; {'; '.join(e.payload['reasons'])}")
    lines += ["", f"Wall time {(time.time() - t0) / 60:.0f} min (shared 2-core machine).", ""]
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        png = out.with_suffix(".lineage.png")
        Lineage.from_registry(reg).write_png(png)
        lines += [f"Lineage: `{png.name}` (next to this file).", ""]
        out.with_suffix(".json").write_text(json.dumps({"summary": summary, "pairs": rows}, indent=1))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
