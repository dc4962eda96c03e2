"""Per-run fixed cost of quick runs: everything but stepping and agent compute, old and new code side by side.

One process per code tree plays an evolution worker: after one warm-up run (not counted: the
worker's first run pays its imports, and under the new code the warm template's start), it
works one quick run (`ole.jobs.run_job`, the built-in agent, budget 32) per env, each on a
pool seed no other run of the benchmark uses (so no hidden-evaluation result is shared: the
cost measured is the cost of a first-time run). Trees alternate within each round. Every
Python process loads the timing hooks of `experiments/evolve_profile_hooks/`; phases are
read as `experiments/evolve_profile.py` reads them:

    fixed = run wall − stepping wall (episodes being stepped, submits and hidden) − agent compute

CPU seconds per run come from the process tree's own cpuacct group (read before and after).

    flock /work/heavy.lock python experiments/run_fixed_cost.py --code old=f4de814 --code new=HEAD --rounds 3 \\
        --out experiments/results/run_fixed_cost.md
    python experiments/run_fixed_cost.py --smoke      # one tiny run per tree (the test)
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))

import evolve_profile as ep  # noqa: E402

DRIVER = r"""
import json, os, sys, time
from pathlib import Path
from ole.jobs import EvalJob, run_job
from ole.registry import Registry
from ole.chosen import ChosenVersion
from ole.trace import RunCondition, TaskSpec
root, out, plan = Path(sys.argv[1]), Path(sys.argv[2]), json.loads(sys.argv[3])
usage = os.environ.get("RUN_COST_CPU_USAGE")
cpu = lambda: int(Path(usage).read_text()) * 1e-9 if usage else None
champ = Registry(root / "bundles").champion()
for env, budget, pool, counted in plan:
    job = EvalJob(chosen=ChosenVersion(ref=champ.ref, bundle=champ.bundle), task=TaskSpec(env=env, budget=budget, pool_seed=pool),
                  condition=RunCondition(host="builtin"), runs_root=str(root / "runs"))
    c0, t0 = cpu(), time.time()
    trace = run_job(job)
    t1, c1 = time.time(), cpu()
    with open(out, "a") as f:
        f.write(json.dumps({"env": env, "pool": pool, "counted": counted, "run_dir": trace.run_dir,
                            "wall": t1 - t0, "cpu": None if c0 is None else c1 - c0,
                            "final_score": trace.outcome.final_score}) + "\n")
"""
KEYS = [("wall", "run wall"), ("start_to_ready", "host start to ready line"), ("ready_to_agent", "ready to agent start"),
        ("agent_compute", "agent compute"), ("submits_client", "submits (agent's wait)"),
        ("submit_stepping", "  of which stepping"), ("finalize", "finalize"), ("validation", "  validation"),
        ("heldout", "  held-out"), ("hidden_sandbox_start", "  hidden sandbox starts (summed)"),
        ("finalize_to_end", "run.json to trace"), ("stepping_wall", "stepping wall (union)"),
        ("fixed", "**fixed cost**"), ("cpu", "CPU s (process tree)")]


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", action="append", default=[], help="LABEL=TREE as in evolve_profile.py (default: new=.)")
    p.add_argument("--envs", default="gym/pusher5,gym/acrobot,gym/halfcheetah5", help="env slugs, one run each per round")
    p.add_argument("--budget", type=int, default=32, help="episode budget of a run (32 = the quick runs of make evolve)")
    p.add_argument("--rounds", type=int, default=3, help="rounds; each runs every tree once, alternating")
    p.add_argument("--workdir", default="experiments/out/run_fixed_cost", help="trees, registries, runs, logs")
    p.add_argument("--out", default=None, help="Markdown report (JSON beside it)")
    p.add_argument("--smoke", action="store_true", help="one env, budget 2, one round (the test)")
    args = p.parse_args(argv)
    args.code = args.code or ["new=."]
    if args.smoke:
        args.envs, args.budget, args.rounds = "gym/acrobot", 2, 1
    return args


def run_tree(label: str, tree: Path, work: Path, plan: list, k: int) -> None:
    """One worker-like process of `tree`: the plan's runs in order, with the hooks and its own CPU group."""
    root = work / f"{label}-r{k}"
    shutil.rmtree(root, ignore_errors=True)
    (root / "bundles").mkdir(parents=True)
    for seed in sorted((tree / "bundles").glob("*.yaml")):
        shutil.copy(seed, root / "bundles" / seed.name)
    group = ep.cpu_group(f"evolve-profile-runs-{os.getpid()}-{label}-{k}")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ep.HOOKS), str(tree)]),
           "EVOLVE_PROFILE_LOG": str(root / "profile.jsonl")}
    if group is not None:
        env["RUN_COST_CPU_USAGE"] = str(group / "cpuacct.usage")
    enter = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs")] if group else []
    load0 = ep.loadavg()
    subprocess.run(enter + [sys.executable, "-c", DRIVER, str(root), str(root / "runs.jsonl"), json.dumps(plan)],
                   cwd=root, env=env, check=True)
    (root / "load.json").write_text(json.dumps({"start": load0, "end": ep.loadavg()}))
    print(f"{label} round {k}: done (load {load0} -> {ep.loadavg()})", flush=True)


