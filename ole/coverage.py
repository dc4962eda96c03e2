"""What a gate decision's pairs covered, and the widest scope that evidence supports.

A release must never reach further than its evidence (docs/registry.md, "Evidence-bounded
scopes"). This module is the one place that turns a gate decision's pairs into that bound:

* **hosts**: the host agents the pairs ran (a policy judged with the built-in agent says
  nothing about an LLM agent).
* **models**: the model names the pairs ran, when every pair ran one; hosts without a model
  then fall outside (a mix of model and no-model pairs bounds to the models: narrower, never wider).
* **budgets**: the band between the smallest and the largest episode budget sampled on every
  env of the bound (a rectangle: each env of the scope was sampled at both ends of the band).
  A band of one level is that level only: evidence at 32 says nothing about 128.
* **envs**: env ids, never whole families. A family is wider than any sample of it (bipedal
  shares `generic` with halfcheetah5 and pusher5, and the same champion that gained on those two
  lost 80 % there), so the bound lists the sampled env ids and no others.
* **ties**: a pair whose two held-out scores are bit-identical (r == 0) shows that the change
  had no effect on that instance, not that it helps there. An env whose pairs are *all* ties is
  left out of the bound (its tasks keep the parent, which behaved identically), and ties never
  count as coverage of a family for the gate's evidence criterion (`informative_families`).

Everything here is pure: the same pairs give the same bound, so the registry can derive the
release scope from the stored decision record at release time (and on open, for releases
recorded before this rule) and it cannot drift from the evidence.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, cast

from pydantic import BaseModel, ConfigDict

from ole.bundle import Applicability, HostKind
from ole.errors import ValidationError
from ole.verdicts import verdict_of


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Cell(_Record):
    """The pairs of one (env, budget) condition of a decision."""

    env: str
    """Env slug."""
    family: str
    """Env family (`evogym.envs`)."""
    budget: int
    """Episode budget of the tasks."""
    n_pairs: int
    """Pairs at this condition."""
    n_ties: int
    """Pairs whose two runs scored bit-identically (r == 0): no effect there."""
    mean_r: float
    """Mean relative change r over the pairs."""

    @property
    def informative(self) -> bool:
        """True when at least one pair differed (the change had an effect here)."""
        return self.n_ties < self.n_pairs

    @property
    def verdict(self) -> str:
        """`tie` (no effect), `gain` (mean r > 0) or `loss` (mean r <= 0 with an effect)."""
        if not self.informative:
            return "tie"
        return "gain" if self.mean_r > 0 else "loss"


class Coverage(_Record):
    """The conditions a set of pairs sampled, cell by cell."""

    hosts: tuple[str, ...]
    """Host agents of the pairs' run conditions, sorted."""
    models: tuple[str, ...]
    """Model strings of the run conditions that had one, sorted."""
    model_free: bool
    """True when some pair ran without a model (an agent that has none)."""
    cells: tuple[Cell, ...]
    """One cell per (env, budget), sorted by env then budget."""

    @property
    def envs(self) -> tuple[str, ...]:
        """Every env sampled, sorted."""
        return tuple(sorted({c.env for c in self.cells}))

    @property
    def budgets(self) -> tuple[int, ...]:
        """Every budget level sampled, ascending."""
        return tuple(sorted({c.budget for c in self.cells}))

    def env_cells(self, env: str) -> list[Cell]:
        """The cells of one env, by budget."""
        return [c for c in self.cells if c.env == env]

    @property
    def tied_envs(self) -> tuple[str, ...]:
        """Envs where every pair was a tie: no effect shown there."""
        return tuple(e for e in self.envs if not any(c.informative for c in self.env_cells(e)))

    @property
    def informative_families(self) -> tuple[str, ...]:
        """Families with at least one pair that differed (what counts as covering a family)."""
        return tuple(sorted({c.family for c in self.cells if c.informative}))

    def describe(self) -> str:
        """One line: hosts, models, budgets, and each env's verdict per budget."""
        envs = []
        for env in self.envs:
            parts = ", ".join(f"{c.budget}: {c.verdict} {c.mean_r:+.3f} ({c.n_pairs} pairs"
                              + (f", {c.n_ties} ties" if c.n_ties else "") + ")" for c in self.env_cells(env))
            envs.append(f"{env} [{parts}]")
        models = f"; models {', '.join(self.models)}" if self.models else ""
        return (f"hosts {', '.join(self.hosts)}{models}; budgets {', '.join(map(str, self.budgets))}; "
                + "; ".join(envs))


