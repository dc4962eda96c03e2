"""Host overhead: raw in-process stepping vs our sandboxed submit vs the reference v0.1.0's
submit of the same episodes, side by side in one run.

For each env the same episodes (the same train seeds, a fresh env per episode, seeded as
both hosts seed them) are run three ways with the same heuristic policy:

- raw: in this process, the policy called directly on the env's numpy observations;
- ours: one `POST /submit` over loopback HTTP to a live host, bubblewrap sandbox on
  (snapshot, code metrics, sandbox start, every act() across the process boundary,
  trajectories, observations and the feedback tree included);
- reference: the EvoPolicyGym v0.1.0 host's in-process `Service.submit` (its own
  snapshot, metrics, rollout in its process, feedback), from `--reference-src`
  (skipped with a message when the folder is absent).

Repeats are interleaved (raw, ours, reference, raw, ...) so load changes hit all three;
medians are reported. Where the time of our submit goes is read from the host's own
`submit.finish` timing event; the act() round trip is measured alone with the env's
observation. Finalize: a run with identical and distinct checkpoints, our finalize
(identical trees share one evaluation, distinct ones in parallel) vs the reference's
serial validation of every candidate.

    python experiments/bench_host_overhead.py --episodes 64 --repeats 3 \\
        --reference-src ../shared/reference/evopolicygym-v0.1.0/src --out experiments/results/host_overhead.md
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import textwrap
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evogym import envs, pools  # noqa: E402
from evogym.host import Host, make_config  # noqa: E402
from evogym.recording import Formatter  # noqa: E402
from evogym.sandbox import Limits, PolicyProcess  # noqa: E402
from evogym.sandbox.cgroup import share_cpu_group  # noqa: E402
from evogym.server import Server  # noqa: E402

ENVS = ("gym/acrobot", "gym/halfcheetah5", "gymnasium/MiniGrid-FourRooms-v0")
POLICIES = {
    # a first attempt that never swings up: every episode runs to the 500-step cap, so the
    # 64 episodes are 32000 steps and per-step costs dominate (as in issue 12's measurement)
    "gym/acrobot": """
        THRESHOLD = 0.0
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                pass
            def reset(self, episode_index):
                pass
            def act(self, obs):
                # torque along the first link's angular velocity
                return 2 if obs[4] > THRESHOLD else 0
        """,
    "gym/halfcheetah5": """
        import math
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                self.t = 0
            def reset(self, episode_index):
                self.t = 0
            def act(self, obs):
                # a fixed gait, phase-shifted per joint, damped by the joint velocities
                self.t += 1
                return [max(-1.0, min(1.0, 0.8 * math.sin(0.35 * self.t + 1.3 * i) - 0.05 * obs[11 + i]))
                        for i in range(6)]
        """,
    "gymnasium/MiniGrid-FourRooms-v0": """
        class Policy:
            def __init__(self, obs_space, action_space, env_meta):
                self.t = 0
            def reset(self, episode_index):
                self.t = 0
            def act(self, obs):
                # forward until a wall or lava is ahead, then turn
                self.t += 1
                ahead = obs["image"][3][5][0]
                if ahead in (2, 9):
                    return 1 if (self.t + obs["direction"]) % 2 else 0
                return 2
        """,
}


def policy_source(slug: str) -> str:
    return textwrap.dedent(POLICIES[slug])


def load_policy(slug: str):
    namespace: dict = {}
    exec(compile(policy_source(slug), f"<policy {slug}>", "exec"), namespace)  # noqa: S102 - our own source
    obs_schema, act_schema = envs.spaces_of(envs.resolve(slug))
    return namespace["Policy"](obs_schema, act_schema, {"env": slug})


TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
_ACCT: Path | None = None


def account_cpu() -> str:
    """Put this process (and so everything it starts: sandboxes, formatter, finalize workers)
    in its own cgroup v1 `cpuacct` group, whose usage counts exited processes too. Returns
    what CPU seconds will cover."""
    global _ACCT
    parent = Path("/sys/fs/cgroup/cpuacct")
    try:
        for old in parent.glob("evogym-bench-*"):  # groups of benchmarks that have ended
            if not (old / "cgroup.procs").read_text().strip():
                old.rmdir()
        group = parent / f"evogym-bench-{os.getpid()}"
        group.mkdir(exist_ok=True)
        (group / "cgroup.procs").write_text(str(os.getpid()))
        _ACCT = group
        return "this process and every process it started (a cgroup v1 cpuacct group)"
    except OSError:
        return ("this process, its reaped children and the formatter helper (no writable cpuacct group: "
                "the sandboxes' own CPU is missing from ours)")


def cpu_seconds() -> float:
    """CPU time (user + system) of everything this benchmark ran: what a submit costs in
    CPU, which load changes far less than wall time."""
    if _ACCT is not None:
        return int((_ACCT / "cpuacct.usage").read_text()) * 1e-9
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    helper = Formatter._proc
    if helper is not None and helper.poll() is None:
        try:
            fields = Path(f"/proc/{helper.pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) * TICK_S  # utime, stime
        except (OSError, IndexError, ValueError):
            pass
    return total


class Timed:
    """Wall and CPU seconds of a block."""

    def __enter__(self) -> "Timed":
        self.t0, self.c0 = time.perf_counter(), cpu_seconds()
        return self

    def __exit__(self, *exc) -> None:
        self.wall, self.cpu = time.perf_counter() - self.t0, cpu_seconds() - self.c0


def raw_episodes(slug: str, seeds: list[int]) -> tuple[Timed, int, float]:
    """(timing, steps, mean return): the policy called in-process on numpy observations."""
    spec = envs.resolve(slug)
    policy, steps, returns = load_policy(slug), 0, []
    box = None
    clock = Timed().__enter__()
    for i, seed in enumerate(seeds):
        env = envs.make_env(spec)
        if box is None:
            box = env.action_space.dtype if hasattr(env.action_space, "shape") and env.action_space.shape else None
        obs, _ = envs.reset_episode(env, seed)
        policy.reset(i)
        ret = 0.0
        for _ in range(spec.max_steps):
            action = policy.act(obs)
            obs, reward, term, trunc, _ = env.step(np.asarray(action, dtype=box) if box is not None else action)
            ret += float(reward)
            steps += 1
            if term or trunc:
                break
        env.close()
        returns.append(ret)
    clock.__exit__()
    return clock, steps, float(np.mean(returns))


def our_submit(slug: str, n: int, workdir: Path, prestart: bool = True) -> tuple[Timed, dict, dict]:
    """(timing, summary, timing of the host's submit.finish event).

    `prestart`: the host keeps sandboxes started ahead (its default); the submit is sent
    once they are up, as after an agent that thought for a second. False: `--no-prestart`,
    the sandbox starts when the submit arrives (the first submit of a run that is sent at
    once, or a host run without spares)."""
    host = Host(workdir / f"ours-{slug.replace('/', '_')}-{time.time_ns()}",
                make_config(slug, "bench", budget=n + 1, max_per_submit=n, finalize_jobs=1),  # +1: no finalize
                prestart=prestart)
    server = Server(host).start()
    try:
        (host.run.system / "policy.py").write_text(policy_source(slug))
        Formatter.ready()  # a running host has its formatter started (it starts at host open)
        if host.judge.spare is not None:
            host.judge.spare.settle(120)
        req = urllib.request.Request(server.url + "/submit", data=json.dumps({"env_instances": f"0-{n - 1}"}).encode(),
                                     headers={"Content-Type": "application/json",
                                              "Authorization": f"Bearer {server.credential.token}"})
        with Timed() as clock:
            body = json.load(urllib.request.urlopen(req, timeout=3600))
    finally:
        server.stop()
        host.close()
    events = [json.loads(line) for line in host.run.events_path.read_text().splitlines()]
    timing = next(e for e in events if e["event"] == "submit.finish").get("timing", {})
    return clock, body["summary"], timing


class Reference:
    """The reference v0.1.0 host, imported from its source folder (never installed, never copied)."""

    def __init__(self, src: Path) -> None:
        sys.path.insert(0, str(src))
        from evopolicygym.envs import registry
        from evopolicygym.host.local import local
        from evopolicygym.infra.http.api import SubmitRequest
        from evopolicygym.judge.close import JudgeClose
        self.registry, self.local, self.request, self.close = registry, local, SubmitRequest, JudgeClose

    def host(self, slug: str, workdir: Path, budget: int, maximum: int, valid: int = 1, final: int = 1):
        data = workdir / "data"
        if not (data / slug / "train.json").exists():
            pools.write_data(data, slug)  # the same train/valid/heldout seeds as ours
        env = self.registry(bulk=slug.startswith("gymnasium/"), filters=(slug,)).get(slug)
        host = self.local(workdir / f"ref-{slug.replace('/', '_')}-{time.time_ns()}", env, key="bench", model="bench",
                          exp="bench", budget=budget, maximum=maximum, valid_size=valid, final_size=final,
                          data=data / slug)
        return host

    def submit(self, slug: str, n: int, workdir: Path, source: str) -> tuple[Timed, dict]:
        host = self.host(slug, workdir, n + 1, n)
        (host.store.root / "workspace" / "system" / "policy.py").write_text(source)
        with Timed() as clock:
            resp = host.service.submit(self.request(f"0-{n - 1}"))
        return clock, resp.summary


def act_round_trip(slug: str, workdir: Path, calls: int = 2000) -> float:
    """Median µs of one act() round trip (transport + worker + this policy), the env's observation."""
    spec = envs.resolve(slug)
    obs_schema, act_schema = envs.spaces_of(spec)
    code = workdir / f"rt-{slug.replace('/', '_')}"
    code.mkdir(exist_ok=True)
    (code / "policy.py").write_text(policy_source(slug))
    env = envs.make_env(spec)
    obs, _ = envs.reset_episode(env, 1)
    env.close()
    with PolicyProcess(code, isolation="bwrap", limits=Limits()) as proc:
        proc.start(obs_schema, act_schema, {"env": slug})
        proc.begin_episode(600)
        times = []
        for _ in range(calls):
            t0 = time.perf_counter()
            proc.act(obs)
            times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


FINALIZE_VARIANTS = 4
"""Distinct programs in the finalize run (each submitted twice: identical checkpoints)."""


def finalize_variants(slug: str) -> list[str]:
    base = policy_source(slug)
    return [base.replace("THRESHOLD = 0.0", f"THRESHOLD = {0.001 * k}") for k in range(FINALIZE_VARIANTS)]


def our_finalize(slug: str, workdir: Path, profile: str) -> tuple[float, int, int]:
    """(seconds, validation episodes, checkpoints) of our finalize over 2 x FINALIZE_VARIANTS ok checkpoints."""
    variants = finalize_variants(slug)
    prof = pools.profile(profile)
    valid = prof.valid
    host = Host(workdir / f"fin-{time.time_ns()}", make_config(slug, profile, budget=2 * len(variants) + 1,
                                                                max_per_submit=1))
    for source in variants + variants:
        (host.run.system / "policy.py").write_text(source)
        assert host.judge.submit({"env_instances": [0]})[1]["status"] == "ok"
    t0 = time.perf_counter()
    host.start_finalize("finish")
    host.done.wait(3600)
    wall = time.perf_counter() - t0
    events = [json.loads(line) for line in host.run.events_path.read_text().splitlines()]
    runs = sum(1 for e in events if e["event"] == "eval.run" and e.get("kind") == "valid")
    return wall, runs * valid, 2 * len(variants)


def reference_finalize(ref: Reference, slug: str, workdir: Path, valid: int, heldout: int) -> tuple[float, int]:
    """(seconds, validation episodes) of the reference's close over the same checkpoints."""
    variants = finalize_variants(slug)
    host = ref.host(slug, workdir, 2 * len(variants) + 1, 1, valid=valid, final=heldout)
    for source in variants + variants:
        (host.store.root / "workspace" / "system" / "policy.py").write_text(source)
        host.service.submit(ref.request([0]))
    svc = host.service
    t0 = time.perf_counter()
    outcome = ref.close(svc.store, svc.runtime)(svc.run, tuple(svc._snaps), svc.task, svc.valid, svc.final)
    return time.perf_counter() - t0, len(outcome.vals) * valid


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def bench_env(slug: str, args, ref: Reference | None, tmp: Path) -> dict:
    seeds = pools.pools_for(slug, "bench").train[: args.episodes]
    raw, ours, cold, theirs, timings = [], [], [], [], []
    cpu = {"raw": [], "ours": [], "cold": [], "reference": []}
    for _ in range(args.repeats):
        r, steps, raw_mean = raw_episodes(slug, seeds)
        o, summary, timing = our_submit(slug, args.episodes, tmp)
        c, cold_summary, _ = our_submit(slug, args.episodes, tmp, prestart=False)
        assert cold_summary["returns"] == summary["returns"], "the cold start ran other episodes"
        raw.append(r.wall)
        ours.append(o.wall)
        cold.append(c.wall)
        cpu["cold"].append(c.cpu)
        cpu["raw"].append(r.cpu)
        cpu["ours"].append(o.cpu)
        timings.append(timing)
        if ref is not None:
            t, ref_summary = ref.submit(slug, args.episodes, tmp, policy_source(slug))
            theirs.append(t.wall)
            cpu["reference"].append(t.cpu)
            assert ref_summary["returns"] == summary["returns"], "the reference ran other episodes"
    assert abs(summary["mean_return"] - raw_mean) < 1e-9 * max(1.0, abs(raw_mean)), "raw ran other episodes"
    row = {"env": slug, "episodes": args.episodes, "steps": steps, "raw_s": median(raw), "ours_s": median(ours),
           "cold_s": median(cold), "reference_s": median(theirs) if theirs else None, "raw_all": raw,
           "ours_all": ours, "cold_all": cold, "reference_all": theirs,
           "act_us": act_round_trip(slug, tmp), "cpu": {k: median(v) if v else None for k, v in cpu.items()}}
    row["ours_vs_raw"] = row["ours_s"] / row["raw_s"]
    row["ours_vs_reference"] = row["ours_s"] / row["reference_s"] if theirs else None
    row["cold_vs_reference"] = row["cold_s"] / row["reference_s"] if theirs else None
    row["cold_vs_raw"] = row["cold_s"] / row["raw_s"]
    row["reference_vs_raw"] = row["reference_s"] / row["raw_s"] if theirs else None
    row["timing"] = {k: median([t.get(k, float("nan")) for t in timings]) for k in timings[0]}
    row["overhead_us_per_step"] = (row["ours_s"] - row["raw_s"]) / steps * 1e6
    return row


def fmt(x, spec=".3f") -> str:
    return "–" if x is None else format(x, spec)


def tables(rows: list[dict], fin: dict | None, load: tuple[float, float], cpu_scope: str) -> str:
    out = [f"Load average (1 min) at start / end: {load[0]:.2f} / {load[1]:.2f} on {os.cpu_count()} cores.", "",
           "ours = the host's default (the submit's sandbox was started ahead and is up); "
           "ours cold = `--no-prestart` (the sandbox starts when the submit arrives).", "",
           "| env | episodes | steps | raw s | ours s | ours cold s | reference s | ours / reference "
           "| ours / raw | ours cold / reference | ours cold / raw | reference / raw |",
           "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['env']} | {r['episodes']} | {r['steps']} | {r['raw_s']:.3f} | {r['ours_s']:.3f} "
                   f"| {r['cold_s']:.3f} | {fmt(r['reference_s'])} | **{fmt(r['ours_vs_reference'], '.2f')}×** "
                   f"| **{r['ours_vs_raw']:.2f}×** | {fmt(r['cold_vs_reference'], '.2f')}× "
                   f"| {r['cold_vs_raw']:.2f}× | {fmt(r['reference_vs_raw'], '.2f')}× |")
    out += ["", f"CPU seconds (user + system of {cpu_scope}; medians): the work each way costs, which the "
            "machine's load changes far less than wall time.", "",
            "| env | raw CPU s | ours CPU s | ours cold CPU s | reference CPU s | ours / reference | ours / raw |",
            "|---|---|---|---|---|---|---|"]
    for r in rows:
        c = r["cpu"]
        out.append(f"| {r['env']} | {c['raw']:.3f} | {c['ours']:.3f} | {c['cold']:.3f} | {fmt(c['reference'])} "
                   f"| {fmt(c['ours'] / c['reference'] if c['reference'] else None, '.2f')}× "
                   f"| {c['ours'] / c['raw']:.2f}× |")
    out += ["", "Where our submit's time goes (medians; the host's `submit.finish` timing event):", "",
            "| env | snapshot + metrics ms | sandbox start ms | episodes s | of which raw stepping s | "
            "overhead µs/step | act round trip µs | waiting for episode files ms | feedback write ms |",
            "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        t = r["timing"]
        out.append(f"| {r['env']} | {1e3 * t.get('snapshot_s', 0):.0f} | {1e3 * t.get('start_s', 0):.0f} "
                   f"| {t.get('episodes_s', 0):.3f} | {r['raw_s']:.3f} "
                   f"| {(t.get('episodes_s', 0) - r['raw_s']) / r['steps'] * 1e6:.1f} | {r['act_us']:.1f} "
                   f"| {1e3 * t.get('files_wait_s', 0):.0f} | {1e3 * t.get('write_s', 0):.0f} |")
    if fin:
        out += ["", f"Finalize on {fin['env']}: {fin['checkpoints']} ok checkpoints ({FINALIZE_VARIANTS} distinct "
                f"programs, each submitted twice), {fin['valid']} validation and {fin['heldout']} held-out episodes "
                "per evaluation:", "",
                "| host | validation episodes | + held-out episodes | wall s |", "|---|---|---|---|",
                f"| ours (identical trees share, distinct in parallel) | {fin['ours_episodes']} | {fin['heldout']} "
                f"| {fin['ours_s']:.2f} |"]
        if fin.get("reference_s") is not None:
            out.append(f"| reference (serial, every candidate) | {fin['reference_episodes']} | {fin['heldout']} "
                       f"| {fin['reference_s']:.2f} |")
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=64, help="episodes per submit")
    ap.add_argument("--repeats", type=int, default=3, help="interleaved repeats; medians are reported")
    ap.add_argument("--envs", nargs="*", default=list(ENVS), help=f"env ids (default: {' '.join(ENVS)})")
    ap.add_argument("--reference-src", type=Path, help="the reference v0.1.0 src/ folder (its host runs beside ours)")
    ap.add_argument("--no-finalize", action="store_true", help="skip the finalize comparison")
    ap.add_argument("--finalize-profile", default="bench", help="profile whose validation/held-out sizes "
                    "the finalize comparison uses (default bench: 16 / 64)")
    ap.add_argument("--out", type=Path, help="write the markdown tables here")
    args = ap.parse_args()
    ref = None
    if args.reference_src is not None and (args.reference_src / "evopolicygym").is_dir():
        ref = Reference(args.reference_src)
    else:
        print(f"reference skipped: no evopolicygym package under {args.reference_src}" if args.reference_src
              else "reference skipped: pass --reference-src DIR to run the reference v0.1.0 host beside ours",
              file=sys.stderr)
    # the scheduling group our host and its sandboxes share (evogym.sandbox.cgroup): joined
    # now, so raw stepping and the reference run in it too and all three are scheduled alike
    share_cpu_group()
    cpu_scope = account_cpu()
    load0 = os.getloadavg()[0]
    rows, fin = [], None
    with tempfile.TemporaryDirectory() as tmp:
        for slug in args.envs:
            rows.append(bench_env(slug, args, ref, Path(tmp)))
            print(json.dumps({k: v for k, v in rows[-1].items()}), flush=True)
        if not args.no_finalize and "gym/acrobot" in args.envs:
            prof = pools.profile(args.finalize_profile)
            ours_s, ours_eps, n = our_finalize("gym/acrobot", Path(tmp), prof.name)
            fin = {"env": "gym/acrobot", "checkpoints": n, "valid": prof.valid, "heldout": prof.heldout,
                   "ours_s": ours_s, "ours_episodes": ours_eps}
            if ref is not None:
                fin["reference_s"], fin["reference_episodes"] = reference_finalize(
                    ref, "gym/acrobot", Path(tmp), prof.valid, prof.heldout)
            print(json.dumps(fin), flush=True)
    table = tables(rows, fin, (load0, os.getloadavg()[0]), cpu_scope)
    print(table)
    if args.out:
        write_results(args.out, table)


ACCOUNT = "## Account"
"""The hand-written part of the results file below this heading is kept when the tables are rewritten."""


def write_results(out: Path, table: str) -> None:
    command = "python experiments/bench_host_overhead.py " + " ".join(sys.argv[1:])
    head = ["# Host overhead: raw stepping vs our sandboxed submit vs the reference v0.1.0 submit", "",
            f"Command ({time.strftime('%Y-%m-%d')}; medians of the interleaved repeats; the machine is shared, "
            "see the load line):", "", f"    {command}", "", table, ""]
    kept = ""
    if out.exists() and ACCOUNT in out.read_text():
        kept = out.read_text()[out.read_text().index(ACCOUNT):]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(head) + ("\n" + kept if kept else ""))


if __name__ == "__main__":
    main()
