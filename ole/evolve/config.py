"""What an evolve runs on and how much it spends: the suite, the search and gate pools, the budgets
(`EvolveConfig`), and the default workload of `make evolve`. Importing it loads no engine."""
from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ole.cost import CostCaps
from ole.paired import Instance
from ole.trace import RunCondition, TaskSpec
from ole.vocab import HostKind

DEFAULT_SUITE = ("gym/halfcheetah5", "gym/pusher5", "gym/continuouscar")
"""The `make evolve` workload: the envs of each family where the built-in agent has headroom and
its held-out score moves with the loop policy far above the noise floor, at 32 episodes and at
128 (`experiments/results/sensitivity.md`, `sensitivity_combos.md`): halfcheetah5 (one-episode
submits +60 % at 32, +29 % at 128) and pusher5 (smaller retests +45 % at 32) of `generic`, and
continuouscar of `curated` (the seed is below the best paper row at 128; one-episode submits
reach it). acrobot, ant5, Fetch*, reacher5, Pendulum and the MiniGrid envs are left out: every
move of the maps left them bit-identical or within 2 % (nothing to learn, only cost); bipedal is
multimodal (two agent seeds of one policy: q 15 vs 0), so its pairs are noise. Releases are
bounded to the env ids their gates sampled (`ole.coverage`), so the envs left out keep the seed."""


DEFAULT_TRANSFER = ("gym/bipedal", "gymnasium/roundabout-v0", "gym/reacher5", "gymnasium/Pendulum-v1",
                    "gymnasium/MiniGrid-FourRooms-v0", "gymnasium/InvertedDoublePendulum-v5")
"""Transfer envs of `make evolve`: held out from the search and the ablation, paired with the champion
after a scope's gate released its change, so its release may widen to the region of task features
they support (`ole.transfer`). Chosen to span the feature regions the engine may claim (box and
discrete actions, 1 to 4 action dimensions, horizons 11 to 1600, box and dict observations) with
envs quick enough here that `make evolve` can carry them; see docs/evolution.md, "Releases that travel"."""


