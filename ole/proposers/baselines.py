"""Black-box baselines over the same loop-policy space: uniform random search and Optuna's TPE.

Both plug into the same engine as the evidence-guided proposer (same instances, staged
evaluation, gate and episode budget), so `experiments/search_efficiency.py` compares search
strategies and nothing else. They ignore evidence and parents' contents: a proposal is a
fresh point of `ole.proposers.space` (the parent only gives the bundle's name and scope).

TPE is reached through this one adapter (optuna is an optional dependency, the `baselines`
extra): every proposal is an `ask()` of one study, and the staged evaluation's results come
back through `observe()` — each rung as an intermediate value, the last rung as the trial's
value; a candidate stopped at an earlier rung is told as pruned with its last value, so TPE
learns from the screening too, as its pruning integration intends. A proposal that repeats
an already-scored policy is told that policy's value at once.
"""
from __future__ import annotations

import random
from collections.abc import Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from ole.bundle import Bundle
from ole.errors import OleError, ValidationError
from ole.evidence import EvidenceItem
from ole.paired import Objectives
from ole.proposers import Edge, Parent, Proposal, Proposer, accepted, child_bundle, rejected
from ole.proposers import space

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution


def _bundle(name: str, parent: Parent, policy: dict, edge: Edge, generation: int, note: str) -> Bundle:
    return child_bundle([parent], policy, edge=edge, evidence_ids=(), generation=generation, proposer=name,
                        note=note)


class RandomProposer(Proposer):
    """Uniform random search over the space of fields the host reads (seeded per proposal)."""

    name = "random"

    def __init__(self, host: str = "builtin", seed: int = 0) -> None:
        self.host, self.seed = host, seed

    def mutate(self, parent: Parent, evidence: Sequence[EvidenceItem], *, edge: Edge,
               generation: int, seed: int) -> Proposal:
        rng = random.Random(f"random|{self.seed}|{seed}|{generation}")
        policy = space.sample_policy(rng, self.host, base=parent.bundle.loop_policy)
        try:
            return accepted(self.name, edge, [parent],
                            _bundle(self.name, parent, policy, edge, generation, "uniform random draw"))
        except ValidationError as exc:
            return rejected(self.name, edge, [parent], exc.message)

    def recombine(self, a: Parent, b: Parent, evidence: Sequence[EvidenceItem], *,
                  generation: int, seed: int) -> Proposal:
        return self.mutate(a, evidence, edge="offline_mutation", generation=generation, seed=seed)


def _require_optuna() -> ModuleType:
    try:
        import optuna
    except ImportError:
        from ole.extras import install_hint
        raise OleError("the TPE baseline needs optuna", hint=install_hint("baselines")) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    return optuna


def _encode(d: space.Dim) -> BaseDistribution:
    """The optuna distribution of one dimension (tuples as comma-joined strings)."""
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
    if d.kind in ("categorical", "bool"):
        return CategoricalDistribution([",".join(c) if isinstance(c, tuple) else c for c in d.choices])
    if d.kind == "include":
        return CategoricalDistribution([False, True])
    off = space.log_offset(d)
    low = float(d.low if d.low is not None else 0.0) + off + (1e-3 if d.strict_low else 0.0)
    assert d.high is not None, f"numeric dimension {d.path} has no upper bound"  # space.dims bounds every one
    high = float(d.high) + off
    if d.kind == "int":
        return IntDistribution(int(low), int(high), log=d.log)
    return FloatDistribution(low, high, log=d.log)


def _decode(d: space.Dim, value: bool | int | float | str) -> space.Value:
    """An optuna parameter in the policy's terms: a tuple choice from its comma-joined string, a number
    clipped to the schema bounds (the log offset taken off)."""
    if d.kind in ("categorical",) and d.choices and isinstance(d.choices[0], tuple):
        assert isinstance(value, str), f"tuple dimension {d.path} is sampled as a comma-joined string"
        return tuple(value.split(","))
    if d.kind in ("int", "float"):
        assert not isinstance(value, str), f"numeric dimension {d.path} is sampled as a number"
        return space._clip(d, value - space.log_offset(d))
    return value


class TPEProposer(Proposer):
    """Optuna's TPE sampler over the loop-policy space; learns from the staged evaluation."""

    name = "tpe"

    def __init__(self, host: str = "builtin", seed: int = 0) -> None:
        optuna = _require_optuna()
        self.host = host
        self.dims = space.dims(host)
        self.study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
        self.dists = {d.path: _encode(d) for d in self.dims}
        self.trials: dict[str, Any] = {}
        """Content hash -> the open trial that proposed it."""
        self.last: dict[str, tuple[int, float]] = {}
        """Content hash -> (rung, value) last observed for an open trial."""
        self.values: dict[str, float] = {}
        """Content hash -> final value of every finished trial."""

    def _close_stopped(self) -> None:
        """Trials stopped at an earlier rung (no final value came) are told as pruned."""
        from optuna.trial import TrialState
        for h, trial in list(self.trials.items()):
            if h in self.last:
                self.study.tell(trial, state=TrialState.PRUNED)
                del self.trials[h]

    def mutate(self, parent: Parent, evidence: Sequence[EvidenceItem], *, edge: Edge,
               generation: int, seed: int) -> Proposal:
        self._close_stopped()
        trial = self.study.ask(self.dists)
        policy = parent.bundle.loop_policy.model_dump(mode="json")
        for d in self.dims:
            space.put(policy, d, _decode(d, trial.params[d.path]))
        space.repair(policy)
        try:
            bundle = _bundle(self.name, parent, policy, edge, generation, f"TPE trial {trial.number}")
        except ValidationError as exc:
            from optuna.trial import TrialState
            self.study.tell(trial, state=TrialState.FAIL)
            return rejected(self.name, edge, [parent], exc.message)
        h = bundle.content_hash
        if h in self.values:
            self.study.tell(trial, self.values[h])  # the same policy scored before: its value, at once
        elif h in self.trials:
            from optuna.trial import TrialState
            self.study.tell(trial, state=TrialState.FAIL)  # an open duplicate: the open trial will learn
        else:
            self.trials[h] = trial
        return accepted(self.name, edge, [parent], bundle)

    def recombine(self, a: Parent, b: Parent, evidence: Sequence[EvidenceItem], *,
                  generation: int, seed: int) -> Proposal:
        return self.mutate(a, evidence, edge="offline_mutation", generation=generation, seed=seed)

    def observe(self, ref: str, bundle: Bundle, summary: Objectives, *, rung: int, final: bool) -> None:
        h = bundle.content_hash
        trial = self.trials.get(h)
        if trial is None:
            return
        value = float(summary["mean_r"])
        trial.report(value, step=rung)
        if final:
            self.study.tell(trial, value)
            self.values[h] = value
            del self.trials[h]
            self.last.pop(h, None)
        else:
            self.last[h] = (rung, value)
