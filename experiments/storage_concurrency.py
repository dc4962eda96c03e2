"""Many writers, some killed with SIGKILL, on one registry: is every event there once, in order, seq dense?

`--writers` processes share one storage (SQLite files under one root, or one PostgreSQL database;
nothing else is shared) and each makes `--writes` registry writes in a fixed cycle: a registration
(a new child of coder@1), its evaluation, its gate decision, a staged release on the writer's own
channel plus the task boundary that starts it as a canary, and the canary's promotion (a `stage`
step). Every write carries an idempotency key (`w<writer>-<i>`) and the writer prints the seq the
registry answered. Between writes, every writer finishes a stream task (`EvaluationStore.add_task`)
and, when the task's number n is a multiple of `--every-k`, takes the round lease and commits the
round step once (the online stream's rule). The driver SIGKILLs a random live writer every
`--kills` times (each after 1..`--max-gap` more acknowledged writes of that writer) and restarts it;
a restarted writer replays the cycle it was killed in from its first write (the write in flight
may have committed without its acknowledgement), which the keys, content dedupe and the store's
steps must answer without a second event.

Checked at the end, per backend: every acknowledged (key, seq) is in the journal (no lost event);
no key, registration or round appears twice (no duplicate); each writer's events are in its own
write order (no reorder); seq is 1..N dense; `fsck` is clean; exactly one round event per k tasks.

    python experiments/storage_concurrency.py --out experiments/results/storage.md
    python experiments/storage_concurrency.py --writers 3 --writes 10 --kills 3 --max-gap 4 --out /tmp/s.md  # the test
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ole.registry import Registry  # noqa: E402
from ole.storage import STORAGE_ENV  # noqa: E402
from storage_latency import write_section  # noqa: E402  (experiments/, the script's own folder)

WRITER = textwrap.dedent("""
    import os, socket, sys
    from ole.bundle import bundle_from_data
    from ole.errors import Conflict
    from ole.evolve.store import EvaluationStore, step
    from ole.registry import Registry
    root, work, w, n, k, first = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), \
        int(sys.argv[6])
    reg = Registry(root)
    store = EvaluationStore(os.path.join(work, "evaluations.sqlite3"))
    channel, holder = f"w{w}", f"{socket.gethostname()}:{os.getpid()}:w{w}"
    ref = None

    def ack(key, seq):
        print("ack", key, seq, flush=True)

    for i in range(first, n):
        key, kind = f"w{w}-{i}", i % 5
        if kind == 0:
            size = round(0.01 + w * 0.01 + i * 0.00001, 6)  # unique per (writer, write): no cross-writer dedupe
            entry = reg.register(bundle_from_data({"name": "coder", "loop_policy": {"action": {"step_size": size}}}),
                                 parents=[1], note=key)
            ref = entry.ref
            ack(key, reg.journal.row((entry.name, entry.version)).registered_seq)
        elif kind == 1:
            ack(key, reg.record_evaluation(ref, {"writer": w, "i": i}, key=key))
        elif kind == 2:
            ack(key, reg.record_gate_decision(ref, {"verdict": "release", "writer": w, "i": i}, key=key))
        elif kind == 3:
            reg.release(ref, channel=channel, reason=key, key=key, exposure=0.5, analysis="x")
            reg.activate_pending(channel)
            ack(key, reg.journal.replayed(key).seq)
        else:
            ack(key, reg.stage(channel, "general", "promoted", reason=key, key=key).seq)
        t = store.add_task(key, {"writer": w, "i": i})
        if t % k == 0:
            with reg.lease("round:default", holder):
                done = step("round", t // k)
                if store.step(done) is None:
                    store.commit(done, {"n": t}, lambda rk: reg.record_evaluation("coder@1", {"round": t // k}, key=rk))
    print("done", flush=True)
""")


def run(storage: str | None, args: argparse.Namespace, base: Path) -> dict:
    """One backend: start the writers, kill and restart them, check the journal. Returns the figures."""
    root, work = base / "bundles", base / "work"
    root.mkdir(parents=True)
    work.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root)
    env = {**os.environ, "PYTHONPATH": str(ROOT), STORAGE_ENV: storage or "sqlite"}
    Registry(root, storage=storage).close()
    rng = random.Random(args.seed)

    def start(w: int) -> subprocess.Popen:
        """(Re)start writer `w` at the first write of the cycle holding its last acknowledged write: the
        write it was killed in, and any acknowledged before it in that cycle, are replayed."""
        acked = [int(line.split()[1].rsplit("-", 1)[1]) for line in (base / f"w{w}.out").read_text().splitlines()
                 if line.startswith("ack ")] if (base / f"w{w}.out").exists() else []
        first = max(acked, default=0) // 5 * 5
        return subprocess.Popen([sys.executable, "-c", WRITER, str(root), str(work), str(w), str(args.writes),
                                 str(args.every_k), str(first)], env=env, stdout=open(base / f"w{w}.out", "a"),
                                stderr=open(base / f"w{w}.err", "a"), text=True)

    def lines(w: int) -> int:
        return (base / f"w{w}.out").read_text().count("\n")

    t0 = time.monotonic()
    procs = {w: start(w) for w in range(args.writers)}
    kills = 0
    victim, gap, seen = rng.randrange(args.writers), rng.randint(1, args.max_gap), 0
    while any(p.poll() is None for p in procs.values()):
        time.sleep(0.02)
        for w, p in procs.items():
            if p.poll() not in (None, 0, -signal.SIGKILL):
                raise SystemExit(f"writer {w} failed: {(base / f'w{w}.err').read_text()[-2000:]}")
        if kills < args.kills and procs[victim].poll() is None and lines(victim) >= seen + gap:
            procs[victim].send_signal(signal.SIGKILL)  # mid-write or between writes, wherever it is
            procs[victim].wait()
            kills += 1
            procs[victim] = start(victim)
            victim, gap = rng.randrange(args.writers), rng.randint(1, args.max_gap)
            seen = lines(victim)
        elif procs[victim].poll() is not None:  # the victim finished first: pick another
            live = [w for w, p in procs.items() if p.poll() is None]
            if live:
                victim = rng.choice(live)
                seen = lines(victim)
    wall = time.monotonic() - t0
    return check(root, work, storage, args, kills, wall, base)


def check(root: Path, work: Path, storage: str | None, args: argparse.Namespace, kills: int, wall: float,
          base: Path) -> dict:
    from ole.evolve.store import EvaluationStore
    acked: dict[str, set[int]] = {}
    for w in range(args.writers):
        for line in (base / f"w{w}.out").read_text().splitlines():
            if line.startswith("ack "):
                _, key, seq = line.split()
                acked.setdefault(key, set()).add(int(seq))
    with Registry(root, storage=storage) as reg:
        events = reg.events()
        report = reg.fsck(repair=False)
        keys = dict(reg.journal.dump().keys)
    by_seq = {e.seq: e for e in events}
    lost = [k for k, seqs in acked.items() if any(s not in by_seq for s in seqs)]
    twice = [k for k, seqs in acked.items() if len(seqs) > 1]  # a replay answered with another event
    notes = Counter(e.payload.get("note") for e in events if e.kind == "registration" and e.payload.get("note"))
    twice += [n for n, c in notes.items() if c > 1]
    rounds = Counter(e.payload["round"] for e in events if e.kind == "evaluation" and "round" in e.payload)
    order = []
    for w in range(args.writers):
        mine = [(min(acked[f"w{w}-{i}"]), i) for i in range(args.writes) if f"w{w}-{i}" in acked]
        if [i for _, i in sorted(mine)] != [i for _, i in mine]:
            order.append(w)
    seqs = [e.seq for e in events]
    store = EvaluationStore(work / "evaluations.sqlite3", storage=storage or "sqlite")
    tasks = len(store.tasks())
    store.close()
    complete = len(acked) == args.writers * args.writes
    return {"events": len(events), "acked": len(acked), "complete": complete, "lost": len(lost),
            "duplicated": len(twice),
            "reordered": len(order), "dense": seqs == list(range(1, len(seqs) + 1)), "fsck": report.ok,
            "problems": list(report.problems[:3]), "keys": len(keys), "tasks": tasks,
            "rounds": len(rounds), "rounds_expected": tasks // args.every_k,
            "round_twice": sum(c > 1 for c in rounds.values()), "kills": kills, "wall_s": round(wall, 1)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--writers", type=int, default=8, help="writer processes")
    p.add_argument("--writes", type=int, default=500, help="registry writes per writer")
    p.add_argument("--every-k", type=int, default=7, help="a round after every k stream tasks")
    p.add_argument("--kills", type=int, default=24, help="SIGKILLs in all, each of a random live writer")
    p.add_argument("--max-gap", type=int, default=60,
                   help="a victim is killed after 1..max-gap more acknowledged writes")
    p.add_argument("--backends", nargs="+", default=["sqlite", "postgresql"], choices=["sqlite", "postgresql"])
    p.add_argument("--storage", default=None, help="a PostgreSQL URL to use (default: a throw-away local cluster)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, required=True, help="results markdown (its concurrency section is replaced)")
    args = p.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a stopped run still stops its cluster
    rows = []
    for backend in args.backends:
        base = Path(tempfile.mkdtemp(prefix=f"ole-conc-{backend}-"))
        try:
            if backend == "sqlite":
                rows.append((backend, run(None, args, base)))
            elif args.storage:
                rows.append((backend, run(args.storage, args, base)))
            else:
                from ole.storage.local_server import LocalServer
                with LocalServer(durable=True) as server:
                    rows.append((backend, run(server.create_database(), args, base)))
        finally:
            shutil.rmtree(base, ignore_errors=True)
        print(backend, rows[-1][1], flush=True)
    write(args, rows)
    bad = [b for b, r in rows if not (r["complete"] and r["dense"] and r["fsck"]) or r["lost"] or r["duplicated"]
           or r["reordered"] or r["round_twice"] or r["rounds"] != r["rounds_expected"]]
    raise SystemExit(f"FAILED on {bad}" if bad else 0)


def write(args: argparse.Namespace, rows: list) -> None:
    command = " ".join(["python experiments/storage_concurrency.py", *sys.argv[1:]])
    lines = [f"### Concurrency: {args.writers} writers x {args.writes} writes, {args.kills} SIGKILLs", "",
             f"`{command}` ({os.cpu_count()} cores, {time.strftime('%Y-%m-%d')})", "",
             "| backend | writers killed | events | acked writes | lost | duplicated | reordered | seq dense | fsck "
             "| stream tasks | rounds (expected) | round twice | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for backend, r in rows:
        lines.append(f"| {backend} | {r['kills']} | {r['events']} | {r['acked']} | {r['lost']} | {r['duplicated']} "
                     f"| {r['reordered']} | {'yes' if r['dense'] else 'NO'} "
                     f"| {'clean' if r['fsck'] else r['problems']} "
                     f"| {r['tasks']} | {r['rounds']} ({r['rounds_expected']}) | {r['round_twice']} | {r['wall_s']} |")
    write_section(args.out, "storage_concurrency", "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
