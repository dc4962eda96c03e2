"""Host overhead: raw in-process stepping vs a sandboxed host submit, side by side.

For each env, the same episodes (same seeds, same trivial policy, a fresh env per
episode as the host does) are run (a) in this process with the policy called directly
and (b) as one `/submit` through a live host over loopback HTTP with the bubblewrap
sandbox on. The ratio (b)/(a) is the host's overhead. Where the time goes is measured
separately in the same run: sandbox start (bwrap + interpreter + policy import),
per-step round trip to the policy process, observation encoding, and feedback writing.

    python experiments/bench_host_overhead.py [--episodes 16] [--repeats 3] [--out experiments/results/host_overhead.md]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evogym import envs, pools, spaces  # noqa: E402
from evogym.host import Host, make_config  # noqa: E402
from evogym.sandbox import Limits, PolicyProcess  # noqa: E402
from evogym.server import Server  # noqa: E402

ENVS = ("gym/acrobot", "gym/halfcheetah5", "gymnasium/MiniGrid-FourRooms-v0")
POLICY = """
class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        a = action_space
        self.action = 0 if a["type"] == "Discrete" else [0.0] * a["shape"][0]
    def reset(self, episode_index):
        pass
    def act(self, obs):
        return self.action
"""


class Trivial:
    """The same trivial policy, called in-process on the raw numpy observation."""

    def __init__(self, action_schema: dict) -> None:
        self.action = 0 if action_schema["type"] == "Discrete" else np.zeros(action_schema["shape"], np.float32)

    def act(self, obs):
        return self.action


def raw_episodes(slug: str, seeds: list[int]) -> tuple[float, int]:
    """Raw: fresh env per episode seeded as the host, the policy called directly on numpy observations."""
    spec = envs.resolve(slug)
    _, act_schema = envs.spaces_of(spec)
    policy, steps = Trivial(act_schema), 0
    t0 = time.perf_counter()
    for seed in seeds:
        env = envs.make_env(spec)
        obs, _ = envs.reset_episode(env, seed)
        for _ in range(spec.max_steps):
            obs, _, term, trunc, _ = env.step(policy.act(obs))
            steps += 1
            if term or trunc:
                break
        env.close()
    return time.perf_counter() - t0, steps


def host_submit(slug: str, n: int, workdir: Path) -> tuple[float, dict]:
    host = Host(workdir / f"run-{slug.replace('/', '_')}-{time.time_ns()}",
                make_config(slug, "bench", budget=n + 1, max_per_submit=n))  # +1: no auto-finalize
    server = Server(host).start()
    try:
        (host.run.system / "policy.py").write_text(POLICY)
        req = urllib.request.Request(server.url + "/submit", data=json.dumps({"env_instances": f"0-{n - 1}"}).encode(),
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        body = json.load(urllib.request.urlopen(req, timeout=3600))
        wall = time.perf_counter() - t0
        return wall, body["summary"]
    finally:
        server.stop()


def breakdown(slug: str, workdir: Path, steps: int = 2000) -> dict:
    """Sandbox start time and per-step round trip with the same trivial policy."""
    spec = envs.resolve(slug)
    obs_schema, act_schema = envs.spaces_of(spec)
    code = workdir / "bd"
    code.mkdir(exist_ok=True)
    (code / "policy.py").write_text(POLICY)
    env = envs.make_env(spec)
    obs, _ = envs.reset_episode(env, 1)
    enc = spaces.to_jsonable(obs)
    t0 = time.perf_counter()
    proc = PolicyProcess(code, isolation="bwrap", limits=Limits())
    proc.start(obs_schema, act_schema, {"env": slug})
    start_s = time.perf_counter() - t0
    proc.begin_episode(600)
    t0 = time.perf_counter()
    for _ in range(steps):
        proc.act(enc)
    act_us = (time.perf_counter() - t0) / steps * 1e6
    proc.close()
    t0 = time.perf_counter()
    for _ in range(steps):
        spaces.to_jsonable(obs)
    enc_us = (time.perf_counter() - t0) / steps * 1e6
    return {"sandbox_start_ms": start_s * 1e3, "act_roundtrip_us": act_us, "encode_us": enc_us}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=16, help="episodes per submit")
    ap.add_argument("--repeats", type=int, default=3, help="repeats; the median is reported")
    ap.add_argument("--envs", nargs="*", default=list(ENVS))
    ap.add_argument("--out", type=Path, help="write a markdown table here")
    args = ap.parse_args()
    seeds = pools.pools_for(ENVS[0], "bench").train[: args.episodes]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for slug in args.envs:
            raw, host, summ = [], [], None
            for _ in range(args.repeats):
                r, steps = raw_episodes(slug, seeds)
                h, summ = host_submit(slug, args.episodes, Path(tmp))
                raw.append(r)
                host.append(h)
            bd = breakdown(slug, Path(tmp))
            r, h = statistics.median(raw), statistics.median(host)
            per_step_overhead = (h - r) / max(steps, 1) * 1e6
            rows.append({"env": slug, "episodes": args.episodes, "steps": steps, "raw_s": r, "host_s": h,
                         "ratio": h / r, "overhead_per_step_us": per_step_overhead, **bd})
            print(json.dumps(rows[-1]), flush=True)
    lines = ["| env | episodes | steps | raw s | host s | ratio | overhead µs/step | sandbox start ms "
             "| act round trip µs | obs encode µs |", "|---|---|---|---|---|---|---|---|---|---|"]
    for x in rows:
        lines.append(f"| {x['env']} | {x['episodes']} | {x['steps']} | {x['raw_s']:.3f} | {x['host_s']:.3f} "
                     f"| **{x['ratio']:.2f}×** | {x['overhead_per_step_us']:.1f} | {x['sandbox_start_ms']:.0f} "
                     f"| {x['act_roundtrip_us']:.1f} | {x['encode_us']:.1f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(table + "\n")


if __name__ == "__main__":
    main()