def collect(root: Path) -> list[dict]:
    """The counted runs of one process with their phases."""
    phases = ep.run_phases(ep.read_log(root / "profile.jsonl"))
    out = []
    for line in (root / "runs.jsonl").read_text().splitlines():
        row = json.loads(line)
        if row["counted"] and row["run_dir"] in phases:
            out.append({**phases[row["run_dir"]], "cpu": row["cpu"], "final_score": row["final_score"]})
    return out


def med(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def render(args, labels: list[str], rows: dict[str, list[dict]], loads: list[str]) -> str:
    envs = args.envs.split(",")
    lines = ["# Per-run fixed cost of quick runs (medians, seconds)", "",
             "Command:", "", f"    python experiments/run_fixed_cost.py {' '.join(ep.repr_code(c) for c in args.code)} "
             f"--envs {args.envs} --budget {args.budget} --rounds {args.rounds}"
             + (f" --out {args.out}" if args.out else ""), "",
             f"Machine: {os.cpu_count()} CPUs, shared; load average (1 min) per process, start → end: "
             + "; ".join(loads) + ".", "",
             "Fixed cost = run wall − stepping wall (submits and hidden evaluation) − agent compute; every run a "
             "first-time run (no shared hidden result).", "",
             "| phase | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for key, text in KEYS:
        lines.append(f"| {text} | " + " | ".join(ep.fmt(med(rows[lab], key), 2) for lab in labels) + " |")
    lines += ["", "| env: fixed cost (runs) | " + " | ".join(labels) + " |", "|---|" + "---|" * len(labels)]
    for env in envs:
        lines.append(f"| {env} | " + " | ".join(
            f"{ep.fmt(med([r for r in rows[lab] if r['env'] == env], 'fixed'), 2)} "
            f"({sum(r['env'] == env for r in rows[lab])})" for lab in labels) + " |")
    if len(labels) > 1:
        a, b = labels[0], labels[1]
        fa, fb = med(rows[a], "fixed"), med(rows[b], "fixed")
        lines += ["", f"**{b} / {a} median fixed cost: {fb / fa:.2f}×** ({fb:.2f} s vs {fa:.2f} s)."]
        same = all(x["final_score"] == y["final_score"] for x, y in zip(
            sorted(rows[a], key=lambda r: (r["env"], r["t0"])), sorted(rows[b], key=lambda r: (r["env"], r["t0"]))))
        lines.append(f"Held-out scores of the runs on the same (env, pool): {'identical' if same else 'DIFFERENT'}.")
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    args = parse(argv)
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    trees = [(c.split("=", 1)[0], c.split("=", 1)[1]) for c in args.code]
    paths = {label: ep.tree_path(spec, work) for label, spec in trees}
    envs = args.envs.split(",")
    rows: dict[str, list[dict]] = {label: [] for label, _ in trees}
    loads = []
    for k in range(args.rounds):
        plan = [("gym/acrobot", 2, 900 + k, False)] + [(env, args.budget, 1000 + 10 * k + i, True)
                                                       for i, env in enumerate(envs)]
        for label, _ in (trees if k % 2 == 0 else trees[::-1]):
            run_tree(label, paths[label], work, plan, k)
            rows[label] += collect(work / f"{label}-r{k}")
            load = json.loads((work / f"{label}-r{k}" / "load.json").read_text())
            loads.append(f"{label} r{k} {load['start']} → {load['end']}")
    text = render(args, [label for label, _ in trees], rows, loads)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
