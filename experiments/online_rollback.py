"""Online mode with an injected harmful release: is it caught by monitoring and rolled back?

A stream of real benchmark tasks (the suite repeated with fresh pool seeds) is worked by
the active champion through `OnlineEvolution.ask()/tell()`. After `--inject-after` tasks
a harmful child of the champion is released by hand (forced past the gate, as an
operator mistake would be): its `planning.phases` is cut to `--harm-phases` (default:
confirmation only, so the agent never synthesizes or tunes; measured on acrobot pools
1002-1005 at 32 episodes: -20%, 0%, -8%, 0% normalized score against the parent). It is staged
on every task (exposure 1): from the next task boundary it works the stream as a canary, each
task rerun by the parent as the control, and the anytime-valid monitor of the gate config's
`analysis` section rolls it back (or promotes it) — recorded, active from the boundary after.
The table lists every task: bundle, q, monitored r, and events.

    nice -n 10 python experiments/online_rollback.py --out experiments/results/online_rollback.md

Run names (trace ids) encode env, bundle, seed and time; everything lives under --workdir.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ole.evolve import EvolveConfig, Suite, open_engine  # noqa: E402
from ole.evolve.online import OnlineConfig, OnlineEvolution, engine_worker  # noqa: E402
from ole.executors import LocalExecutor  # noqa: E402
from ole.gate import load_config  # noqa: E402
from ole.jobs import run_job  # noqa: E402
from ole.paired import value_score  # noqa: E402
from ole.proposers.builtin import BuiltinProposer  # noqa: E402
from ole.registry import Registry  # noqa: E402


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="gym/acrobot", help="comma-separated env slugs of the stream")
    p.add_argument("--budget", type=int, default=32, help="episode budget per task")
    p.add_argument("--tasks", type=int, default=7, help="stream length")
    p.add_argument("--inject-after", type=int, default=2, help="tasks before the harmful release")
    p.add_argument("--harm-phases", default="confirmation", help="comma-separated planning.phases of the harmful bundle")
    p.add_argument("--every-k", type=int, default=1000, help="organic challenger rounds every k tasks (off by default)")
    p.add_argument("--workdir", default="experiments/out/online_rollback", help="registry, store, runs, traces")
    p.add_argument("--out", default=None, help="Markdown report path")
    return p.parse_args()


def harmful_child(reg: Registry, phases: tuple[str, ...]):
    champ = reg.champion()
    lp = champ.bundle.loop_policy
    bad = champ.bundle.model_copy(update={"loop_policy": lp.model_copy(
        update={"planning": lp.planning.model_copy(update={"phases": phases})})})
    return reg.register(bad, parents=[champ.version], edge="manual",
                        note=f"injected harmful release: planning.phases={list(phases)}")


def main() -> None:
    args = parse()
    work = Path(args.workdir)
    if work.exists():
        shutil.rmtree(work)
    (work / "bundles").mkdir(parents=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", work / "bundles" / "coder.yaml")
    reg = Registry(work / "bundles")
    suite = Suite(envs=tuple(args.envs.split(",")), budget=args.budget)
    cfg = EvolveConfig(suite=suite, gate_pools=(201, 202), workers=1)
    online = OnlineConfig(tasks=args.tasks, every_k=args.every_k)
    log: list[str] = []
    engine = open_engine(registry=reg, workdir=work, traces_root=work / "traces", cfg=cfg,
                         evaluate=run_job,
                         proposer=BuiltinProposer(), gate=load_config(), executor=LocalExecutor(1),
                         progress=lambda line: (log.append(line), print(line, flush=True)))
    evo = OnlineEvolution(engine, cfg, online)
    worker = engine_worker(engine)
    rows, t0, injected = [], time.time(), None
    for i in range(args.tasks):
        if i == args.inject_after:
            injected = harmful_child(reg, tuple(args.harm_phases.split(",")))
            reg.release(injected.ref, reason="experiment: injected harmful release", force=True, exposure=1.0)
            print(f"injected {injected.ref} (released, pending until the next task boundary)")
        a = evo.ask()
        trace = worker(a)
        n_pairs = len(evo.events.monitor_pairs)
        evo.tell(trace)
        monitored = evo.events.monitor_pairs[n_pairs:]
        rows.append((i, a.task.env, a.bundle_ref, value_score(trace)[0],
                     monitored[0].r if monitored else None, trace.outcome.status))
    evo.finish()
    report(args, reg, evo, rows, injected, time.time() - t0)


def report(args, reg, evo, rows, injected, wall) -> None:
    ev = evo.events
    lines = ["# Online mode: injected harmful release and automatic rollback", "",
             f"Command: `python experiments/online_rollback.py --envs {args.envs} --budget {args.budget} "
             f"--tasks {args.tasks} --inject-after {args.inject_after} --harm-phases {args.harm_phases}`", "",
             f"Injected: `{injected.ref if injected else '-'}` = champion with `planning.phases: [{args.harm_phases}]`, "
             "released with `force` (bypassing the gate) before task "
             f"{args.inject_after}. Wall time of the experiment: {wall / 60:.1f} min.", "",
             "| task | env | active bundle | q | monitored r vs parent | status |", "|---|---|---|---|---|---|"]
    for i, env, ref, q, r, status in rows:
        lines.append(f"| {i} | {env} | {ref} | {'-' if q is None else f'{q:.1f}'} | "
                     f"{'-' if r is None else f'{r:+.3f}'} | {status} |")
    lines += ["", "Events:", ""]
    lines += [f"- activation at task boundary {i}: `{ref}`" for i, ref in ev.activations]
    lines += [f"- rollback recorded after task {i}: `{ref}` (monitored clipped mean r {r:+.3f})"
              for i, ref, r in ev.rollbacks]
    events = [e for e in reg.events() if e.kind in ("release", "rollback", "activation", "stage")]
    lines += ["", "Registry events (release / rollback / activation / stage):", ""]
    lines += [f"- #{e.seq} {e.kind}{' ' + e.payload['stage'] if e.kind == 'stage' else ''} `{e.ref}`: "
              f"{e.payload.get('reason', '')}" for e in events]
    lines += ["", f"Rolled back: {'yes' if ev.rollbacks else 'no'}; active at the end: `{reg.champion().ref}`.", ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
