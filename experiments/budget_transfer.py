"""Budget transfer: loop policies released at 32 episodes, run at 128, under both readings of their counts.

A policy OLE releases was searched at one budget. This script runs such policies beside the
seed bundle on the same unseen tasks at every budget in `--budgets`, under the two readings
of its run-length counts (`planning.plateau_submits`, `stopping.patience_submits`,
`stopping.reserve_episodes`):

* **absolute** (`budget.reference_episodes: null`, how every bundle read before): a count is
  the same number at every budget — patience 5 is 5 candidates at 32 and at 128;
* **relative** (`budget.reference_episodes: 32`, what the search now records for a policy it
  found at 32): a count is the same share of the run — patience 5 at 32 is 20 at 128.

A policy that moves no run-length count reads the same both ways (shown once). Sample sizes
(episodes per submit, retests) are numbers of episodes under both readings; a third reading
where they too scaled with the budget is not run, because for a one-episode-submit policy it is
the seed at 128 by construction (1 episode at 32 -> 4 at 128, the seed's own), i.e. r = 0 there.

Each (policy, reading, budget, env, pool) is a pair with the seed on the same task and agent seed
(`ole.paired`); the table gives mean r per env and over all, and the mean episodes spent.

    nice -n 10 python experiments/budget_transfer.py --out experiments/results/budget_transfer.md
    python experiments/budget_transfer.py --smoke --workdir /tmp/bt --out /tmp/bt.md   # the test
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

from intervals import ci90  # noqa: E402  (experiments/, the script's own folder)

from ole.bundle import bundle_from_data, load_bundle_yaml  # noqa: E402
from ole.chosen import ChosenVersion  # noqa: E402
from ole.evolve.store import EvaluationStore  # noqa: E402
from ole.executors import LocalExecutor  # noqa: E402
from ole.jobs import run_job  # noqa: E402
from ole.loop_policy import RUN_LENGTH_FIELDS  # noqa: E402
from ole.paired import PairedEvaluation, env_family, eval_key, make_pair  # noqa: E402
from ole.registry import Registry  # noqa: E402
from ole.trace import RunCondition, TaskSpec  # noqa: E402

SEED = ROOT / "bundles" / "coder.yaml"
POLICIES = {
    "released@32 (coder@23)": ROOT / "experiments" / "bundles" / "evolved.yaml",
    "1-episode submits only": None,  # the seed with action.episodes_per_submit 4 -> 1
}


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="gym/halfcheetah5,gym/pusher5,gym/continuouscar", help="envs, comma-separated")
    p.add_argument("--pools", default="301,302", help="pool seeds (unseen by make evolve's search and gate)")
    p.add_argument("--budgets", default="32,128", help="episode budgets the policies run at")
    p.add_argument("--reference", type=int, default=32, help="the budget the policies were released at")
    p.add_argument("--profile", default="quick", help="host profile (validation and held-out sizes)")
    p.add_argument("--workers", type=int, default=2, help="parallel runs")
    p.add_argument("--workdir", default="experiments/out/budget_transfer", help="registry, store, runs")
    p.add_argument("--fresh", action="store_true", help="delete --workdir first (default: resume)")
    p.add_argument("--out", default=None, help="Markdown report path (JSON beside it)")
    p.add_argument("--smoke", action="store_true", help="tiny run for the test")
    args = p.parse_args()
    if args.smoke:
        args.envs, args.pools, args.budgets, args.reference, args.workers = "gym/acrobot", "301", "2,4", 2, 1
    return args


def variants(seed_data: dict, reference: int) -> list[tuple[str, str, dict]]:
    """(policy label, reading, bundle data) for every policy and reading that differ."""
    out = []
    for label, path in POLICIES.items():
        if path is None:
            data = json.loads(json.dumps(seed_data))
            data["loop_policy"]["action"]["episodes_per_submit"] = 1
        else:
            data = load_bundle_yaml(path).model_dump(mode="json")
        data["name"] = "coder"
        data["provenance"] = {"parents": [1], "edge": "manual", "mode": "manual", "note": label}
        lp, seed_lp = data["loop_policy"], seed_data["loop_policy"]
        moved = any(lp[f.split(".")[0]][f.split(".")[1]] != seed_lp[f.split(".")[0]][f.split(".")[1]]
                    for f in (*RUN_LENGTH_FIELDS, "stopping.mode"))
        absolute = json.loads(json.dumps(data))
        absolute["loop_policy"]["budget"]["reference_episodes"] = None
        out.append((label, "absolute" if moved else "either", absolute))
        if moved:
            relative = json.loads(json.dumps(data))
            relative["loop_policy"]["budget"]["reference_episodes"] = reference
            out.append((label, "relative", relative))
    return out


def main() -> None:
    args = parse()
    work = Path(args.workdir)
    if args.fresh and work.exists():
        shutil.rmtree(work)
    t0 = time.time()
    root = work / "root"
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(SEED, root / SEED.name)
    reg = Registry(root)
    seed = reg.get("coder@1")
    runs = []
    for label, reading, data in variants(seed.bundle.model_dump(mode="json"), args.reference):
        bundle = bundle_from_data(data, source=label)
        known = reg.find_content("coder", bundle.content_hash)
        runs.append((label, reading, known or reg.register(bundle, parents=[1])))
    envs, pools = args.envs.split(","), [int(x) for x in args.pools.split(",")]
    budgets = [int(x) for x in args.budgets.split(",")]
    insts = [(TaskSpec(env=e, profile=args.profile, budget=b, pool_seed=p), RunCondition(host="builtin", seed=0))
             for b in budgets for p in pools for e in envs]
    rows = []
    with LocalExecutor(args.workers) as ex:
        paired = PairedEvaluation(ex, EvaluationStore(work / "store.sqlite3"), run_job,
                                  traces_root=str(work / "traces"), runs_root=str(work / "runs"))
        paired.run([ChosenVersion(seed.ref, seed.bundle), *[ChosenVersion(r.ref, r.bundle) for _, _, r in runs]], insts)
        for label, reading, reg_b in runs:
            for task, cond in insts:
                champ, _ = paired.store.get(eval_key(seed.bundle.content_hash, task, cond))
                chall, _ = paired.store.get(eval_key(reg_b.bundle.content_hash, task, cond))
                pair = make_pair(task, cond, env_family(task.env), champ, chall)
                rows.append({"policy": label, "ref": reg_b.ref, "reading": reading, "budget": task.budget,
                             "env": task.env, "pool": task.pool_seed, "q_seed": champ.q, "q": chall.q, "r": pair.r,
                             "episodes_seed": champ.episodes, "episodes": chall.episodes})
    lines = render(args, rows, runs, time.time() - t0)
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        out = Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps(rows, indent=1))


def render(args, rows: list[dict], runs, wall: float) -> list[str]:
    envs = args.envs.split(",")
    lines = ["# Budget transfer: policies released at 32 episodes, run at 128", "",
             "Command: `python experiments/budget_transfer.py " + " ".join(sys.argv[1:]) + "`", "",
             f"Each cell: mean r of the policy vs the seed bundle on the same tasks (pools {args.pools}, agent seed 0, "
             f"profile {args.profile}), under the reading of its run-length counts: **absolute** (as written at every "
             f"budget) or **relative** (stated for {args.reference} episodes, scaled with the budget). `either`: the "
             "policy moves no run-length count, so both readings are the same policy. Episodes: mean spent per run "
             "(the seed spends the whole budget).", "",
             "| policy | reading | budget | " + " | ".join(envs) + " | all: mean r [90 % CI] | episodes (seed) |",
             "|---|---|---|" + "---|" * len(envs) + "---|---|"]
    by: dict[tuple, list[dict]] = defaultdict(list)
    for row in rows:
        by[(row["policy"], row["reading"], row["budget"])].append(row)
    for (policy, reading, budget), rs in by.items():
        cells = []
        for env in envs:
            mine = [x["r"] for x in rs if x["env"] == env]
            cells.append(f"{np.mean(mine):+.3f}" if mine else "-")
        m, lo, hi = ci90([x["r"] for x in rs])
        eps = np.mean([x["episodes"] for x in rs])
        eps_seed = np.mean([x["episodes_seed"] for x in rs])
        lines.append(f"| {policy} | {reading} | {budget} | " + " | ".join(cells)
                     + f" | {m:+.3f} [{lo:+.3f}, {hi:+.3f}] | {eps:.0f} ({eps_seed:.0f}) |")
    lines += ["", "Policies (registered in the script's own registry):", ""]
    lines += [f"- `{r.ref}` {label}, {reading}: reference_episodes "
              f"{r.bundle.loop_policy.budget.reference_episodes}" for label, reading, r in runs]
    lines += ["", f"Wall time {wall / 60:.0f} min.", ""]
    return lines


if __name__ == "__main__":
    main()
