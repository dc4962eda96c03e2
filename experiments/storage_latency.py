"""Is PostgreSQL storage fast enough at a task boundary? `ole champion show` and `Registry.select` on
the same registry in SQLite and in PostgreSQL, side by side (target: PostgreSQL within 2x of SQLite).

A registry with `--versions` registered versions is built in SQLite (each with an evaluation of
`--pairs` per-pair values, a gate decision, and every 10th released and activated on `default`),
then copied into a fresh database of a local, durable PostgreSQL cluster (`ole storage migrate`'s
copy; fsync on, as SQLite's synchronous=FULL). Rounds alternate the backends so a change of machine
speed touches both alike; each figure is the median over rounds:

- `ole champion show`: the whole command as a process (`--root` vs `--root --storage URL`);
- open: `Registry(root)` in-process (connect, schema check, seed check);
- select: `select("default", task)` with nothing pending (a read-only boundary);
- select + activation: the same with a release pending, so the boundary records an activation.

    python experiments/storage_latency.py --out experiments/results/storage.md
    python experiments/storage_latency.py --versions 5 --repeats 2 --out /tmp/lat.md   # the test
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ole.bundle import TaskContext, bundle_from_data  # noqa: E402
from ole.registry import Registry  # noqa: E402
from ole.storage.migrate import migrate  # noqa: E402

TARGET = 2.0
"""Largest PostgreSQL / SQLite ratio the issue accepts."""
TASK = TaskContext(host="builtin", env="gym/acrobot", family="classic_control", budget=32)


def build(root: Path, versions: int, pairs: int) -> None:
    """The SQLite registry the benchmark reads."""
    shutil.copy(ROOT / "bundles" / "coder.yaml", root)
    with Registry(root) as reg:
        for v in range(versions):
            entry = reg.register(bundle_from_data({"name": "coder", "loop_policy": {
                "action": {"step_size": round(0.01 + v * 0.001, 6)}}}), parents=[1])
            reg.record_evaluation(entry.ref, {"r": [0.01 * i for i in range(pairs)], "mean_r": 0.1})
            reg.record_gate_decision(entry.ref, {"verdict": "release"})
            if v % 10 == 0:
                reg.release(entry.ref, reason="bench")
                reg.activate_pending()


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def measure(root: Path, url: str, args: argparse.Namespace) -> dict[str, dict[str, list[float]]]:
    ole = str(Path(sys.executable).with_name("ole"))
    storages = {"sqlite": [], "postgresql": ["--storage", url]}
    out: dict[str, dict[str, list[float]]] = {b: {} for b in storages}
    regs = {"sqlite": Registry(root, storage="sqlite"), "postgresql": Registry(root, storage=url)}
    refs = [e.ref for e in regs["sqlite"].versions("coder")[-2:]]
    for r in range(args.repeats):
        for backend, flags in storages.items():
            env = {**os.environ, "OLE_STORAGE": ""}
            command = [ole, "--root", str(root), *flags, "champion", "show"]
            out[backend].setdefault("ole champion show", []).append(timed(lambda: subprocess.run(
                command, env=env, check=True, capture_output=True)))
            out[backend].setdefault("open", []).append(
                timed(lambda: Registry(root, storage=url if backend == "postgresql" else "sqlite").close()))
            reg = regs[backend]
            out[backend].setdefault("select", []).append(timed(lambda: reg.select("default", TASK)))
            reg.release(refs[r % 2], reason="bench")  # pending: the next boundary records an activation
            out[backend].setdefault("select + activation", []).append(timed(lambda: reg.select("default", TASK)))
    for reg in regs.values():
        reg.close()
    return out


def write_section(path: Path, name: str, text: str) -> None:
    """Replace this script's section of the shared results file (between its markers), keeping the rest."""
    begin, end = f"<!-- {name} -->", f"<!-- /{name} -->"
    old = path.read_text() if path.exists() else "# Storage: SQLite and PostgreSQL\n"
    if begin in old:
        old = old[:old.index(begin)] + old[old.index(end) + len(end) + 1:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(old.rstrip("\n") + f"\n\n{begin}\n{text}{end}\n")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--versions", type=int, default=300, help="registered versions in the benchmark registry")
    p.add_argument("--pairs", type=int, default=64, help="per-pair values in each evaluation payload")
    p.add_argument("--repeats", type=int, default=30, help="rounds; each measures both backends once")
    p.add_argument("--out", type=Path, required=True, help="results markdown (its latency section is replaced)")
    args = p.parse_args()
    from ole.storage.local_server import LocalServer
    base = Path(tempfile.mkdtemp(prefix="ole-lat-"))
    try:
        root = base / "bundles"
        root.mkdir()
        build(root, args.versions, args.pairs)
        with LocalServer(durable=True) as server:
            url = server.create_database()
            copied = migrate(str(root), url)
            times = measure(root, url, args)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    command = " ".join(["python experiments/storage_latency.py", *sys.argv[1:]])
    lines = [f"### Latency: {copied.events} events, {copied.bundles} versions, median of {args.repeats} rounds", "",
             f"`{command}` ({os.cpu_count()} cores, {time.strftime('%Y-%m-%d')}; PostgreSQL {server_version()} on a "
             "unix socket of the same machine, fsync on)", "",
             "| operation | SQLite ms | PostgreSQL ms | ratio | within 2x |", "|---|---|---|---|---|"]
    for op in times["sqlite"]:
        a, b = (statistics.median(times[k][op]) * 1000 for k in ("sqlite", "postgresql"))
        lines.append(f"| {op} | {a:.1f} | {b:.1f} | {b / a:.2f} | {'yes' if b / a <= TARGET else 'NO'} |")
    text = "\n".join(lines) + "\n"
    print(text)
    write_section(args.out, "storage_latency", text)


def server_version() -> str:
    from ole.storage.local_server import find_bindir
    done = subprocess.run([str(find_bindir() / "postgres"), "--version"], capture_output=True, text=True)
    found = re.search(r"\d+\.\d+", done.stdout)
    return found.group(0) if found else "?"


if __name__ == "__main__":
    main()