def pair_budget(task) -> int:
    """The episode budget a pair's task ran with: its override, else its profile's."""
    if task.budget is not None:
        return int(task.budget)
    from evogym.errors import ConfigError
    from evogym.pools import profile
    try:
        return profile(task.profile).budget
    except ConfigError as exc:
        raise ValidationError(f"pair on {task.env} has no budget and an unknown profile {task.profile!r}",
                              hint="record the task's budget with the pair") from exc


def coverage(pairs: Iterable) -> Coverage:
    """The conditions `pairs` (objects with task, condition, family, r) sampled."""
    by: dict[tuple[str, int], list] = defaultdict(list)
    families: dict[str, str] = {}
    hosts, models, model_free = set(), set(), False
    for p in pairs:
        by[(p.task.env, pair_budget(p.task))].append(float(p.r))
        families[p.task.env] = p.family
        hosts.add(p.condition.host)
        if p.condition.model:
            models.add(p.condition.model)
        else:
            model_free = True
    cells = tuple(Cell(env=env, family=families[env], budget=b, n_pairs=len(rs), n_ties=sum(r == 0.0 for r in rs),
                       mean_r=sum(rs) / len(rs)) for (env, b), rs in sorted(by.items()))
    return Coverage(hosts=tuple(sorted(hosts)), models=tuple(sorted(models)), model_free=model_free, cells=cells)


def _model_family(model: str) -> str:
    """The name a model family is matched by: the model string without its provider prefix."""
    return model.rsplit("/", 1)[-1]


def _band(cov: Coverage, envs: Sequence[str]) -> tuple[list[str], int, int]:
    """Envs and the budget band sampled at both ends on every one of them.

    Every env's own band is [its lowest, its highest sampled budget]; the bound's band is their
    intersection, so each env of the scope was sampled at both ends. When the bands do not meet
    (one env only at 32, another only at 128), the band of the env with the most pairs is kept
    with the envs sampled at both of its ends: the rectangle the evidence actually fills.
    """
    own = {e: (min(c.budget for c in cov.env_cells(e)), max(c.budget for c in cov.env_cells(e))) for e in envs}
    low, high = max(lo for lo, _ in own.values()), min(hi for _, hi in own.values())
    if low <= high:
        return list(envs), low, high
    lead = max(envs, key=lambda e: (sum(c.n_pairs for c in cov.env_cells(e)), e))
    low, high = own[lead]
    levels = {low, high}
    keep = [e for e in envs if levels <= {c.budget for c in cov.env_cells(e)}]
    return keep, low, high


def evidence_bound(cov: Coverage) -> Applicability:
    """The widest scope the covered conditions support (module docstring): sampled hosts,
    models, env ids with an effect, and the budget band sampled on all of them.

    Raises `ValidationError` when nothing had an effect (every pair a tie) or no pair exists:
    such evidence supports no release anywhere.
    """
    envs = [e for e in cov.envs if e not in cov.tied_envs]
    if not envs:
        raise ValidationError("the gate's pairs show no effect on any env (every pair a tie): "
                              "that evidence supports no release scope",
                              hint="a release needs pairs where the change made a difference")
    envs, low, high = _band(cov, envs)
    models = () if cov.model_free or not cov.models else tuple(sorted({_model_family(m) for m in cov.models}))
    hosts = cast(tuple[HostKind, ...], cov.hosts)  # run conditions name one of the known hosts (validated here)
    return Applicability(hosts=hosts, env_ids=tuple(envs), min_budget=low, max_budget=high,
                         model_families=models)


def bounded(own: Applicability, bound: Applicability,
            features_of: Callable[[str], Any] | None = None) -> Applicability:
    """`own` (a bundle's applicability) narrowed to `bound` (`evidence_bound`): the release scope.

    Hosts, env ids, the budget band and model families are intersected; an env id of the
    bound stays when `own` admits it (its id listed, its features in `own`'s region — which needs
    `features_of`, `ole.registry.scopes.features_of` — or every env). Raises `ValidationError`
    when the intersection admits no task (the evidence lies outside the bundle's own scope).
    """
    hosts = tuple(h for h in own.hosts if h in bound.hosts)
    envs = tuple(e for e in bound.env_ids if not own.env_selective or e in own.env_ids
                 or own._admits_id(e, None, features_of))
    low = max(own.min_budget, bound.min_budget)
    highs = [h for h in (own.max_budget, bound.max_budget) if h is not None]
    high = min(highs) if highs else None
    if bound.model_families and own.model_families:
        models = tuple(m for m in bound.model_families
                       if any(m.lower().startswith(o.lower()) for o in own.model_families))
        if not models:
            hosts = ()
    else:
        models = bound.model_families or own.model_families
    if not hosts or not envs or (high is not None and high < low):
        raise ValidationError(f"the gate's evidence (`{bound.scope_key}`) lies outside the bundle's own scope "
                              f"(`{own.scope_key}`): nothing is left to release",
                              hint="gate the bundle on instances inside its scope")
    return Applicability(hosts=hosts, env_ids=envs, min_budget=low, max_budget=high, model_families=models)


