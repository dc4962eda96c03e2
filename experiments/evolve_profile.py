"""Where the time of `make evolve` goes, per phase and per run, for one or more code trees side by side.

Each code tree (this checkout, or a commit exported with `git archive`) runs exactly what
`make evolve` runs — `ole evolve --mode offline` with no flags, from a fresh registry (a copy
of the tree's `bundles/*.yaml`) and a fresh workdir — in its own process tree, with the
timing hooks of `experiments/evolve_profile_hooks/` (every Python process but the sandboxed
policy loads them; they wrap a fixed list of functions and log one line per call, so old
and new code are measured by the same instrument). With several trees and `--rounds`, the
trees alternate (old, new, old, new, ...), so load drifts on a shared machine hit both.

Reported per tree: the evolve wall time; the gate decision (candidates, retained, the gated
candidate, verdict, mean r, pairs) and whether every tree reached the same one on the same
stored evaluations (same keys, same held-out scores); where the wall time goes (driver-only
time with idle workers, batches, idle worker slots at batch ends); per-run phases summed over
all runs and their median per run; the per-run fixed cost (run wall minus stepping and agent
compute) by env.

    flock /work/heavy.lock python experiments/evolve_profile.py --code old=f4de814 --code new=. --rounds 2 \\
        --out experiments/results/evolve_profile.md
    python experiments/evolve_profile.py --code new=. --evolve-args "--envs gym/acrobot --budget 4 ..."  # smoke
    python experiments/evolve_profile.py --report-only --out ...   # re-render from the stored logs
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HOOKS = ROOT / "experiments" / "evolve_profile_hooks"
SMOKE_ARGS = ("--envs gym/acrobot --budget 4 --search-pools 101 --gate-pools 201 --population 2 "
              "--generations 1 --workers 1")
"""A tiny evolution for the smoke test (one env, 4-episode runs, one candidate round)."""


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--code", action="append", default=[],
                   help="LABEL=TREE[|EXTRA FLAGS]: TREE is `.` (this checkout), a folder, or a git commit (exported "
                        "with git archive); EXTRA FLAGS are added to this tree's `ole evolve` (e.g. "
                        "`ray=.|--executor ray`); repeat to compare (default: new=.)")
    p.add_argument("--rounds", type=int, default=1, help="runs per tree, alternating between the trees")
    p.add_argument("--evolve-args", default="", help="extra `ole evolve --mode offline` flags (default: none, "
                   "i.e. exactly `make evolve`)")
    p.add_argument("--workdir", default="experiments/out/evolve_profile", help="trees, registries, runs, logs")
    p.add_argument("--out", default=None, help="Markdown report (a JSON with every number is written beside it)")
    p.add_argument("--report-only", action="store_true", help="render the report from the runs already in --workdir")
    p.add_argument("--fresh", action="store_true", help="run again the evolves --workdir already holds (default: "
                   "keep them, so raising --rounds adds rounds)")
    p.add_argument("--smoke", action="store_true", help=f"tiny evolution for the test ({SMOKE_ARGS})")
    args = p.parse_args(argv)
    args.code = args.code or ["new=."]
    if args.smoke:
        args.evolve_args = SMOKE_ARGS
    return args


# ----- running ------------------------------------------------------------------------------------
def tree_path(spec: str, work: Path) -> Path:
    """The source folder of a `--code` tree: `.`, a folder, or a commit exported once under `work`."""
    if spec == ".":
        return ROOT
    if Path(spec).is_dir():
        return Path(spec).resolve()
    commit = subprocess.run(["git", "rev-parse", "--short=7", spec], cwd=ROOT, text=True, check=True,
                            capture_output=True).stdout.strip()
    out = work / f"tree-{commit}"
    if not (out / "ole").is_dir():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        archive = subprocess.run(["git", "archive", commit], cwd=ROOT, check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return out.resolve()


def loadavg() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


CPU_GROUPS = Path("/sys/fs/cgroup/cpuacct")
"""cgroup v1 `cpuacct` hierarchy: each profiled evolve runs in its own group, whose usage counts every
process it started, exited ones included (CPU seconds, which the machine's load changes far less
than wall time; `experiments/bench_host_overhead.py` accounts the same way)."""


def cpu_group(name: str) -> Path | None:
    """A fresh cpuacct group (groups of earlier profiles that have emptied are removed), or None."""
    try:
        for old in CPU_GROUPS.glob("evolve-profile-*"):
            if not (old / "cgroup.procs").read_text().strip():
                old.rmdir()
        group = CPU_GROUPS / name
        group.mkdir(exist_ok=True)
        return group
    except OSError:
        return None


def run_once(label: str, tree: Path, run_dir: Path, evolve_args: str) -> dict:
    """One `ole evolve --mode offline` of `tree` in `run_dir`; returns its record (summary, wall, CPU, load)."""
    shutil.rmtree(run_dir, ignore_errors=True)
    (run_dir / "bundles").mkdir(parents=True)
    for seed in sorted((tree / "bundles").glob("*.yaml")):
        shutil.copy(seed, run_dir / "bundles" / seed.name)
    log = run_dir / "profile.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HOOKS), str(tree)]), "EVOLVE_PROFILE_LOG": str(log)}
    env.pop("OLE_ROOT", None)
    cmd = [sys.executable, "-m", "ole.cli", "--root", str(run_dir / "bundles"), "--json", "evolve", "--mode",
           "offline", "--workdir", str(run_dir / "evolve"), "--traces", str(run_dir / "traces"),
           *evolve_args.split()]
    group = cpu_group(f"evolve-profile-{os.getpid()}-{run_dir.name}")
    enter = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(group / "cgroup.procs")] if group else []
    load0, t0 = loadavg(), time.time()
    with open(run_dir / "evolve.stderr", "wb") as err:
        out = subprocess.run(enter + cmd, cwd=run_dir, env=env, stdout=subprocess.PIPE, stderr=err)
    t1, load1 = time.time(), loadavg()
    cpu_s = int((group / "cpuacct.usage").read_text()) * 1e-9 if group else None
    record = {"label": label, "tree": str(tree), "cmd": cmd[1:], "evolve_args": evolve_args, "t0": t0, "t1": t1, "wall_s": t1 - t0, "cpu_s": cpu_s,
              "load_start": load0, "load_end": load1, "exit": out.returncode,
              "summary": json.loads(out.stdout) if out.returncode == 0 else None}
    (run_dir / "record.json").write_text(json.dumps(record, indent=1))
    print(f"{label}: {record['wall_s']:.1f} s, CPU {fmt(cpu_s)} s, exit {out.returncode}, load {load0} -> {load1}",
          flush=True)
    return record


# ----- reading the logs ---------------------------------------------------------------------------
def read_log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.is_file() else []


def union(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [a, b) intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total


def host_of(path: str | None) -> str | None:
    """The host run directory (`.../<run id>/host`) a path lies in."""
    if not path:
        return None
    parts = Path(path).parts
    return str(Path(*parts[:parts.index("host") + 1])) if "host" in parts else None


def run_phases(rows: list[dict]) -> dict[str, dict]:
    """Per host run directory: its phases in seconds (see the report's phase table)."""
    by_run: dict[str, dict] = defaultdict(lambda: {"submits": [], "episodes": [], "hidden": []})
    url_run: dict[str, str] = {}
    for r in rows:
        if r["ev"] == "ready":
            url_run[r["url"]] = r["run_dir"]
    for r in rows:
        ev = r["ev"]
        if ev in ("run_job", "run_bundle", "ready", "host_init", "finalize", "read_run_json"):
            key = host_of(r.get("run_dir"))
            if key:
                by_run[key][ev] = r
        elif ev == "agent":
            by_run[host_of(r["workspace"])]["agent"] = r
        elif ev == "submit" and r["url"] in url_run:
            by_run[url_run[r["url"]]]["submits"].append(r)
        elif ev == "episodes":
            by_run[host_of(r["code_dir"])]["episodes"].append(r)
        elif ev == "hidden":
            by_run[host_of(r["code_dir"])]["hidden"].append(r)
    out = {}
    for key, v in by_run.items():
        if "run_bundle" in v and "agent" in v and "finalize" in v:
            v["heldout_size"] = json.loads((Path(key) / "config.json").read_text())["heldout_size"]
            out[key] = phases(v)
    return out


def phases(v: dict) -> dict:
    rb, ready, agent, fin = v["run_bundle"], v["ready"], v["agent"], v["finalize"]
    job = v.get("run_job", rb)
    host_init = v["host_init"]["t1"] - v["host_init"]["t0"] if "host_init" in v else 0.0
    submit_eps = [e for e in v["episodes"] if e["record"]]
    hidden_eps = [e for e in v["episodes"] if not e["record"]]
    submit_wall = sum(s["t1"] - s["t0"] for s in v["submits"])
    stepping = [(e["t0"] + e["start_s"], e["t1"]) for e in v["episodes"]]
    held = [h for h in v["hidden"] if h["seeds"] == v["heldout_size"]]
    valid = [h for h in v["hidden"] if h["seeds"] != v["heldout_size"]]
    out = {
        "env": rb["env"], "wall": job["t1"] - job["t0"],
        "start_to_ready": ready["t1"] - rb["t0"], "host_init": host_init,
        "ready_to_agent": agent["t0"] - ready["t1"],
        "agent": agent["t1"] - agent["t0"], "submits_client": submit_wall, "n_submits": len(v["submits"]),
        "agent_compute": (agent["t1"] - agent["t0"]) - submit_wall,
        "submit_sandbox_start": sum(e["start_s"] for e in submit_eps),
        "submit_stepping": sum(e["episodes_s"] for e in submit_eps),
        "submit_act": sum(e.get("act_s", 0.0) for e in submit_eps),
        "submit_env_step": sum(e.get("step_s", 0.0) for e in submit_eps),
        "agent_to_finalize": fin["t0"] - agent["t1"],
        "finalize": fin["t1"] - fin["t0"],
        "validation": sum(h["t1"] - h["t0"] for h in valid),
        "validation_episodes": sum(h["episodes"] for h in valid),
        "validation_programs": sum(h["n_jobs"] for h in valid),
        "heldout": sum(h["t1"] - h["t0"] for h in held),
        "heldout_episodes": sum(h["episodes"] for h in held),
        "hidden_sandbox_start": sum(e["start_s"] for e in hidden_eps),
        "hidden_stepping_sum": sum(e["episodes_s"] for e in hidden_eps),
        "hidden_act": sum(e.get("act_s", 0.0) for e in hidden_eps),
        "hidden_env_step": sum(e.get("step_s", 0.0) for e in hidden_eps),
        "finalize_to_end": rb["t1"] - fin["t1"], "job_overhead": (job["t1"] - job["t0"]) - (rb["t1"] - rb["t0"]),
        "stepping_wall": union(stepping), "t0": job["t0"], "t1": job["t1"], "pid": job["pid"],
    }
    out["fixed"] = out["wall"] - out["stepping_wall"] - out["agent_compute"]
    return out


def driver_view(rows: list[dict], record: dict, runs: dict[str, dict]) -> dict:
    """Evolve wall split into driver-only time, batch time and idle worker slots."""
    batches = [r for r in rows if r["ev"] == "batch"]
    workers = int((record["summary"] or {}).get("config", {}).get("workers", 2))
    start = min((r["t_created"] for r in rows if r["ev"] == "proc" and r.get("t_created")), default=record["t0"])
    wall = record["t1"] - record["t0"]
    in_batches = union([(b["t0"], b["t1"]) for b in batches])
    busy = sum(p["wall"] for p in runs.values())
    totals: dict[str, dict] = defaultdict(lambda: {"n": 0, "s": 0.0})
    for r in rows:
        if r["ev"] == "totals":
            for k, v in r["totals"].items():
                totals[k]["n"] += v["n"]
                totals[k]["s"] += v["s"]
    group = lambda prefix: sum(v["s"] for k, v in totals.items() if k.startswith(prefix))  # noqa: E731
    first = min((b["t0"] for b in batches), default=record["t1"])
    return {"wall": wall, "workers": workers, "driver_start": first - start, "in_batches": in_batches,
            "outside_batches": wall - in_batches, "runs": len(runs), "run_wall_sum": busy,
            "idle_slots_in_batches": workers * in_batches - busy, "utilization": busy / (workers * wall),
            "registry_s": group("registry."), "store_s": group("store."), "archive_s": group("archive."),
            "batches": len(batches)}


def store_rows(path: Path) -> dict[str, tuple]:
    """Stored evaluations: key -> (bundle hash, instance, status, held-out score, episodes)."""
    if not path.is_file():
        return {}
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT key, bundle_hash, instance, result FROM evaluations").fetchall()
    out = {}
    for key, bundle, instance, result in rows:
        res = json.loads(result)
        out[key] = (bundle, instance, res["status"], res.get("score"), res["episodes"])
    return out


def decision(summary: dict | None) -> dict:
    """The evolve's decision from its `--json` summary: one gate (trees before scope releases:
    top-level `gain`, `scope`, `changes`) or one per scope (`gates`: verdicts, gated refs, mean r and
    pairs joined with `;` in gate order, so two evolves with the same gates compare equal)."""
    if not summary:
        return {}
    out = {"candidates": summary["candidates"], "retained": summary["retained"],
           "episodes": summary["spent"]["episodes"]}
    gates = summary.get("gates")
    if gates is None:
        gain = summary.get("gain") or {}
        return {**out, "final": summary["final"], "verdict": summary["verdict"], "scope": summary.get("scope"),
                "mean_r": gain.get("mean_r"), "n_pairs": gain.get("n_pairs"), "p_value": gain.get("p_value"),
                "changes": summary.get("changes")}
    if not gates:
        return {**out, "final": None, "verdict": summary.get("verdict") or "no gate", "mean_r": None, "n_pairs": None}
    gains = [g.get("gain") or {} for g in gates]
    return {**out, "final": ";".join(g["final"] for g in gates), "verdict": ";".join(g["verdict"] for g in gates),
            "scope": ";".join(str(g.get("released_scope") or g.get("bound") or "-") for g in gates),
            "mean_r": ";".join(f"{x.get('mean_r', float('nan')):+.3f}" for x in gains),
            "n_pairs": ";".join(str(x.get("n_pairs", "-")) for x in gains),
            "changes": [c for g in gates for c in g.get("changes", [])]}


# ----- the report ---------------------------------------------------------------------------------
PHASES = [
    ("start_to_ready", "host process start, imports, host init (until its ready line)"),
    ("host_init", "  of which `Host(...)` (pools, run dir, spare sandboxes launched)"),
    ("ready_to_agent", "ready line to agent start (`/info`)"),
    ("agent_compute", "agent compute between submits (agent wall minus its submits)"),
    ("submits_client", "submits, as the agent waits for them"),
    ("submit_sandbox_start", "  sandbox start seen by the submits"),
    ("submit_stepping", "  stepping in submits"),
    ("submit_act", "    of which policy `act()` round trips"),
    ("submit_env_step", "    of which `env.step` (host)"),
    ("agent_to_finalize", "agent end to finalize start (`/finish`)"),
    ("finalize", "finalize (hidden validation + held-out + run.json)"),
    ("validation", "  validation of every distinct ok program"),
    ("heldout", "  held-out of the selected program"),
    ("hidden_sandbox_start", "  hidden-evaluation sandbox starts (summed over workers)"),
    ("hidden_stepping_sum", "  hidden stepping (summed over workers)"),
    ("finalize_to_end", "host exit, run.json read, trace"),
    ("job_overhead", "job wrapper (retries after host faults)"),
]


def repr_code(spec: str) -> str:
    return f"--code '{spec}'" if "|" in spec or " " in spec else f"--code {spec}"


def fmt(x: float | str | None, nd: int = 1) -> str:
    """A number to `nd` decimals; a string (one value per scope gate) as it is."""
    return "-" if x is None else x if isinstance(x, str) else f"{x:.{nd}f}"


def render(args, records: list[dict], analysed: list[dict]) -> str:
    labels = list(dict.fromkeys(r["label"] for r in records))
    lines = ["# Where the time of `make evolve` goes", "",
             "Command (one benchmark run, trees alternating):", "",
             f"    python experiments/evolve_profile.py {' '.join(repr_code(c) for c in args.code)} "
             f"--rounds {args.rounds}" + (f" --evolve-args \"{args.evolve_args}\"" if args.evolve_args else "")
             + (f" --out {args.out}" if args.out else ""), "",
             f"Machine: {os.cpu_count()} CPUs, shared. Each row is one `ole evolve --mode offline"
             f"{' ' + args.evolve_args if args.evolve_args else ''}` from a fresh registry.", "",
             "| # | tree | flags | wall s | wall min | CPU s | load start → end | runs | episodes | verdict | gated | mean r "
             "| pairs |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, (rec, an) in enumerate(zip(records, analysed)):
        d = an["decision"]
        lines.append(f"| {i + 1} | {rec['label']} | {rec.get('evolve_args') or '-'} | {rec['wall_s']:.1f} | {rec['wall_s'] / 60:.1f} | {fmt(rec.get('cpu_s'), 0)} | "
                     f"{rec['load_start']} → {rec['load_end']} | {an['driver']['runs']} | {d.get('episodes', '-')} | "
                     f"{d.get('verdict', 'FAILED')} | {d.get('final', '-')} | {fmt(d.get('mean_r'), 3)} | "
                     f"{d.get('n_pairs', '-')} |")
    lines += ["", *ratios(labels, records, analysed), "", *same_decision(records, analysed), ""]
    lines += ["## Where the evolve wall time goes (critical path vs sum)", "",
              "| # | tree | wall s | driver start-up s | outside batches s | in batches s | Σ run wall s | "
              "idle worker-slot s in batches | utilization | registry s | store s | archive s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for i, (rec, an) in enumerate(zip(records, analysed)):
        d = an["driver"]
        lines.append(f"| {i + 1} | {rec['label']} | {d['wall']:.1f} | {d['driver_start']:.1f} | "
                     f"{d['outside_batches']:.1f} | {d['in_batches']:.1f} | {d['run_wall_sum']:.1f} | "
                     f"{d['idle_slots_in_batches']:.1f} | {d['utilization']:.2f} | {d['registry_s']:.2f} | "
                     f"{d['store_s']:.2f} | {d['archive_s']:.2f} |")
    lines += ["", "## Per-run phases (seconds: sum over all runs of the evolve / median per run)", "",
              "| phase | " + " | ".join(f"#{i + 1} {r['label']}" for i, r in enumerate(records)) + " |",
              "|---|" + "---|" * len(records)]
    lines.append("| run wall (job start to trace) | " + " | ".join(
        f"{sum(p['wall'] for p in an['runs']):.0f} / {med(an['runs'], 'wall'):.2f}" for an in analysed) + " |")
    for key, text in PHASES:
        lines.append(f"| {text} | " + " | ".join(
            f"{sum(p[key] for p in an['runs']):.0f} / {med(an['runs'], key):.2f}" for an in analysed) + " |")
    lines.append("| **fixed cost** (run wall − stepping wall − agent compute) | " + " | ".join(
        f"{sum(p['fixed'] for p in an['runs']):.0f} / **{med(an['runs'], 'fixed'):.2f}**" for an in analysed) + " |")
    lines.append("| validation programs / episodes run | " + " | ".join(
        f"{sum(p['validation_programs'] for p in an['runs'])} / {sum(p['validation_episodes'] for p in an['runs'])}"
        for an in analysed) + " |")
    lines.append("| held-out episodes run | " + " | ".join(
        f"{sum(p['heldout_episodes'] for p in an['runs'])}" for an in analysed) + " |")
    lines += ["", "## Per-run fixed cost by env (median s; runs)", "",
              "| env | " + " | ".join(f"#{i + 1} {r['label']}" for i, r in enumerate(records)) + " |",
              "|---|" + "---|" * len(records)]
    envs = sorted({p["env"] for an in analysed for p in an["runs"]})
    for env in envs:
        cells = []
        for an in analysed:
            xs = [p for p in an["runs"] if p["env"] == env]
            cells.append(f"{med(xs, 'fixed'):.2f} ({len(xs)}); wall {med(xs, 'wall'):.1f}" if xs else "-")
        lines.append(f"| {env} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def med(runs: list[dict], key: str) -> float:
    return statistics.median(p[key] for p in runs) if runs else 0.0


def ratios(labels: list[str], records: list[dict], analysed: list[dict]) -> list[str]:
    if len(labels) < 2:
        return []
    base, out = labels[0], []
    walls = {lab: [r["wall_s"] for r in records if r["label"] == lab] for lab in labels}
    fixed = {lab: statistics.median([p["fixed"] for r, an in zip(records, analysed) if r["label"] == lab
                                     for p in an["runs"]] or [0.0]) for lab in labels}
    cpus = {lab: [r["cpu_s"] for r in records if r["label"] == lab and r.get("cpu_s")] for lab in labels}
    for lab in labels[1:]:
        cpu = (f"; CPU {statistics.median(cpus[lab]) / statistics.median(cpus[base]):.3f}× "
               f"({statistics.median(cpus[lab]):.0f} s vs {statistics.median(cpus[base]):.0f} s)"
               if cpus[lab] and cpus[base] else "")
        out.append(f"**{lab} / {base} wall: {statistics.median(walls[lab]) / statistics.median(walls[base]):.3f}×** "
                   f"(medians {statistics.median(walls[lab]):.1f} s vs {statistics.median(walls[base]):.1f} s){cpu}; "
                   f"median per-run fixed cost {fixed[lab]:.2f} s vs {fixed[base]:.2f} s.")
    return out


def same_decision(records: list[dict], analysed: list[dict]) -> list[str]:
    """Whether every run reached the first run's decision on the same stored evaluations."""
    ref_d, ref_rows = analysed[0]["decision"], analysed[0]["store"]
    out = []
    for i, an in enumerate(analysed[1:], 2):
        keys_same = set(an["store"]) == set(ref_rows)
        common = set(an["store"]) & set(ref_rows)
        scores_same = sum(an["store"][k] == ref_rows[k] for k in common)
        dec_same = {k: an["decision"].get(k) for k in ("candidates", "final", "verdict", "n_pairs", "mean_r")} == \
            {k: ref_d.get(k) for k in ("candidates", "final", "verdict", "n_pairs", "mean_r")}
        out.append(f"- run #{i} vs #1: decision {'identical' if dec_same else 'DIFFERENT'} (candidates, gated, "
                   f"verdict, pairs, mean r); evaluations {'same keys' if keys_same else 'different keys'} "
                   f"({len(an['store'])} vs {len(ref_rows)}), {scores_same}/{len(common)} shared keys with the "
                   "identical status, held-out score and episodes")
    return out


def analyse(run_dir: Path) -> tuple[dict, dict]:
    record = json.loads((run_dir / "record.json").read_text())
    rows = read_log(run_dir / "profile.jsonl")
    runs = run_phases(rows)
    return record, {"runs": list(runs.values()), "driver": driver_view(rows, record, runs),
                    "decision": decision(record["summary"]),
                    "store": store_rows(run_dir / "evolve" / "evaluations.sqlite3")}


def main(argv=None) -> None:
    args = parse(argv)
    work = Path(args.workdir).resolve()
    work.mkdir(parents=True, exist_ok=True)
    trees = [(c.split("=", 1)[0], *(c.split("=", 1)[1].split("|", 1) + [""])[:2]) for c in args.code]
    order = [(k, label, spec, extra) for k in range(args.rounds) for label, spec, extra in trees]
    dirs = [work / f"{label}-r{k}" for k, label, _, _ in order]
    if not args.report_only:
        paths = {label: tree_path(spec, work) for label, spec, _ in trees}
        for (k, label, _, extra), run_dir in zip(order, dirs):
            if args.fresh or not (run_dir / "record.json").is_file():
                run_once(label, paths[label], run_dir, f"{args.evolve_args} {extra}".strip())
    records, analysed = zip(*(analyse(d) for d in dirs if (d / "record.json").is_file()))
    text = render(args, list(records), list(analysed))
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text)
        Path(args.out).with_suffix(".json").write_text(json.dumps(
            [{"record": r, "driver": a["driver"], "decision": a["decision"], "runs": a["runs"]}
             for r, a in zip(records, analysed)], indent=1))


if __name__ == "__main__":
    main()
