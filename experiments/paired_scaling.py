"""Parallel scaling of paired evaluation: the same batch of real runs on 1..N local workers (and Ray).

One batch = champion and one challenger on `--pools` × envs instances, run through
`PairedEvaluation` with a fresh in-memory store (nothing cached), once per executor
setting. Reported: wall time, speed-up over one worker, and whether every setting gave
identical pairs (same seeds -> same results wherever they run).

    nice -n 10 python experiments/paired_scaling.py --workers 1,2 --out experiments/results/paired_scaling.md

`--ray` adds Ray runs (needs the `ray` extra); on a larger machine pass e.g. `--workers 1,2,4,8`.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ole.chosen import ChosenVersion  # noqa: E402
from ole.executors import make_executor  # noqa: E402
from ole.jobs import run_job  # noqa: E402
from ole.paired import MemoryStore, PairedEvaluation  # noqa: E402
from ole.registry import Registry  # noqa: E402
from ole.trace import RunCondition, TaskSpec  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="gym/acrobot,gym/pusher5,gymnasium/MiniGrid-FourRooms-v0", help="env slugs")
    p.add_argument("--pools", type=int, default=2, help="pool seeds per env (301, 302, ...)")
    p.add_argument("--budget", type=int, default=16, help="episode budget per run")
    p.add_argument("--workers", default="1,2", help="comma-separated local worker counts")
    p.add_argument("--ray", action="store_true", help="also run with --executor ray at the largest worker count")
    p.add_argument("--workdir", default="experiments/out/paired_scaling", help="registry, runs, traces")
    p.add_argument("--out", default=None, help="Markdown report path")
    return p.parse_args()


def challenger(reg: Registry):
    champ = reg.champion()
    lp = champ.bundle.loop_policy
    child = champ.bundle.model_copy(update={"loop_policy": lp.model_copy(
        update={"action": lp.action.model_copy(update={"episodes_per_submit": 2})})})
    return champ, reg.register(child, parents=[champ.version], edge="manual", note="scaling challenger")


def one(kind: str, workers: int, work: Path, champ, chall, instances) -> tuple[float, dict]:
    with make_executor(kind, workers=workers) as ex:
        pe = PairedEvaluation(ex, MemoryStore(), run_job, traces_root=str(work / "traces"),
                              runs_root=str(work / "runs" / f"{kind}{workers}"))
        t0 = time.perf_counter()
        pairs = pe.pairs(ChosenVersion(champ.ref, champ.bundle), [ChosenVersion(chall.ref, chall.bundle)], instances)[chall.ref]
        return time.perf_counter() - t0, {(p.task.env, p.task.pool_seed): (p.champion.score, p.challenger.score)
                                          for p in pairs}


def main() -> None:
    args = parse()
    work = Path(args.workdir)
    if work.exists():
        shutil.rmtree(work)
    (work / "bundles").mkdir(parents=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", work / "bundles" / "coder.yaml")
    reg = Registry(work / "bundles")
    champ, chall = challenger(reg)
    instances = [(TaskSpec(env=e, budget=args.budget, pool_seed=301 + k), RunCondition(host="builtin"))
                 for k in range(args.pools) for e in args.envs.split(",")]
    settings = [("local", int(w)) for w in args.workers.split(",")]
    if args.ray:
        settings.append(("ray", max(w for _, w in settings)))
    rows, reference = [], None
    load0 = Path("/proc/loadavg").read_text().split()[0]
    for kind, workers in settings:
        wall, scores = one(kind, workers, work, champ, chall, instances)
        reference = reference or scores
        rows.append((kind, workers, wall, scores == reference))
        print(f"{kind} x{workers}: {wall:.1f} s, identical={scores == reference}", flush=True)
    base = rows[0][2]
    load1 = Path("/proc/loadavg").read_text().split()[0]
    lines = ["# Parallel scaling of paired evaluation", "",
             f"Command: `python experiments/paired_scaling.py --envs {args.envs} --pools {args.pools} "
             f"--budget {args.budget} --workers {args.workers}{' --ray' if args.ray else ''}`", "",
             f"Batch: {2 * len(instances)} real runs (champion + challenger on {len(instances)} instances), "
             f"machine: {os.cpu_count()} CPUs; load average (1 min) {load0} at the start, {load1} at the end.", "",
             "| executor | workers | wall s | speed-up | efficiency (speed-up / workers) | pairs identical to the first row |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {k} | {w} | {t:.1f} | {base / t:.2f}x | {base / t / w:.2f} | {'yes' if same else 'NO'} |"
              for k, w, t, same in rows]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
