"""Per-submit latency: a sandbox started when its submit arrives vs one started ahead (a spare).

Measured side by side in one run, every number a median:

1. Per-submit wall time as the agent sees it (one `POST /submit` over loopback HTTP) for
   Acrobot 1, 4 and 16 episodes and FourRooms 4 episodes, in these modes:
   `base` (optional, `--baseline-src DIR`: another evogym source tree, e.g. a checkout
   of the branch before this change, run in a child process), `cold` (this tree with
   `--no-prestart`: every sandbox started when its submit arrives), `spare` (back to
   back: the next submit is sent the moment the last answer arrives, so its spare had
   only the last submit's own duration to come up) and `spare, ready` (the spare was up
   before the submit was sent, as after any agent that thinks for half a second).
   The fixed overhead of a submit = its wall time minus the time inside its episodes.
2. Where a submit's time goes, per phase of the request thread (Acrobot 1 and 4 episodes).
3. `ole run --env gym/acrobot --agent builtin --profile quick`: the agent wall time with
   `action.episodes_per_submit` 1 vs 4, the ratio the release gate's cost criterion sees.

    python experiments/bench_submit_latency.py [--repeats 7] [--agent-repeats 3] \\
        [--baseline-src DIR] [--out experiments/results/submit_latency.md]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = (("gym/acrobot", 1), ("gym/acrobot", 4), ("gym/acrobot", 16), ("gymnasium/MiniGrid-FourRooms-v0", 4))
PHASE_CONFIGS = (("gym/acrobot", 1), ("gym/acrobot", 4))
POLICY = """
import numpy as np


class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.n = int(action_space.get("n", 3))

    def reset(self, episode_index):
        self.t = 0

    def act(self, obs):
        self.t += 1
        if isinstance(obs, dict):  # MiniGrid: mostly forward, a turn now and then
            return 2 if self.t % 5 else 1
        return 2 if np.asarray(obs, dtype=float)[4] > 0 else 0  # torque along link 1's swing
