"""Many machines, simulated honestly: one online stream worked by several "machines" that share nothing
but a PostgreSQL storage URL, and an evolve on a Ray cluster whose store lives there too.

1. A throw-away PostgreSQL server (`ole.storage.local_server`, Debian's `initdb`/`pg_ctl`) and one
   database: the only thing the machines share.
2. `--machines` folders `m0 … mN-1`, each with its own seed-bundle root and its own stream workspace
   `mI/stream` (the same folder *name* on every machine: how they find the stream's store and trace
   archive in the database, docs/registry.md "Storage and deployment"); no file of one is ever read
   by another.
3. `evogym suite run --jobs N` over `--envs`, `--batches` times (fresh pool seeds), every task's agent
   being this script's `agent` wrapper: it takes the first free machine (an exclusive lock on that
   folder's slot file, held for the task's life) and execs `ole --storage URL agent work --online`
   there. So at most one task runs per machine at a time and N tasks run at once on N machines.
4. Checked on the database afterwards: every task of the stream has a number, dense 1..T; exactly one
   proposal round per `--every-k` finished tasks (the round lease); `ole fsck` clean; every machine
   sees the same champion; every trace a registry event names resolves from every machine's
   workspace; no machine folder holds a registry or store file (nothing fell back to files).
5. `ole evolve --mode offline --executor ray` (a real local Ray cluster) with `--storage URL`: its
   evaluation store's rows are in the database, not a file.

    python experiments/many_machines.py --out experiments/results/many_machines.md
"""
from __future__ import annotations

import argparse
import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SLOT = ".machine-slot"
"""The slot file of a machine folder: the agent wrapper holds an exclusive lock on it for its task."""


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--machines", type=int, default=4, help="machine folders (and suite jobs at once)")
    p.add_argument("--envs", default="gym/acrobot,gym/pusher5,gym/reacher5,gymnasium/MiniGrid-FourRooms-v0",
                   help="envs of each suite batch")
    p.add_argument("--batches", type=int, default=3, help="suite batches (pool seed 1300 + batch)")
    p.add_argument("--budget", type=int, default=16, help="episode budget of every stream task")
    p.add_argument("--every-k", type=int, default=4, help="a proposal round every k finished stream tasks")
    p.add_argument("--gate-on", default="pools", choices=("stream", "pools"),
                   help="where a round's challenger is judged (pools: gate decisions within a short stream)")
    p.add_argument("--isolation", default="bwrap", choices=("bwrap", "none"))
    p.add_argument("--no-ray", action="store_true", help="skip the Ray evolve")
    p.add_argument("--workdir", default="experiments/out/many_machines")
    p.add_argument("--out", default=None, help="Markdown report (JSON beside it)")
    return p.parse_args(argv)


# ----- the agent wrapper: one task on the first free machine --------------------------------------

def agent_main(argv: list[str]) -> int:
    """`many_machines.py agent --home DIR --url URL -- AGENT ARGS`: claim a free machine of DIR, then exec
    `ole --storage URL --root MACHINE/bundles agent work --online --workdir MACHINE/stream AGENT ARGS` there."""
    split = argv.index("--")
    opts = argparse.ArgumentParser(prog="many_machines.py agent")
    opts.add_argument("--home", required=True)
    opts.add_argument("--url", required=True)
    args = opts.parse_args(argv[:split])
    rest = argv[split + 1:]
    home = Path(args.home)
    deadline = time.monotonic() + 600
    while True:
        for machine in sorted(home.glob("m*")):
            fd = os.open(machine / SLOT, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            os.set_inheritable(fd, True)  # the lock lives as long as the exec'd agent
            with open(machine / "tasks.log", "a") as log:
                log.write(json.dumps({"pid": os.getpid(), "workspace": os.environ.get("EVOPOLICYGYM_WORKSPACE"),
                                      "at": time.time()}) + "\n")
            os.chdir(machine)
            cmd = [sys.executable, "-m", "ole.cli", "--storage", args.url, "--root", str(machine / "bundles"),
                   "agent", "work", "--online", "--workdir", str(machine / "stream"), *rest]
            os.execv(sys.executable, cmd)
        if time.monotonic() > deadline:
            print("no free machine within 600 s", file=sys.stderr)
            return 2
        time.sleep(0.2)


# ----- the experiment ------------------------------------------------------------------------------

def machines(home: Path, n: int) -> list[Path]:
    out = []
    for i in range(n):
        m = home / f"m{i}"
        (m / "bundles").mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / "bundles" / "coder.yaml", m / "bundles" / "coder.yaml")
        out.append(m)
    return out


