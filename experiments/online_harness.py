"""Online evolution beside a harness: a suite stream through `evogym suite run --agent "ole agent work --online ..."`.

Phase 1 runs a suite with `--jobs 2`; every `--every-k` finished tasks of the stream one
process makes a challenger and gates it on instances no stream task used; a release is staged
(a canary on a share of its scope's tasks, each rerun by the control, promoted or rolled back
by the anytime-valid monitor of the gate config's `analysis` section). Then a harmful child of
the champion is released by hand, staged on every task (exposure 1): its `budget.wall_time_s`
of 1 ms stops the agent before its first submit. The default agent is the built-in agent
(`--agent command` runs the instructed command agent, `experiments/agents/instructed_agent.py`,
which follows its brief). Phase 2 runs the suite again: the harmful canary takes the tasks, each
is rerun by the control, and the monitor rolls it back. The report is rebuilt from the
registry's events and the stream's store alone.

    nice -n 10 python experiments/online_harness.py --out experiments/results/online_harness.md
"""
from __future__ import annotations

import argparse
import json
import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ole.registry import Registry  # noqa: E402

HARM_WALL_S = 0.001
"""The injected release's budget.wall_time_s: the agent stops before its first submit (a failed run)."""


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--envs", default="gym/acrobot,gymnasium/MiniGrid-FourRooms-v0,gym/pusher5,gym/reacher5",
                   help="suite envs (each phase runs each once)")
    p.add_argument("--budget", type=int, default=8, help="episode budget of every run (stream and gate)")
    p.add_argument("--jobs", type=int, default=2, help="suite tasks in parallel")
    p.add_argument("--every-k", type=int, default=2, help="a proposal round every k finished tasks")
    p.add_argument("--gate-config", default=None, help="gate YAML with its `analysis` section (default ole/gate.yaml)")
    p.add_argument("--gate-envs", default="gym/acrobot,gym/pusher5", help="envs of the gate instances")
    p.add_argument("--gate-pools", default="201,202,203", help="pool seeds of the gate instances")
    p.add_argument("--agent", default="builtin", choices=("command", "builtin"),
                   help="stream agent: the built-in agent (default) or the instructed command agent")
    p.add_argument("--isolation", default="bwrap", choices=("bwrap", "none"), help="policy sandbox")
    p.add_argument("--workdir", default="experiments/out/online_harness", help="registry, stream, suite outputs")
    p.add_argument("--out", default=None, help="Markdown report path")
    return p.parse_args()


def agent_command(args, root: Path, work: Path) -> str:
    tail = (["--agent", "command", "--", sys.executable, str(ROOT / "experiments" / "agents" / "instructed_agent.py")]
            if args.agent == "command" else [])
    return " ".join([sys.executable, "-m", "ole.cli", "--root", str(root), "agent", "work", "--online",
                     "--every-k", str(args.every_k), "--workdir", str(work),
                     *(["--gate-config", str(Path(args.gate_config).resolve())] if args.gate_config else []),
                     "--gate-envs", args.gate_envs, "--gate-pools", args.gate_pools,
                     "--gate-budget", str(args.budget), "--isolation", args.isolation, *tail])


def suite(args, agent: str, out: Path) -> float:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "evogym.cli", "suite", "run", "--envs", *args.envs.split(","),
                           "--jobs", str(args.jobs), "--profile", "quick", "--budget", str(args.budget),
                           "--isolation", args.isolation, "--out", str(out), "--agent", agent],
                          capture_output=True, text=True, cwd=ROOT)
    print(proc.stdout[-3000:], proc.stderr[-3000:], flush=True)
    if proc.returncode != 0:
        raise SystemExit(f"suite run failed ({proc.returncode}); see {out}")
    return time.monotonic() - t0


def inject(root: Path) -> str:
    with Registry(root) as reg:
        champ = reg.champion()
        lp = champ.bundle.loop_policy
        bad = reg.register(champ.bundle.model_copy(update={"loop_policy": lp.model_copy(update={
            "budget": lp.budget.model_copy(update={"wall_time_s": HARM_WALL_S})})}), parents=[champ.version],
            note="injected harmful release")
        reg.release(bad.ref, reason=f"injected harmful release (budget.wall_time_s {HARM_WALL_S})", exposure=1.0)
        return bad.ref