# ----- stored decisions (the registry's side) -------------------------------------------------

class _Stored:
    """A pair as stored in a gate decision payload, read leniently: only what coverage needs."""

    def __init__(self, data: dict) -> None:
        from types import SimpleNamespace
        task, cond = data.get("task") or {}, data.get("condition") or {}
        self.task = SimpleNamespace(env=task.get("env"), budget=task.get("budget"),
                                    profile=task.get("profile", "quick"))
        self.condition = SimpleNamespace(host=cond.get("host"), model=cond.get("model"))
        self.family = data.get("family") or ""
        self.r = float(data.get("r", 0.0))


def stored_pairs(payload: dict) -> list:
    """The pairs of a stored `gate_decision` payload, as coverage reads them."""
    return [_Stored(p) for p in payload.get("pairs") or () if isinstance(p, dict)]


def decision_event(events: Sequence, name: str, version: int, before: int | None = None):
    """The last `gate_decision` event of a version (before event seq `before`), or None."""
    found = None
    for e in events:
        if before is not None and e.seq >= before:
            break
        if e.kind == "gate_decision" and (e.name, e.version) == (name, version):
            found = e
    return found


def decision_evidence(payload: dict) -> tuple[Coverage | None, Applicability | None]:
    """(coverage, bound) of a stored gate decision: what the gate recorded (`GateDecision.coverage`,
    `.bound`: the bound None when every pair tied), derived from the stored pairs only for records
    older than those fields; (None, None) when the record holds no pairs."""
    stored, key = payload.get("coverage"), payload.get("bound")
    if isinstance(stored, dict) and "bound" in payload and (key is None or isinstance(key, str)):
        from ole.applicability import parse_scope
        return Coverage.model_validate(stored), (parse_scope(key) if key is not None else None)
    pairs = stored_pairs(payload)
    if not pairs:
        return None, None
    cov = coverage(pairs)
    try:
        return cov, evidence_bound(cov)
    except ValidationError:  # every pair a tie
        return cov, None


def bound_for_release(own: Applicability, decision, features_of=None) -> tuple[Applicability, dict]:
    """The scope a release of a bundle with applicability `own` takes, given its last gate decision
    event (None, or a decision that records no pairs: a release without gate evidence, which keeps
    `own` and says so).

    Returns (scope, evidence) where evidence is recorded in the release event: the decision's
    seq and verdict, the bound its pairs support and the bundle's own scope key. Raises
    `ValidationError` when the pairs support no scope (all ties) or it lies outside `own`.
    """
    if decision is None:
        return own, {"decision_seq": None, "bound": None, "own": own.scope_key,
                     "note": "no gate decision: released on a person's word, not bounded by evidence"}
    cov, bound = decision_evidence(decision.payload)
    if cov is None:  # a decision recorded by another gate, without its pairs: nothing to bound from
        return own, {"decision_seq": decision.seq, "verdict": verdict_of(decision.payload), "bound": None,
                     "own": own.scope_key, "note": "the gate decision records no pairs: not bounded by evidence"}
    if bound is None:
        raise ValidationError("the gate's pairs show no effect on any env (every pair a tie): "
                              "that evidence supports no release scope",
                              hint="a release needs pairs where the change made a difference")
    scope = bounded(own, bound, features_of)
    return scope, {"decision_seq": decision.seq, "verdict": verdict_of(decision.payload),
                   "bound": bound.scope_key, "own": own.scope_key, "covered": cov.describe()}


def evidence_line(event) -> str | None:
    """One line on what bounds a release (the scope's last release or rollback event), or None."""
    if event is None or event.kind != "release":
        return None if event is None else f"rolled back (#{event.seq}): {event.payload.get('reason', '')}"
    ev = event.payload.get("evidence")
    if ev is None:
        return (f"released #{event.seq} before releases were bounded by evidence, with no gate decision "
                "to bound it from: its scope is the bundle's own")
    if ev.get("bound") is None:
        return f"released #{event.seq} without gate evidence: {ev.get('note', 'not bounded')}"
    return (f"released #{event.seq}, bounded by gate decision #{ev['decision_seq']} (evidence supports "
            f"`{ev['bound']}`): {ev.get('covered', '')}")
