"""Cost estimates and caps for an evolution run: episodes, wall time, tokens, dollars.

The estimate is printed before anything runs. Caps are checked before each batch of
runs is launched, against what was spent plus what the batch is expected to spend, so
a run stops *before* crossing a cap (with `CapReached`, which the drivers turn into a
clean, recorded stop) rather than after.
"""
from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from ole.errors import OleError

RUN_WALL_S: dict[str, float] = {
    "gym/acrobot": 11.0,
    "gym/continuouscar": 8.0,
    "gym/pusher5": 8.0,
    "gym/reacher5": 8.0,
    "gymnasium/MiniGrid-FourRooms-v0": 9.0,
}
"""Wall seconds of one quick run (budget 32) of the built-in agent per env, host start and finalize
included, measured with 2 runs in parallel on the 2-core project machine; other envs use
DEFAULT_RUN_WALL_S. Wall time per run is divided by the workers for the estimate."""
DEFAULT_RUN_WALL_S = 20.0
"""Wall seconds assumed for one run of an env without a measurement."""
LLM_TOKENS_PER_RUN = 60_000
"""Tokens assumed for one LLM-agent run when estimating (the loop policy's max_tokens is the hard cap)."""
LLM_TOKENS_PER_PROPOSAL = 8_000
"""Tokens assumed for one LLM proposal (champion YAML + evidence + schema + answer)."""


class CapReached(OleError):
    """Launching the next batch would cross a cost cap."""

    exit_code = 3


class CostCaps(BaseModel):
    """Upper bounds on one evolution run; None = no cap on that resource."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    episodes: int | None = Field(None, ge=1)
    """Train episodes charged over all runs."""
    wall_s: float | None = Field(None, gt=0)
    """Wall-clock seconds of the whole evolution run."""
    tokens: int | None = Field(None, ge=0)
    """LLM tokens (agents and proposer)."""
    usd: float | None = Field(None, ge=0)
    """LLM spend in US dollars."""


class CostEstimate(BaseModel):
    """What a planned evolution run is expected to spend."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    runs: int
    """Benchmark runs (each one agent working one task)."""
    episodes: int
    """Train episodes charged."""
    wall_s: float
    """Wall seconds with the given number of workers."""
    tokens: int
    """LLM tokens."""
    usd: float
    """LLM spend (0 unless a price per token is known)."""

    def lines(self, caps: CostCaps) -> list[str]:
        """Human lines, each with its cap."""
        def cap(v) -> str:
            return "no cap" if v is None else f"cap {v:g}"
        return [f"runs      {self.runs}",
                f"episodes  {self.episodes}  ({cap(caps.episodes)})",
                f"wall time ~{self.wall_s / 60:.1f} min  ({cap(caps.wall_s)}{' s' if caps.wall_s else ''})",
                f"tokens    {self.tokens}  ({cap(caps.tokens)})",
                f"usd       {self.usd:.2f}  ({cap(caps.usd)})"]


QUICK_BUDGET = 32
"""The budget `RUN_WALL_S` was measured at; a run at another budget is assumed to take time in
proportion (hidden validation of every distinct checkpoint grows with the submits, so this is a
rough lower bound for runs with small submits)."""

Planned = str | tuple[str, int | None]
"""One planned run: an env slug (at the estimate's budget) or (env slug, its own budget)."""


def run_wall(env: str, budget: int = QUICK_BUDGET) -> float:
    return RUN_WALL_S.get(env, DEFAULT_RUN_WALL_S) * max(1.0, budget / QUICK_BUDGET)


def _split(run: Planned, budget: int) -> tuple[str, int]:
    if isinstance(run, str):
        return run, budget
    env, own = run
    return env, budget if own is None else own


def estimate(runs: Sequence[Planned], *, budget: int, workers: int, llm_agent: bool = False,
             proposals: int = 0, llm_proposer: bool = False, usd_per_token: float = 0.0) -> CostEstimate:
    """Estimate from the planned runs (an env slug, or (env slug, budget), per run) and proposals."""
    planned = [_split(r, budget) for r in runs]
    tokens = (LLM_TOKENS_PER_RUN * len(planned) if llm_agent else 0) + \
        (LLM_TOKENS_PER_PROPOSAL * proposals if llm_proposer else 0)
    wall = sum(run_wall(e, b) for e, b in planned) / max(1, min(workers, len(planned) or 1))
    return CostEstimate(runs=len(planned), episodes=sum(b for _, b in planned), wall_s=wall, tokens=tokens,
                        usd=tokens * usd_per_token)


class CostMeter:
    """Spent resources of one evolution run, checked against caps before each batch."""

    def __init__(self, caps: CostCaps, *, budget: int, workers: int, clock=None) -> None:
        import time
        self.caps, self.budget, self.workers = caps, budget, workers
        self.clock = clock or time.monotonic
        self.started = self.clock()
        self.episodes = 0
        self.tokens = 0
        self.usd = 0.0
        self.proposal_tokens = 0
        """The most tokens one proposal has spent (the projection for the next)."""
        self.proposal_usd = 0.0

    @property
    def wall_s(self) -> float:
        return self.clock() - self.started

    def reserve(self, envs: Sequence[Planned]) -> None:
        """Raise CapReached if launching these runs (env slugs, or (env, budget)) could cross a cap."""
        c = self.caps
        more = estimate(envs, budget=self.budget, workers=self.workers)
        checks = (("episodes", c.episodes, self.episodes + more.episodes),
                  ("wall_s", c.wall_s, self.wall_s + more.wall_s),
                  ("tokens", c.tokens, self.tokens), ("usd", c.usd, self.usd))
        for name, cap, projected in checks:
            if cap is not None and projected > cap:
                raise CapReached(f"{name} cap {cap:g} would be crossed: projected {projected:g} "
                                 f"with {len(envs)} more runs", hint=f"raise --max-{name.replace('_', '-')} or resume later "
                                 "(stored evaluations are not spent again)")

    def add(self, episodes: int, tokens: int = 0, usd: float = 0.0) -> None:
        self.episodes += episodes
        self.tokens += tokens
        self.usd += usd

    def reserve_proposal(self) -> None:
        """Raise CapReached if the next proposal could cross the token or dollar cap: it is projected
        to spend as much as the costliest proposal so far (`charge_proposal`); a proposer that
        spends nothing (the built-in one) never trips a cap here."""
        c = self.caps
        for name, cap, spent, most in (("tokens", c.tokens, self.tokens, self.proposal_tokens),
                                       ("usd", c.usd, self.usd, self.proposal_usd)):
            if cap is not None and most > 0 and spent + most > cap:
                raise CapReached(f"{name} cap {cap:g} would be crossed: spent {spent:g}, and a proposal has cost "
                                 f"up to {most:g}", hint=f"raise --max-{name} or resume later "
                                 "(stored evaluations are not spent again)")

    def charge_proposal(self, tokens: int, usd: float) -> None:
        """Count what one proposal spent (LLM tokens and dollars, accepted or rejected)."""
        self.add(0, tokens, usd)
        self.proposal_tokens = max(self.proposal_tokens, tokens)
        self.proposal_usd = max(self.proposal_usd, usd)

    def summary(self) -> dict[str, float]:
        return {"episodes": self.episodes, "wall_s": round(self.wall_s, 1), "tokens": self.tokens,
                "usd": round(self.usd, 4)}
