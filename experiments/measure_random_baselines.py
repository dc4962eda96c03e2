"""Measure the uniform-random baseline of Core16 envs on the held-out pool.

The random policy is the reference's: per episode a fresh env, `reset(seed=S)`, the
action space seeded with S+1, then `action_space.sample()` every step until the env
terminates or truncates or the step cap is reached. Seeds are the first `--n` held-out
seeds of pool seed 0 (the paper used all 256; the bench profile uses the first 64).

Prints one JSON object per env (slug, n, mean, stderr, mean length, seconds) and, with
`--out`, writes them all to a JSON file. The values in `evogym/anchors.py` come from:

    nice -n 10 python experiments/measure_random_baselines.py --n 64 --jobs 1 --out random.json
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from evogym.pools import make_pools
from evogym.envs import CORE16, make_env, reset_episode, resolve


def random_episode(slug: str, seed: int) -> tuple[float, int]:
    """Return and length of one uniform-random episode on case seed `seed`."""
    spec = resolve(slug)
    env = make_env(spec)
    reset_episode(env, seed)
    total, steps = 0.0, 0
    try:
        while steps < spec.max_steps:
            _, reward, terminated, truncated, _ = env.step(env.action_space.sample())
            total += float(reward)
            steps += 1
            if terminated or truncated:
                break
    finally:
        env.close()
    return total, steps


def summarize(slug: str, episodes: list[tuple[float, int]], seconds: float) -> dict:
    returns = [r for r, _ in episodes]
    n = len(returns)
    mean = sum(returns) / n
    var = sum((r - mean) ** 2 for r in returns) / (n - 1) if n > 1 else 0.0
    return {
        "env": slug,
        "n": n,
        "mean": mean,
        "stderr": math.sqrt(var / n),
        "mean_length": sum(s for _, s in episodes) / n,
        "seconds": round(seconds, 1),
    }


def measure(slug: str, seeds: list[int], jobs: int) -> dict:
    start = time.perf_counter()
    if jobs == 1:
        episodes = [random_episode(slug, s) for s in seeds]
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            episodes = list(pool.map(random_episode, [slug] * len(seeds), seeds))
    return summarize(slug, episodes, time.perf_counter() - start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--env", action="append", help="env slug (repeatable); default: all Core16")
    parser.add_argument("--n", type=int, default=256, help="number of held-out seeds, from the first")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes (episodes run in parallel)")
    parser.add_argument("--out", type=Path, help="also write all results to this JSON file")
    args = parser.parse_args(argv)
    heldout = make_pools(0)[2]
    if not 1 <= args.n <= len(heldout):
        parser.error(f"--n must be in 1..{len(heldout)}, got {args.n}")
    results = []
    for slug in args.env or CORE16:
        row = measure(slug, heldout[: args.n], args.jobs)
        print(json.dumps(row), flush=True)
        results.append(row)
        if args.out:
            args.out.write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