"""


class PhaseClock:
    """Wall time per phase of the request thread, from wrappers around the functions a
    submit is made of (a sandbox's start-up on the spare's own thread counts apart)."""

    POINTS = (("evogym.judge", "snapshot", "snapshot copy"), ("evogym.judge:Judge", "write_metrics", "code metrics"),
              ("evogym.judge", "validate_snapshot", "static checks"), ("evogym.judge", "denied_imports", "static checks"),
              ("evogym.sandbox.spare:Spare", "take", "spare wait"),
              ("evogym.sandbox.process:PolicyProcess", "start", "sandbox start"),
              ("evogym.rollout", "_episode", "episodes"),
              ("evogym.sandbox.process:PolicyProcess", "close", "teardown"),
              ("evogym.sandbox.spare:Spare", "retire", "teardown"),
              ("evogym.recording:PendingFiles", "result", "episode files wait"),
              ("evogym.judge", "write_tree", "feedback write"),
              ("evogym.feedback:PartialTree", "commit", "feedback write"),
              ("evogym.sandbox.process:PolicyProcess", "prepare", "spare start-up (off the request)"))

    def __init__(self) -> None:
        import importlib

        self.current: dict[str, float] = defaultdict(float)
        self.request_thread: int | None = None
        self._undo: list[tuple[object, str, object]] = []
        for where, name, label in self.POINTS:
            module, _, cls = where.partition(":")
            try:
                owner = importlib.import_module(module)
                owner = getattr(owner, cls) if cls else owner
                self._wrap(owner, name, label)
            except (ImportError, AttributeError):
                pass  # an older tree without spares: those phases read 0
        import evogym.judge
        import evogym.rundir
        self._wrap(evogym.judge.Judge, "submit", "judge total", always=True)
        event = evogym.rundir.RunDir.event

        def timed_event(run, name, /, *args, **kw):
            t0 = time.perf_counter()
            try:
                return event(run, name, *args, **kw)
            finally:
                if threading.get_ident() == self.request_thread:
                    label = "charge event (fsync)" if name == "submit.charge" else "other events"
                    self.current[label] += time.perf_counter() - t0
        self._undo.append((evogym.rundir.RunDir, "event", event))
        evogym.rundir.RunDir.event = timed_event

    def _wrap(self, owner, name: str, label: str, always: bool = False) -> None:
        inner = getattr(owner, name)
        clock = self
        background = label.startswith("spare start-up")

        def timed(*args, **kw):
            if always:
                clock.request_thread = threading.get_ident()
            t0 = time.perf_counter()
            try:
                return inner(*args, **kw)
            finally:
                if always or background or threading.get_ident() == clock.request_thread:
                    clock.current[label] += time.perf_counter() - t0
        self._undo.append((owner, name, inner))
        setattr(owner, name, timed)

    def close(self) -> None:
        """Put every wrapped function back."""
        for owner, name, inner in reversed(self._undo):
            setattr(owner, name, inner)
        self._undo.clear()

    def take(self) -> dict[str, float]:
        out, self.current = dict(self.current), defaultdict(float)
        return out


def post_submit(url: str, n: int, token: str) -> float:
    req = urllib.request.Request(url + "/submit", data=json.dumps({"env_instances": f"0-{n - 1}"}).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    t0 = time.perf_counter()
    body = json.load(urllib.request.urlopen(req, timeout=3600))
    wall = time.perf_counter() - t0
    assert body["status"] == "ok", body
    return wall


def submit_series(slug: str, n: int, count: int, workdir: Path, clock: PhaseClock, *,
                  prestart: bool | None, ready: bool = False) -> list[dict]:
    """`count` measured submits (after one warm-up) of `n` episodes on a fresh host.
    prestart None: a tree without the option (the baseline)."""
    from evogym.host import Host, make_config
    from evogym.server import Server

    config = make_config(slug, "bench", budget=n * (count + 1) + 1, max_per_submit=n)  # +1: no auto-finalize
    kw = {} if prestart is None else {"prestart": prestart}
    host = Host(workdir / f"run-{time.time_ns()}", config, **kw)
    server = Server(host).start()
    rows = []
    try:
        for k in range(count + 1):
            (host.run.system / "policy.py").write_text(POLICY + f"# edit {k}\n")  # a new program each time
            if ready and getattr(host.judge, "spare", None) is not None:
                host.judge.spare.waiting(timeout=600)
            clock.take()
            wall = post_submit(server.url, n, server.credential.token)
            phases = clock.take()
            if k:
                rows.append({"wall": wall, **phases})
    finally:
        server.stop()
        if hasattr(host, "close"):
            host.close()
    return rows


def baseline_series(src: Path, slug: str, n: int, count: int, workdir: Path) -> list[dict]:
    """The same series with the evogym of another source tree, in a child process."""
    out = subprocess.run([sys.executable, __file__, "--child", slug, str(n), str(count), str(workdir)],
                         env={**os.environ, "PYTHONPATH": str(src)}, cwd=workdir, capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"baseline child failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.splitlines()[-1])


def child(args: list[str]) -> None:
    slug, n, count, workdir = args[0], int(args[1]), int(args[2]), Path(args[3])
    import evogym
    assert Path(evogym.__file__).resolve().is_relative_to(Path(os.environ["PYTHONPATH"]).resolve()), evogym.__file__
    print(json.dumps(submit_series(slug, n, count, workdir, PhaseClock(), prestart=None)))
    sys.stdout.flush()


def median_of(rows: list[dict], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in rows)


def part_submits(args, workdir: Path, clock: PhaseClock) -> dict:
    """Blocks of `repeats` submits per mode, run in the order cold, spare, ready, base and then
    reversed, so a change of machine load meets every mode alike."""
    modes = ["cold", "spare", "spare, ready"] + (["base"] if args.baseline_src else [])
    results = {}
    for slug, n in args.configs:
        rows = {m: [] for m in modes}
        half = max(1, (args.repeats + 1) // 2)
        for order in (modes, modes[::-1]):
            for mode in order:
                if mode == "base":
                    rows[mode] += baseline_series(args.baseline_src, slug, n, half, workdir)
                else:
                    rows[mode] += submit_series(slug, n, half, workdir, clock, prestart=mode != "cold",
                                                ready=mode == "spare, ready")
        results[(slug, n)] = rows
        print(json.dumps({"env": slug, "n": n, **{m: round(median_of(r, "wall"), 4) for m, r in rows.items()}}),
              flush=True)
    return results


def agent_bundle(episodes: int):
    from ole.bundle import load_bundle_yaml

    bundle = load_bundle_yaml(REPO / "bundles" / "coder.yaml")
    lp = bundle.loop_policy
    action = lp.action.model_copy(update={"episodes_per_submit": episodes})
    return bundle.model_copy(update={"loop_policy": lp.model_copy(update={"action": action})})


def one_agent_run(episodes: int, mode: str, workdir: Path, baseline: Path | None, budget: int | None) -> dict:
    from ole.runner import run_bundle
    from ole.trace import RunCondition, TaskSpec

    env_before = os.environ.get("PYTHONPATH")
    serve_args = ("--no-prestart",) if mode == "cold" else ()
    cwd = os.getcwd()
    try:
        if mode == "base":  # the host child imports the baseline tree (and not the cwd's)
            os.environ["PYTHONPATH"] = str(baseline)
            os.chdir(workdir)
        t0, cpu0 = time.perf_counter(), time.process_time()
        trace = run_bundle(TaskSpec(env="gym/acrobot", profile="quick", budget=budget), f"coder{episodes}@1", agent_bundle(episodes),
                           RunCondition(host="builtin", seed=0), runs_dir=workdir / "agent-runs",
                           serve_args=serve_args)
        total, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    finally:
        os.chdir(cwd)
        if env_before is None:
            os.environ.pop("PYTHONPATH", None)
        else:
            os.environ["PYTHONPATH"] = env_before
    o = trace.outcome
    assert o.status == "completed", o
    return {"agent_wall": o.wall_s, "agent_cpu": cpu, "total": total, "submits": o.n_submits,
            "score": o.final_score}


def part_agent(args, workdir: Path) -> dict:
    modes = ["cold", "spare"] + (["base"] if args.baseline_src else [])
    rows = defaultdict(list)
    for mode in modes:  # warm-up, not measured: the agent's first run in a process pays its imports (~3 s)
        one_agent_run(1, mode, workdir, args.baseline_src, 2)
    for r in range(args.agent_repeats):
        for episodes in (1, 4):
            for mode in (modes if r % 2 == 0 else modes[::-1]):
                row = one_agent_run(episodes, mode, workdir, args.baseline_src, args.agent_budget)
                rows[(mode, episodes)].append(row)  # repeat r of (mode, 1) and (mode, 4) ran close in time
                print(json.dumps({"mode": mode, "episodes_per_submit": episodes, **row}), flush=True)
    return rows


def fsync_batch(files: int = 13, repeats: int = 15) -> tuple[float, float]:
    """Median ms to make `files` small new files durable one by one vs with `fsync_all`
    (the 4-episode feedback tree had 13 files when each was fsynced before the rename)."""
    from evogym.feedback import fsync_all

    times = {"one by one": [], "together": []}
    with tempfile.TemporaryDirectory(dir=REPO) as tmp:  # the filesystem the runs live on
        for k in range(repeats):
            for mode, sync in (("one by one", lambda fds: [os.fsync(fd) for fd in fds]), ("together", fsync_all)):
                fds = [os.open(f"{tmp}/{mode[0]}{k}_{i}", os.O_WRONLY | os.O_CREAT) for i in range(files)]
                for fd in fds:
                    os.write(fd, b"x" * 3000)
                t0 = time.perf_counter()
                sync(fds)
                times[mode].append((time.perf_counter() - t0) * 1e3)
                for fd in fds:
                    os.close(fd)
    return statistics.median(times["one by one"]), statistics.median(times["together"])


def render(args, submits: dict, agent: dict, load: tuple[str, str], fsyncs: tuple[float, float]) -> str:
    modes = list(next(iter(submits.values())))
    before = "base" if "base" in modes else "cold"
    lines = [f"Machine load (1-min loadavg, `/proc/loadavg`) at start: {load[0]}; at end: {load[1]}.", "",
             "### Per-submit wall time (s, median) and fixed overhead (ms: wall minus time in episodes)", "",
             "| env | episodes | " + " | ".join(f"{m} s" for m in modes) + " | "
             + " | ".join(f"{m} fixed ms" for m in modes) + f" | fixed: {before} / spare (ready) |",
             "|---|---|" + "---|" * (2 * len(modes) + 1)]
    for (slug, n), rows in submits.items():
        walls = [median_of(rows[m], "wall") for m in modes]
        fixed = [statistics.median(r["wall"] - r.get("episodes", 0.0) for r in rows[m]) * 1e3 for m in modes]
        was = fixed[modes.index(before)]
        gain = [was / max(fixed[modes.index(m)], 1e-9) for m in ("spare", "spare, ready")]
        lines.append(f"| {slug} | {n} | " + " | ".join(f"{w:.3f}" for w in walls) + " | "
                     + " | ".join(f"{f:.0f}" for f in fixed) + f" | **{gain[0]:.1f}×** ({gain[1]:.1f}×) |")
    for slug, n in (c for c in PHASE_CONFIGS if c in submits):
        rows = submits[(slug, n)]
        shown = [m for m in modes if m != "base"]
        labels = []
        for m in shown:
            for r in rows[m]:
                labels += [k for k in r if k not in labels and k not in ("wall", "judge total")]
        lines += ["", f"### Where the time goes: {slug}, {n} episode(s) per submit (ms, median per phase)", "",
                  "| phase | " + " | ".join(shown) + " |", "|---|" + "---|" * len(shown)]
        for label in labels:
            lines.append(f"| {label} | " + " | ".join(f"{median_of(rows[m], label) * 1e3:.1f}" for m in shown) + " |")
        lines.append("| HTTP, parse, summary, rest | " + " | ".join(
            f"{(median_of(rows[m], 'wall') - median_of(rows[m], 'judge total')) * 1e3:.1f}" for m in shown) + " |")
        lines.append("| **submit wall (client)** | " + " | ".join(
            f"**{median_of(rows[m], 'wall') * 1e3:.1f}**" for m in shown) + " |")
    lines += ["", f"fsync of 13 new 3 KB files: one by one {fsyncs[0]:.1f} ms, together (`feedback.fsync_all`) "
              f"{fsyncs[1]:.1f} ms (median of 15)."]
    if agent:
        budget = f" --budget {args.agent_budget}" if args.agent_budget else ""
        lines += ["", f"### `ole run --env gym/acrobot --agent builtin --profile quick{budget}` (median; s)", "",
                  "| host | agent wall, 1 ep/submit | agent wall, 4 ep/submit | **ratio 1 / 4** | ratio per repeat: "
                  "median [min, max] | submits 1 / 4 | agent's own CPU 1 / 4 | run wall 1 / 4 (incl. host start, "
                  "finalize) |", "|---|---|---|---|---|---|---|---|"]
        for mode in dict.fromkeys(m for m, _ in agent):
            one, four = agent[(mode, 1)], agent[(mode, 4)]
            a1, a4 = median_of(one, "agent_wall"), median_of(four, "agent_wall")
            per = [x["agent_wall"] / y["agent_wall"] for x, y in zip(one, four)]
            lines.append(f"| {mode} | {a1:.2f} | {a4:.2f} | **{a1 / a4:.2f}** | {statistics.median(per):.2f} "
                         f"[{min(per):.2f}, {max(per):.2f}] | {median_of(one, 'submits'):.0f} / "
                         f"{median_of(four, 'submits'):.0f} | {median_of(one, 'agent_cpu'):.2f} / "
                         f"{median_of(four, 'agent_cpu'):.2f} | {median_of(one, 'total'):.1f} / "
                         f"{median_of(four, 'total'):.1f} |")
    return "\n".join(lines)


def config(text: str) -> tuple[str, int]:
    slug, _, n = text.rpartition(":")
    return slug, int(n)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    sys.path.insert(0, str(REPO))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--configs", type=config, nargs="+", default=list(CONFIGS),
                    help="ENV:EPISODES per submit to measure (default: Acrobot 1, 4, 16 and FourRooms 4)")
    ap.add_argument("--agent-budget", type=int, help="episode budget of the `ole run`s (default: the profile's 32)")
    ap.add_argument("--repeats", type=int, default=7, help="measured submits per mode and config (median)")
    ap.add_argument("--agent-repeats", type=int, default=3, help="`ole run`s per mode and episodes_per_submit")
    ap.add_argument("--baseline-src", type=Path, help="another evogym source tree to measure as `base`")
    ap.add_argument("--out", type=Path, help="write the markdown tables here")
    args = ap.parse_args(argv)
    if args.baseline_src:
        args.baseline_src = args.baseline_src.resolve()
    load0 = Path("/proc/loadavg").read_text().split()[0]
    clock = PhaseClock()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            submits = part_submits(args, Path(tmp), clock)
            agent = part_agent(args, Path(tmp)) if args.agent_repeats else {}
    finally:
        clock.close()
    table = render(args, submits, agent, (load0, Path("/proc/loadavg").read_text().split()[0]), fsync_batch())
    print(table)
    if args.out:
        write_results(args.out, table, argv)


ACCOUNT = "## Account"
"""The hand-written part of the results file from this heading on is kept when the tables are rewritten."""


def write_results(out: Path, table: str, argv: list[str]) -> None:
    command = "python experiments/bench_submit_latency.py " + " ".join(argv)
    head = ["# Per-submit latency: sandbox started with the submit (cold) vs started ahead (spare)", "",
            f"Command ({time.strftime('%Y-%m-%d')}; medians; the machine is shared, see the load line):", "",
            f"    {command}", "", table, ""]
    old = out.read_text() if out.exists() else ""
    kept = old[old.index(ACCOUNT):] if ACCOUNT in old else ""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(head) + ("\n" + kept if kept else ""))


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        main()