def ole(url: str, root: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ole.cli", "--storage", url, "--root", str(root), *args],
                          cwd=cwd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})


def stream(args, home: Path, url: str) -> float:
    agent = " ".join(shlex.quote(x) for x in [
        sys.executable, str(Path(__file__).resolve()), "agent", "--home", str(home), "--url", url, "--",
        "--every-k", str(args.every_k), "--gate-on", args.gate_on, "--isolation", args.isolation, "--gate-envs", "gym/acrobot", "gym/pusher5",
        "--gate-pools", "201", "202", "203", "--gate-budgets", str(args.budget)])
    started = time.monotonic()
    for b in range(args.batches):
        cmd = [sys.executable, "-m", "evogym.cli", "suite", "run", "--envs", *args.envs.split(","),
               "--jobs", str(args.machines), "--profile", "quick", "--budget", str(args.budget),
               "--pool-seed", str(1300 + b), "--isolation", args.isolation, "--out", str(home / f"suite-{b}"),
               "--agent", agent]
        print(f"== batch {b}", flush=True)
        done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
        print(done.stdout[-1500:], done.stderr[-1500:], flush=True)
    return time.monotonic() - started


def checks(args, home: Path, url: str, ms: list[Path]) -> dict:
    from ole.evolve.store import EvaluationStore
    from ole.registry import Registry
    from ole.storage.traces import open_archive
    os.environ["OLE_STORAGE"] = url
    store = EvaluationStore(ms[0] / "stream" / "evaluations.sqlite3", storage=url)
    tasks = store.tasks()
    rounds = [r[0] for r in store._db.execute("SELECT step FROM steps WHERE step LIKE ?", ("round|%",)).fetchall()]
    stream_traces = [r[0] for r in store._db.execute("SELECT trace_id FROM stream").fetchall()]
    store.close()
    per_machine = {m.name: sum(1 for _ in (m / "tasks.log").open()) if (m / "tasks.log").is_file() else 0
                   for m in ms}
    with Registry(ms[0] / "bundles", storage=url) as reg:
        events = reg.events()
    named = sorted({t for e in events for t in _trace_ids(e.payload)} | set(stream_traces))
    unresolved = {}
    for m in ms:
        archive = open_archive(m / "stream" / "traces", storage=url)
        have = set(archive.ids())
        unresolved[m.name] = [t for t in named if t not in have]
    champions = {}
    for m in ms:
        shown = ole(url, m / "bundles", "--json", "champion", "show", cwd=m)
        champions[m.name] = json.loads(shown.stdout).get("active") if shown.returncode == 0 else f"error: {shown.stderr[-200:]}"
    fsck = ole(url, ms[0] / "bundles", "--json", "fsck", "--traces-dir", str(ms[0] / "stream" / "traces"), cwd=ms[0])
    files = sorted(str(p.relative_to(home)) for m in ms for p in m.rglob("*.sqlite3"))
    numbers = [n for n, _ in tasks]
    return {"tasks": len(tasks), "numbers_dense": numbers == list(range(1, len(tasks) + 1)),
            "rounds": len(rounds), "rounds_expected": len(tasks) // args.every_k,
            "round_twice": sum(c > 1 for c in Counter(rounds).values()), "per_machine": per_machine,
            "events": len(events), "event_kinds": dict(Counter(e.kind for e in events)),
            "traces_named": len(named), "unresolved": {k: len(v) for k, v in unresolved.items()},
            "champions": champions, "fsck_rc": fsck.returncode, "fsck": fsck.stdout[-600:] or fsck.stderr[-600:],
            "sqlite_files": files}


def _trace_ids(payload) -> list[str]:
    out = []
    if isinstance(payload, dict):
        for k, v in payload.items():
            if k in ("trace_id", "control_trace_id") and isinstance(v, str):
                out.append(v)
            elif k == "trace_ids" and isinstance(v, list):
                out += [x for x in v if isinstance(x, str)]
            else:
                out += _trace_ids(v)
    elif isinstance(payload, list):
        for v in payload:
            out += _trace_ids(v)
    return out