class Suite(BaseModel):
    """The tasks evolution evaluates on: envs × pool seeds × agent seeds under one profile."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    envs: tuple[str, ...] = DEFAULT_SUITE
    """Env slugs."""
    profile: str = "quick"
    """Host run profile."""
    budget: int | None = Field(32, ge=1)
    """Episode budget per run (None = the profile's)."""
    host: HostKind = "builtin"
    """Host agent kind of every run."""
    model: str | None = None
    """Model string for LLM agents."""
    command: tuple[str, ...] | None = None
    """Command line of the external agent (host `command` only); it travels in every run condition."""

    @model_validator(mode="after")
    def _command_iff_command_host(self) -> "Suite":
        if (self.host == "command") != bool(self.command):
            raise ValueError("host `command` needs a command line (-- CMD ...), and only it takes one")
        return self

    def condition(self, seed: int) -> RunCondition:
        """The run condition of every run of this suite with this agent seed."""
        return RunCondition(host=self.host, seed=seed, model=self.model, command=self.command)

    def instances(self, pool_seeds: Sequence[int], agent_seeds: Sequence[int],
                  budget: int | None = None) -> list[Instance]:
        """Every (task, condition) of the suite on these pools and agent seeds, env-major; at the
        suite's budget, or at `budget` (a gate tier) when given."""
        b = self.budget if budget is None else budget
        return [(TaskSpec(env=env, profile=self.profile, budget=b, pool_seed=p), self.condition(s))
                for p in pool_seeds for env in self.envs for s in agent_seeds]


class EvolveConfig(BaseModel):
    """Everything that determines an evolution run (recorded with its results)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    suite: Suite = Suite()
    """Envs, profile, budget and agent kind."""
    search_pools: tuple[int, ...] = (101, 102)
    """Pool seeds of the search instances (the proposer sees their traces)."""
    gate_pools: tuple[int, ...] = (201, 202, 203, 204)
    """Pool seeds of the gate's first look (disjoint from the search pools)."""
    gate_extra_pools: tuple[int, ...] = (205, 206, 207, 208)
    """Pool seeds the adaptive gate adds while its verdict is open and the gate config's
    `max_pairs` allows, half as many per look as `gate_pools` has (see `gate_extra_chunks`);
    disjoint from the search and first-look pools."""
    gate_budgets: tuple[int, ...] = (32, 128)
    """Episode budgets every gate instance is run at (the quick budget and the bench/paper one). A
    release covers the band between the smallest and the largest (`ole.coverage`), so a policy
    searched at 32 serves budget-128 tasks only when the gate sampled 128 too. Runs at each
    budget use the suite's profile (its validation and held-out sizes)."""
    transfer_envs: tuple[str, ...] = ()
    """Envs held out from the search and the ablation on which a scope's released change is paired
    with the champion (the transfer sample, `ole.transfer`); empty: releases never widen offline.
    `ole evolve --mode offline` fills `DEFAULT_TRANSFER` (less the search envs) unless told otherwise."""
    transfer_pools: tuple[int, ...] = (221,)
    """Pool seeds of the transfer sample (each transfer env at every gate budget); disjoint from the
    search pools (`search_pools`), so no transfer instance is one the proposer saw."""
    max_scopes: int = Field(3, ge=1, le=16)
    """Most scope champions one offline run gates: the search's gains are split by env into at
    most this many scopes, each gated (and released) on its own (`ole.evolve.scoping`)."""
    ablate: bool = True
    """Before gating, cut a multi-field candidate down to the field changes that carry its search
    gain (`ole.evolve.ablate`); False gates the candidates as proposed."""
    agent_seeds: tuple[int, ...] = (0,)
    """Agent seeds crossed with every pool seed."""
    population: int = Field(12, ge=1, le=64)
    """Candidates proposed per offline generation (all screened; see `eta`)."""
    eta: int = Field(3, ge=1, le=16)
    """Successive-halving rate of the staged search evaluation: after each rung only the best
    ⌈n/eta⌉ candidates are evaluated on the next, larger rung (1 = every candidate on every rung)."""
    screen: int | None = Field(None, ge=1)
    """Search instances of the first rung (None: one pool of every env); each later rung doubles
    it, the last rung is every search instance."""
    generations: int = Field(2, ge=1, le=100)
    """Offline generations."""
    recombinations: int = Field(1, ge=0)
    """Of each later generation's candidates, how many come from recombination."""
    seed: int = Field(0, ge=0)
    """Seed of the proposer."""
    channel: str = "default"
    """Release channel."""
    caps: CostCaps = CostCaps()
    """Cost caps."""
    workers: int = Field(2, ge=1)
    """Parallel evaluation workers."""

    @model_validator(mode="after")
    def _disjoint(self) -> "EvolveConfig":
        both = sorted(set(self.search_pools) & (set(self.gate_pools) | set(self.gate_extra_pools)))
        if both:
            raise ValueError(f"search_pools and gate pools share {both}: the gate must judge unseen instances")
        twice = sorted(set(self.gate_pools) & set(self.gate_extra_pools))
        if twice:
            raise ValueError(f"gate_pools and gate_extra_pools share {twice}: an added look must bring new instances")
        if not self.agent_seeds or any(s < 0 for s in self.agent_seeds) or len(set(self.agent_seeds)) != len(self.agent_seeds):
            raise ValueError(f"agent_seeds must be distinct seeds >= 0, got {list(self.agent_seeds)}")
        if not self.gate_budgets or any(b < 1 for b in self.gate_budgets) \
                or len(set(self.gate_budgets)) != len(self.gate_budgets):
            raise ValueError(f"gate_budgets must be distinct budgets >= 1, got {list(self.gate_budgets)}")
        searched = sorted(set(self.transfer_envs) & set(self.suite.envs))
        if searched:
            raise ValueError(f"transfer_envs {searched} are also search envs: a transfer env must be held out "
                             "from the search")
        if len(set(self.transfer_envs)) != len(self.transfer_envs):
            raise ValueError(f"transfer_envs lists an env twice: {list(self.transfer_envs)}")
        if self.transfer_envs and not self.transfer_pools:
            raise ValueError("transfer_envs need transfer_pools")
        if set(self.transfer_pools) & set(self.search_pools):
            raise ValueError(f"transfer_pools {sorted(set(self.transfer_pools) & set(self.search_pools))} are also "
                             "search pools: the transfer sample must be held out from the search")
        return self

    def transfer_instances(self) -> list[Instance]:
        """Every transfer env on the transfer pools at every gate budget (budget-major)."""
        return [(TaskSpec(env=env, profile=self.suite.profile, budget=b, pool_seed=p), self.suite.condition(s))
                for b in self.gate_budgets for p in self.transfer_pools for env in self.transfer_envs
                for s in self.agent_seeds]

    def gate_extra_chunks(self) -> list[tuple[int, ...]]:
        """The extra gate pools grouped per look: each look adds half as many pools as the first had
        (at least one), so a look is never a sliver that spends its share of alpha on a few pairs."""
        stride = max(1, len(self.gate_pools) // 2)
        pools = self.gate_extra_pools
        return [pools[i:i + stride] for i in range(0, len(pools), stride)]

    def gate_instances(self, pools: Sequence[int]) -> list[Instance]:
        """Every suite instance on these pools, at every gate budget (budget-major)."""
        return [i for b in self.gate_budgets for i in self.suite.instances(pools, self.agent_seeds, b)]

    def gate_looks(self) -> list[list[Instance]]:
        """The gate instances look by look: the first gate pools, then each extra chunk; every
        look at every gate budget."""
        return [self.gate_instances(self.gate_pools)] + [self.gate_instances(c) for c in self.gate_extra_chunks()]

    def rungs(self) -> list[int]:
        """Instance counts of the staged search evaluation's rungs (the last is every search instance)."""
        total = len(self.suite.envs) * len(self.search_pools) * len(self.agent_seeds)
        first = min(total, self.screen or len(self.suite.envs) * len(self.agent_seeds))
        out = [first]
        while out[-1] < total:
            out.append(min(total, out[-1] * 2))
        return out