def stream_rows(work: Path) -> list[dict]:
    with sqlite3.connect(work / "evaluations.sqlite3") as db:
        return [json.loads(p) for (p,) in db.execute("SELECT payload FROM stream ORDER BY n")]


def report(args, root: Path, work: Path, bad: str, walls: tuple[float, float], phase1: int) -> str:
    with Registry(root) as reg:
        events = reg.events()
        active = reg.champion().ref
    rows = stream_rows(work)
    act_by_seq = {e.seq: e for e in events if e.kind == "activation"}
    lines = ["# Online evolution beside a harness (`evogym suite run` + `ole agent work --online`)", "",
             "Command: `python experiments/online_harness.py " + " ".join(sys.argv[1:]) + "`", "",
             f"Agent: {'the instructed command agent (experiments/agents/instructed_agent.py)' if args.agent == 'command' else 'built-in'}. "
             f"Two `evogym suite run --jobs {args.jobs}` phases over {args.envs} (profile quick, budget "
             f"{args.budget}); every {args.every_k} finished stream tasks a challenger is gated on "
             f"{args.gate_envs} × pools {args.gate_pools} (never used by a stream task, whose pool seed is 0); "
             "a release is staged as a canary, its tasks rerun by the control and judged by the anytime-valid monitor. "
             f"Between the phases `{bad}` (the champion with `budget.wall_time_s: {HARM_WALL_S}`) was released by "
             "hand, staged on every task. "
             f"Wall time: phase 1 {walls[0] / 60:.1f} min, phase 2 {walls[1] / 60:.1f} min (2 shared cores).", "",
             "## The stream (finish order; bundle fixed at each task's boundary)", "",
             "| n | phase | task instance | bundle | canary task | activation in force | q |",
             "|---|---|---|---|---|---|---|"]
    for n, r in enumerate(rows, 1):
        act = act_by_seq.get(r["activation"])
        when = f"#{act.seq} {act.ref} ({act.payload.get('cause')})" if act else "none (seed champion)"
        q = "failed" if r["q"] is None else f"{r['q']:.1f}"
        canary = f"yes (control {r.get('control')})" if r.get("canary") else "-"
        lines.append(f"| {n} | {1 if n <= phase1 else 2} | {r['instance']} | {r['bundle_ref']} | {canary} | {when} | {q} |")
    lines += ["", "## Registry events (gate decisions, releases, stages, activations, monitor pairs and looks)", ""]
    for e in events:
        p = e.payload
        if e.kind == "gate_decision":
            s = p["stats"]
            lines.append(f"- #{e.seq} gate `{e.ref}` vs `{p['champion']}`: **{p['verdict']}** on {s['n_pairs']} pairs, "
                         f"mean r {s['mean_r']:+.3f}, p {s['p_value']:.3f}")
        elif e.kind in ("release", "rollback"):
            lines.append(f"- #{e.seq} {e.kind} → `{e.ref}`: {p.get('reason', '')}")
        elif e.kind == "activation":
            lines.append(f"- #{e.seq} activation of `{e.ref}` at a task boundary (cause: {p.get('cause')} "
                         f"#{p.get('cause_seq')}, was `{p.get('from')}`)")
        elif e.kind == "evaluation" and p.get("stage") == "monitor":
            lines.append(f"- #{e.seq} monitor pair of `{e.ref}` vs control `{p['parent']}` on stream task "
                         f"{p['task_index']}: r {p['r']:+.3f}")
        elif e.kind == "evaluation" and p.get("stage") == "monitor-look":
            lines.append(f"- #{e.seq} monitor look at `{e.ref}` after {p['n']} pair(s): {p['decision']} ({p['reason']})")
        elif e.kind == "stage":
            lines.append(f"- #{e.seq} stage `{e.ref}` → **{p['stage']}**: {p.get('reason', '')}")
    lines += ["", f"Active at the end: `{active}`.", ""]
    return "\n".join(lines)


def main() -> None:
    args = parse()
    base = Path(args.workdir).resolve()
    if base.exists():
        shutil.rmtree(base)
    root, work = base / "bundles", base / "stream"
    root.mkdir(parents=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", root)
    Registry(root).close()
    agent = agent_command(args, root, work)
    w1 = suite(args, agent, base / "suite1")
    phase1 = len(stream_rows(work))
    bad = inject(root)
    w2 = suite(args, agent, base / "suite2")
    text = report(args, root, work, bad, (w1, w2), phase1)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


if __name__ == "__main__":
    main()
