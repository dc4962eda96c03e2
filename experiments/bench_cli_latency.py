"""How long the `ole` command takes to answer, beside `python -c pass` in the same interpreter, in one run.

Each round starts, in turn, `python -c pass`, `ole --version`, `ole --help` and `ole champion show`
(on a private copy of the seed registry) as whole processes and reads a monotonic clock around each;
the rounds alternate the commands so a change of machine speed during the run touches all of them
alike. A command's overhead is the median over rounds of (its wall time - `python -c pass`'s in the
same round): what `ole` adds to starting Python. The targets are those of the issue "A library people
use": `--version` and `--help` at most +0.15 s, `champion show` at most +0.4 s.

    python experiments/bench_cli_latency.py --repeats 40    # on a quiet machine; writes the table below
    python experiments/bench_cli_latency.py --repeats 2 --out /tmp/cli.md   # a smoke run

Writes experiments/results/cli_latency.md (and the raw seconds as .json beside it).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"ole --version": 0.15, "ole --help": 0.15, "ole champion show": 0.4}
"""Most seconds each command may add to `python -c pass` (the issue's targets)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=40, help="rounds; each starts every command once (default 40)")
    p.add_argument("--warmup", type=int, default=2, help="rounds run first and not counted (default 2)")
    p.add_argument("--ole", default=None, help="the `ole` script (default: the one beside this Python)")
    p.add_argument("--out", default=str(ROOT / "experiments" / "results" / "cli_latency.md"),
                   help="markdown table to write (the raw seconds go to the same name with .json)")
    args = p.parse_args(argv)
    if args.repeats < 1 or args.warmup < 0:
        p.error("--repeats must be >= 1 and --warmup >= 0")
    return args


def commands(ole: str, root: Path) -> dict[str, list[str]]:
    """Name -> argv of every command timed, the yardstick first."""
    return {"python -c pass": [sys.executable, "-c", "pass"], "ole --version": [ole, "--version"],
            "ole --help": [ole, "--help"], "ole champion show": [ole, "--root", str(root), "champion", "show"]}


def time_once(argv: list[str], env: dict[str, str], cwd: Path) -> float:
    """Wall seconds of one whole process, start to exit; a failing command stops the benchmark."""
    start = time.perf_counter()
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd, timeout=300)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return wall


def measure(cmds: dict[str, list[str]], repeats: int, warmup: int, env: dict[str, str], cwd: Path
            ) -> dict[str, list[float]]:
    """Wall seconds per command per counted round; each round runs every command once, the order
    rotated by one each round."""
    names = list(cmds)
    walls: dict[str, list[float]] = {n: [] for n in names}
    for r in range(warmup + repeats):
        order = names[r % len(names):] + names[: r % len(names)]
        for name in order:
            wall = time_once(cmds[name], env, cwd)
            if r >= warmup:
                walls[name].append(wall)
    return walls


def summarize(walls: dict[str, list[float]]) -> list[dict[str, object]]:
    """Per command: median wall, min/max, and the median over rounds of its excess over `python -c pass`."""
    base = walls["python -c pass"]
    rows = []
    for name, values in walls.items():
        over = [v - b for v, b in zip(values, base)]
        target = TARGETS.get(name)
        median_over = statistics.median(over)
        rows.append({"command": name, "median_s": statistics.median(values), "min_s": min(values),
                     "max_s": max(values), "over_python_s": median_over, "target_s": target,
                     "met": None if target is None else median_over <= target})
    return rows


def loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # not on every platform
        return "?"


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "?"


def render(rows: list[dict[str, object]], meta: dict[str, object]) -> str:
    lines = ["# How long `ole` takes to answer", "",
             "Command: `python experiments/bench_cli_latency.py " + str(meta["argv"]) + "`", "",
             f"Commit {meta['commit']}, {meta['date']}, {meta['cpus']} CPUs, Python {meta['python']}; load average "
             f"{meta['load_before']} before, {meta['load_after']} after; {meta['repeats']} rounds (+{meta['warmup']} "
             "warm-up), each starting every command once as a whole process, the order rotated each round.", "",
             "`over python` is the median over rounds of (the command's wall - `python -c pass`'s in the same round).",
             "", "| command | median s | min s | max s | over python s | target | met |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        target = "-" if r["target_s"] is None else f"<= +{r['target_s']:.2f}"
        met = "-" if r["met"] is None else ("yes" if r["met"] else "NO")
        lines.append(f"| `{r['command']}` | {r['median_s']:.3f} | {r['min_s']:.3f} | {r['max_s']:.3f} | "
                     f"{r['over_python_s']:+.3f} | {target} | {met} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ole = args.ole or str(Path(sys.executable).with_name("ole"))
    if not Path(ole).is_file():
        raise SystemExit(f"no `ole` script at {ole} (pass --ole PATH)")
    with tempfile.TemporaryDirectory(prefix="cli-latency-") as tmp:
        scratch = Path(tmp)
        root = scratch / "bundles"
        root.mkdir()
        shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
        env = {**os.environ, "XDG_DATA_HOME": str(scratch / "data")}
        env.pop("OLE_ROOT", None)
        cmds = commands(ole, root)
        time_once(cmds["ole champion show"], env, scratch)  # registers the seed: every timed call only reads
        before = loadavg()
        walls = measure(cmds, args.repeats, args.warmup, env, scratch)
        after = loadavg()
    meta = {"argv": " ".join(argv if argv is not None else sys.argv[1:]), "commit": commit(),
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"), "cpus": os.cpu_count(),
            "python": platform.python_version(), "load_before": before, "load_after": after,
            "repeats": args.repeats, "warmup": args.warmup}
    rows = summarize(walls)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(rows, meta))
    out.with_suffix(".json").write_text(json.dumps({"meta": meta, "rows": rows, "walls": walls}, indent=2) + "\n")
    print(render(rows, meta))
    return 0


if __name__ == "__main__":
    sys.exit(main())