def ray_evolve(home: Path, url: str) -> dict:
    from ole.evolve.store import EvaluationStore
    root = home / "ray" / "bundles"
    root.mkdir(parents=True, exist_ok=True)
    shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
    started = time.monotonic()
    done = ole(url, root, "--json", "evolve", "--mode", "offline", "--executor", "ray", "--envs", "gym/acrobot",
               "--budget", "4", "--gate-budgets", "4", "--search-pools", "101", "--gate-pools", "211", "212", "213",
               "214", "215", "216",
               "--population", "2", "--generations", "1", "--workers", "2", "--transfer-envs", "none",
               "--workdir", str(home / "ray" / "evolve"), "--traces", str(home / "ray" / "traces"), cwd=home / "ray")
    took = time.monotonic() - started
    from ole.registry import Registry
    store = EvaluationStore(home / "ray" / "evolve" / "evaluations.sqlite3", storage=url)
    rows = store.count()
    store.close()
    with Registry(root, storage=url) as reg:
        kinds = dict(Counter(e.kind for e in reg.events()))
    return {"rc": done.returncode, "wall_s": round(took, 1), "store_rows_in_db": rows, "event_kinds": kinds,
            "store_file": (home / "ray" / "evolve" / "evaluations.sqlite3").exists(),
            "tail": (done.stderr or done.stdout)[-800:]}


def render(args, wall: float, c: dict, ray: dict | None) -> list[str]:
    ok = (c["numbers_dense"] and c["rounds"] == c["rounds_expected"] and not c["round_twice"] and c["fsck_rc"] == 0
          and not any(c["unresolved"].values()) and len(set(c["champions"].values())) == 1 and not c["sqlite_files"]
          and sum(1 for v in c["per_machine"].values() if v) == args.machines)
    lines = ["# Many machines on one PostgreSQL storage", "",
             "Command: `python experiments/many_machines.py " + " ".join(sys.argv[1:]) + "`", "",
             f"{args.machines} machine folders share nothing but the storage URL; `evogym suite run --jobs "
             f"{args.machines}` x {args.batches} batches over {args.envs} (budget {args.budget}, profile quick), each "
             f"task's `ole agent work --online --every-k {args.every_k} --gate-on {args.gate_on}` on the first free machine. Stream wall "
             f"{wall / 60:.1f} min (2-core machine).", "",
             f"**All checks {'hold' if ok else 'DO NOT hold'}.**", "",
             "| check | measured |", "|---|---|",
             f"| tasks per machine | {', '.join(f'{k} {v}' for k, v in c['per_machine'].items())} |",
             f"| stream task numbers dense 1..T | {c['numbers_dense']} (T = {c['tasks']}) |",
             f"| proposal rounds (expected T // k) | {c['rounds']} ({c['rounds_expected']}); twice: {c['round_twice']} |",
             f"| registry events | {c['events']}: " + ", ".join(f"{k} {v}" for k, v in sorted(c['event_kinds'].items()))
             + " |",
             f"| traces named by events or the stream, unresolved per machine | {c['traces_named']}; "
             + ", ".join(f"{k} {v}" for k, v in c['unresolved'].items()) + " |",
             f"| champion seen by each machine | {', '.join(f'{k} {v}' for k, v in c['champions'].items())} |",
             f"| `ole fsck` exit code | {c['fsck_rc']} |",
             f"| registry/store files in machine folders | {', '.join(c['sqlite_files']) or 'none'} |", ""]
    if ray is not None:
        lines += ["## `ole evolve --executor ray` with the store in PostgreSQL", "",
                  f"Exit code {ray['rc']}, wall {ray['wall_s']} s; evaluation-store rows in the database: "
                  f"{ray['store_rows_in_db']}; a store file in the workdir: {ray['store_file']}; registry events (its "
                  "own database on the same server): "
                  + ", ".join(f"{k} {v}" for k, v in sorted(ray["event_kinds"].items())) + ".", ""]
        if ray["rc"] != 0:
            lines += ["```", ray["tail"], "```", ""]
    return lines


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "agent":
        return agent_main(sys.argv[2:])
    args = parse()
    home = Path(args.workdir).resolve()
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    from ole.storage.local_server import LocalServer
    server = LocalServer().start()
    try:
        url = server.create_database("many_machines")
        ms = machines(home, args.machines)
        wall = stream(args, home, url)
        c = checks(args, home, url, ms)
        ray = None if args.no_ray else ray_evolve(home, server.create_database("many_machines_ray"))
    finally:
        server.stop()
    text = "\n".join(render(args, wall, c, ray)) + "\n"
    print(text)
    if args.out:
        out = Path(args.out)
        out.write_text(text)
        out.with_suffix(".json").write_text(json.dumps({"checks": c, "ray": ray}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
