"""Per-env anchors for normalized scores: the published results and our random baseline.

`PAPER_ROWS` is the paper's held-out mean return per Core16 env and model (reference
§6.2, from `site/leaderboards/core16-paper-v1/results.json @ main`). Values are full
precision where the report gives them. For envs whose rewards are integers (Acrobot,
Fetch) every published mean is a multiple of 1/256 (256 held-out episodes); the rounded
values were restored to that exact multiple where only one multiple rounds to them, and
left as published otherwise (MiniMax-M3 Acrobot).

`expert_baseline` is the best of the four agents. `random_baseline` is **our** measured
uniform-random mean on the first 64 held-out seeds (the bench profile's held-out set)
with the pinned packages, not the paper's, so that a normalized score of 0 means
"no better than random here". Measured with:

    nice -n 10 python experiments/measure_random_baselines.py --n 64 --jobs 1 --out random.json

Comparison with the paper's random row, with standard errors: experiments/results/anchors.md.
Anchors stay host-internal: never in `/info`, `env_meta` or feedback.
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from evogym.errors import ConfigError

AGENTS: tuple[str, ...] = ("GPT-5.5", "Claude Opus 4.7", "MiniMax-M3", "DeepSeek-V4-Pro")
RANDOM = "Random"
NORMALIZED_MAX = 1.2
"""Upper clip of the normalized score (spec `07-scoring.md`): 120 = 20% beyond the best agent."""


def _row(gpt: float, opus: float, minimax: float, deepseek: float, rand: float) -> dict[str, float]:
    return dict(zip((*AGENTS, RANDOM), (gpt, opus, minimax, deepseek, rand)))


PAPER_ROWS: dict[str, dict[str, float]] = {
    "gym/acrobot": _row(-21680 / 256, -22680 / 256, -136.41, -23336 / 256, -499.15625),
    "gym/continuouscar": _row(95.21632036034762, 98.774, 91.881, 94.477, -33.359488),
    "gym/bipedal": _row(248.87, -15.844, -80.874, -97.475, -100.975808),
    "gym/racing": _row(604.1449208431347, 602.34, 233.43, 25.199, -29.627216),
    "gym/halfcheetah5": _row(601.83, 452.02, 606.15, -0.4677, -291.843544),
    "gym/ant5": _row(989.5804753204281, 990.149093275651, 983.43, 897.99, -34.602259),
    "gym/pusher5": _row(-37.106, -38.520, -39.245, -54.180, -147.461739),
    "gym/reacher5": _row(-3.473, -3.979, -5.103, -6.506, -43.771999),
    "gymnasium/MiniGrid-DoorKey-16x16-v0": _row(0.9862, 0.9827, 0.0, 0.0, 0.0),
    "gymnasium/MiniGrid-KeyCorridorS4R3-v0": _row(0.9183, 0.9297, 0.0, 0.0, 0.0),
    "gymnasium/MiniGrid-FourRooms-v0": _row(0.6642, 0.7010, 0.4034, 0.0786, 0.041688),
    "gymnasium/MiniGrid-ObstructedMaze-1Q-v1": _row(0.9036, 0.9113, 0.0, 0.0, 0.0),
    "gymnasium/parking-v0": _row(-30.237, -38.181, -32.710, -53.384, -47.447772),
    "gymnasium/roundabout-v0": _row(9.818, 9.331, 9.521, 10.203, 7.1875),
    "gymnasium/FetchPush-v4": _row(-4648 / 256, -5040 / 256, -6624 / 256, -7080 / 256, -46.03125),
    "gymnasium/FetchPickAndPlace-v4": _row(-3024 / 256, -3416 / 256, -3384 / 256, -5264 / 256, -43.75),
}
"""Held-out mean return of the validation-selected checkpoint, one run per (model, env)."""

RANDOM_BASELINES: dict[str, float] = {
    "gym/acrobot": -500.0,
    "gym/continuouscar": -33.172619626578474,
    "gym/bipedal": -101.25206305784377,
    "gym/racing": -32.07491647600792,
    "gym/halfcheetah5": -281.0336940194464,
    "gym/ant5": -92.77051544319431,
    "gym/pusher5": -148.85593133622848,
    "gym/reacher5": -43.49836685674516,
    "gymnasium/MiniGrid-DoorKey-16x16-v0": 0.0,
    "gymnasium/MiniGrid-KeyCorridorS4R3-v0": 0.0,
    "gymnasium/MiniGrid-FourRooms-v0": 0.0,
    "gymnasium/MiniGrid-ObstructedMaze-1Q-v1": 0.0,
    "gymnasium/parking-v0": -40.5056491899607,
    "gymnasium/roundabout-v0": 8.099609375000002,
    "gymnasium/FetchPush-v4": -49.203125,
    "gymnasium/FetchPickAndPlace-v4": -49.21875,
}
"""Our uniform-random held-out mean (N=64) per Core16 env; command in the module doc."""


class Anchors(BaseModel):
    """The two reference returns that map a raw held-out mean to a normalized score."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    random_baseline: float
    """Mean return of a uniform random policy on the held-out seeds (measured here)."""
    expert_baseline: float
    """Best published agent's held-out mean return (paper §6.2)."""


def expert_baseline(slug: str) -> float | None:
    """Best of the four agents' held-out means, or None outside Core16."""
    row = PAPER_ROWS.get(slug)
    return max(row[a] for a in AGENTS) if row else None


def random_baseline(slug: str) -> float | None:
    """Our measured uniform-random held-out mean, or None outside Core16."""
    return RANDOM_BASELINES.get(slug)


def core16_slug(slug: str) -> str:
    """`slug` itself when it has anchors, else the Core16 env it is under another name
    (`gymnasium/Acrobot-v1` -> `gym/acrobot`, `evogym.envs.core16_equivalent`), else `slug`."""
    if slug in RANDOM_BASELINES:
        return slug
    from evogym.envs import core16_equivalent  # gymnasium is imported only for a name that needs it
    return core16_equivalent(slug) or slug


def anchors(slug: str) -> Anchors | None:
    """Both anchors of a Core16 env (under any name of it), or None for any other env (no normalized score)."""
    slug = core16_slug(slug)
    rand, expert = random_baseline(slug), expert_baseline(slug)
    if rand is None or expert is None:
        return None
    return Anchors(random_baseline=rand, expert_baseline=expert)


def normalized(slug: str, heldout_mean: float) -> float | None:
    """`clip((R - random) / (expert - random), 0, 1.2) * 100`, or None without anchors."""
    found = anchors(slug)
    if found is None:
        return None
    span = found.expert_baseline - found.random_baseline
    if span <= 0:
        raise ConfigError(
            f"anchors of {slug} are degenerate: expert {found.expert_baseline} <= random {found.random_baseline}",
            hint="re-measure the random baseline (experiments/measure_random_baselines.py)",
        )
    ratio = (heldout_mean - found.random_baseline) / span
    return min(max(ratio, 0.0), NORMALIZED_MAX) * 100.0
