"""Champion–challenger paired evaluation (OLE Eq. 9).

Champion and challenger run on identical tasks and run conditions (env, pools, agent
seed, model); a pair keeps both runs' value scores and costs, the change
δ = q_challenger − q_champion and the relative change r = δ / max(|q_champion|, ε).

The value score q of a run is its normalized held-out score (comparable across envs);
outside the envs with anchors it falls back to the raw held-out score and the pair
says so (`q_source="raw"`). A failed run has no score: the pair then gets a bounded,
failure-aware change (`FAIL_R`) instead of an undefined ratio, and keeps the failure
state so the gate can see it.

Completed evaluations are kept in a store keyed by (bundle hash, task, condition):
the champion's runs are paid for once per task and reused by every challenger, and an
interrupted search resumes without re-spending evaluations.
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Literal, Protocol, TypedDict

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from evogym.sandbox.isolation import DEFAULT_ISOLATION
from ole.chosen import ChosenVersion
from ole.executors import Executor
from ole.jobs import EvalJob
from ole.trace import RunCondition, RunSpend, TaskSpec, Trace

EPS_Q = 1.0
"""ε of Eq. 9 in value-score units: one normalized point (of 0–120). Keeps r finite when
the champion scores near zero (an unsolved MiniGrid task) without inflating it 10^6-fold."""

R_BOUND = 4.0
"""|r| is clipped here so one near-zero champion score cannot dominate a mean."""

FAIL_R = 1.0
"""Bounded failure-aware change: a failed challenger against a scoring champion gets
r = −FAIL_R (all of the champion's value lost); the reverse gets +FAIL_R; both failed, 0."""

CONTRACT_RESOURCES = ("episodes", "wall_time_s", "llm_calls", "tokens", "usd")
"""Keys of the task contract's resource budget β that a run's usage is checked against (the
budget's own names: `wall_time_s` is the limit `budget.wall_time_s`, met by the measured `wall_s`)."""


QSource = Literal["normalized", "raw", "none"]
"""Where a run's q came from: the normalized held-out score, the raw one, or none (a failed run)."""
PairSource = Literal["normalized", "raw"]
"""How both sides of a pair were scored (never mixed)."""
Failure = Literal["none", "challenger", "champion", "both"]
"""Which side of a pair failed to score."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunResult(RunSpend):
    """One evaluated run, reduced to what pairing and the gate need (its spend: `RunSpend`)."""

    trace_id: str
    """The archived trace of the run."""
    bundle_hash: str
    """Content hash of the bundle that worked the task."""
    q: float | None
    """Value score: normalized held-out score, raw held-out score outside the anchors, None on failure."""
    q_source: QSource
    """Where q came from (`raw` is not comparable across envs: r stays meaningful, q does not)."""
    score: float | None = None
    """Raw held-out mean return (None on failure); pairs recompute q from it with one anchor set."""
    status: str
    """Host run status (`completed`, `no_ok_submit`, `error`)."""
    verified: bool
    """True when the host's run.json recorded the outcome (a scored run, or a host-recorded failure)."""
    episodes: int
    """Train episodes charged."""
    submits: int = 0
    """Submits that reached the host (each one a sandboxed evaluation the host paid for). 0 in
    results stored before it was recorded: a pair with 0 on both sides has ratio 1."""
    within_contract: bool = True
    """True when every usage above stays within the task contract's resource budget β."""
    contract_breaches: tuple[str, ...] = ()
    """Which β entries were exceeded, as `name: used > bound`."""

    @property
    def failed(self) -> bool:
        """True when the run has no value score."""
        return self.q is None


class Pair(_Record):
    """One paired comparison on an identical task and run condition."""

    task: TaskSpec
    """The task both bundles worked."""
    condition: RunCondition
    """The run condition both runs shared."""
    family: str
    """Env family of the task (for coverage checks)."""
    q_source: PairSource = "normalized"
    """How both sides' q were computed for this pair (always the same for both)."""
    champion: RunResult
    """The champion's run."""
    challenger: RunResult
    """The challenger's run."""
    delta: float
    """q_challenger − q_champion (0 when either failed; see `r` for the failure-aware change)."""
    r: float
    """Relative change δ / max(|q_champion|, ε), clipped to ±R_BOUND, or ±FAIL_R / 0 on failures."""
    failure: Failure
    """Which side failed to score."""


COST_RESOURCES = ("episodes", "submits", "wall_s", "tokens", "usd")
"""Resources whose challenger/champion totals a comparison reports (`PairStats.cost_ratio`)."""
CVAR_ALPHA = 0.25
"""Default tail share of CVaR (the gate config's `cvar_alpha` overrides it)."""
WALL_NOISE_S = 5.0
"""Seconds of agent wall time, summed over a candidate's pairs, that are scheduling noise whatever
their share: runs of a second or two differ by more than any relative tolerance on a loaded
machine (`PairStats.wall_noise` states it as a share of the champion's total, for reports)."""


class Objectives(TypedDict, total=False):
    """One comparison as a point of the search's objectives (`PairStats.objectives`): benefit and
    tail up, episode cost and submit count down — what the runs did, never a clock reading
    (`ole.evolve.offline.dominates`). Without `submits` a point counts as the champion's submits."""

    n: int
    mean_r: float
    cvar: float
    cost: float
    submits: float


class PairStats(_Record):
    """What a set of pairs says, computed once from the pairs (`pair_stats`), per-pair values kept.

    Read by everything that judges a comparison: the evaluation event, the proposers (as
    `Objectives`), the offline ranking, ablation, the gate (`ole.gate.GateStats` adds the test
    and the config-bound counts to it) and the report.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")
    n_pairs: int
    """Pairs judged."""
    r: tuple[float, ...]
    """Per-pair relative changes, in pair order."""
    mean_r: float
    """Mean of r."""
    win_rate: float
    """Fraction of r > 0, ties counted half."""
    worst_r: float
    """Smallest r."""
    cvar: float
    """Mean of the worst ⌈cvar_alpha·n⌉ values of r."""
    n_failures: int
    """Pairs where the challenger failed to score."""
    families: tuple[str, ...]
    """Env families covered."""
    informative_families: tuple[str, ...] | None = None
    """Env families with at least one pair that differed (r != 0): what counts as covering a family.
    Bit-identical pairs show no effect, not a gain. None only in records made before it was stored."""
    env_mean_r: dict[str, float] = Field(default_factory=dict)
    """Mean r per env (each env a release would serve)."""
    all_verified: bool
    """Every run of every pair was verified by the host."""
    contract_breaches: tuple[str, ...]
    """Challenger runs exceeding the contract's resource budget β."""
    cost_ratio: dict[str, float]
    """Per resource: challenger total / champion total (inf when the champion used none)."""
    wall_noise: float | None = None
    """`WALL_NOISE_S` as a share of the champion's total wall time: the resolution of the wall
    ratio, reported beside it (the search's objectives do not read wall ratios). None only in
    records made before it was stored."""

    def objectives(self) -> Objectives:
        """The comparison as a point of the search's objectives (`ole.evolve.offline.dominates`)."""
        return Objectives(n=self.n_pairs, mean_r=self.mean_r, cvar=self.cvar, cost=self.cost_ratio["episodes"],
                          submits=self.cost_ratio.get("submits", 1.0))


def _cost_ratio(pairs: Sequence[Pair]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name in COST_RESOURCES:
        # submits: over the pairs whose two runs both recorded some (results stored before the
        # field carry 0; a run that never reached a submit fails its pair, which r already charges)
        counted = [p for p in pairs if p.champion.submits > 0 and p.challenger.submits > 0] \
            if name == "submits" else pairs
        champ = sum(float(getattr(p.champion, name)) for p in counted)
        chall = sum(float(getattr(p.challenger, name)) for p in counted)
        out[name] = chall / champ if champ > 0 else (1.0 if chall == 0 else math.inf)
    return out


def pair_stats(pairs: Sequence[Pair], cvar_alpha: float = CVAR_ALPHA) -> PairStats:
    """Everything a set of pairs says, before any test (pure); no pairs give zeros."""
    r = np.array([p.r for p in pairs], dtype=float)
    n = len(r)
    by_env: dict[str, list[float]] = {}
    for p in pairs:
        by_env.setdefault(p.task.env, []).append(float(p.r))
    k = max(1, math.ceil(cvar_alpha * n))
    return PairStats(
        n_pairs=n, r=tuple(float(x) for x in r), mean_r=float(r.mean()) if n else 0.0,
        win_rate=float((np.sum(r > 0) + 0.5 * np.sum(r == 0)) / n) if n else 0.0,
        worst_r=float(r.min()) if n else 0.0, cvar=float(np.sort(r)[:k].mean()) if n else 0.0,
        n_failures=sum(p.failure in ("challenger", "both") for p in pairs),
        families=tuple(sorted({p.family for p in pairs})),
        informative_families=tuple(sorted({p.family for p in pairs if p.r != 0.0})),
        env_mean_r={e: sum(v) / len(v) for e, v in sorted(by_env.items())},
        all_verified=all(p.champion.verified and p.challenger.verified for p in pairs),
        contract_breaches=tuple(f"{p.challenger.trace_id}: {b}" for p in pairs for b in p.challenger.contract_breaches),
        cost_ratio=_cost_ratio(pairs), wall_noise=WALL_NOISE_S / (sum(p.champion.wall_s for p in pairs) or 1.0))


def regressions(r: Iterable[float], tail_tau: float) -> int:
    """Pairs whose r falls below −tail_tau (the gate's regressions)."""
    return int(np.sum(np.array(list(r), dtype=float) < -tail_tau))


def value_score(trace: Trace) -> tuple[float | None, QSource]:
    """q of a run: normalized held-out score where anchors exist, raw score otherwise."""
    out = trace.outcome
    if out.status != "completed" or out.final_score is None:
        return None, "none"
    if out.normalized_score is not None:
        return float(out.normalized_score), "normalized"
    from evogym.anchors import normalized
    norm = normalized(trace.task.env, float(out.final_score))
    if norm is not None:
        return norm, "normalized"
    return float(out.final_score), "raw"


def run_result(trace: Trace) -> RunResult:
    """Reduce a trace to a RunResult, checking its usage against the contract's β.

    A run that failed (no ok submit, host-recorded error) is not archived as evidence,
    but its failure is still verified by the host's run.json: it counts as a verified
    pair side with q = None, so the failure-aware change applies instead of the
    evidence-quality veto.
    """
    q, source = value_score(trace)
    out = trace.outcome
    usage = {"episodes": out.episodes_used, "wall_time_s": out.wall_s, "llm_calls": out.llm_calls,
             "tokens": out.tokens, "usd": out.usd}
    bounds = trace.contract.resource_budget
    breaches = tuple(f"{k}: {usage[k]:g} > {bounds[k]:g}" for k in CONTRACT_RESOURCES
                     if k in bounds and usage[k] > bounds[k])
    host_recorded = trace.verified or (out.status != "completed" and trace.run_json_sha256.startswith("sha256:"))
    score = float(out.final_score) if q is not None and out.final_score is not None else None
    return RunResult(trace_id=trace.trace_id, bundle_hash=trace.bundle_hash, q=q, q_source=source,
                     score=score, status=out.status, verified=host_recorded, episodes=out.episodes_used,
                     submits=out.n_submits, wall_s=out.wall_s, llm_calls=out.llm_calls, tokens=out.tokens, usd=out.usd,
                     within_contract=not breaches, contract_breaches=breaches)


def relative_change(q_champion: float | None, q_challenger: float | None) -> tuple[float, float, Failure]:
    """(δ, r, failure) for one pair, with the bounded failure-aware change on failures."""
    if q_champion is None and q_challenger is None:
        return 0.0, 0.0, "both"
    if q_challenger is None:
        return 0.0, -FAIL_R, "challenger"
    if q_champion is None:
        return 0.0, FAIL_R, "champion"
    delta = q_challenger - q_champion
    r = delta / max(abs(q_champion), EPS_Q)
    return delta, max(-R_BOUND, min(R_BOUND, r)), "none"


def pair_q(env: str, champion: RunResult, challenger: RunResult) -> tuple[float | None, float | None, PairSource]:
    """q of both sides computed the same way: normalized with today's anchors, else raw.

    Both runs' raw scores are re-mapped with one anchor set, so a pair never mixes a
    normalized score with a raw one (anchors may be added between two runs).
    """
    from evogym.anchors import anchors, normalized
    if any(r.score is None and r.q is not None for r in (champion, challenger)):
        source: PairSource = "raw" if "raw" in (champion.q_source, challenger.q_source) else "normalized"
        return champion.q, challenger.q, source  # results recorded without raw scores
    if anchors(env) is not None:
        q_champ, q_chall = (None if r.score is None else normalized(env, r.score) for r in (champion, challenger))
        return q_champ, q_chall, "normalized"
    return champion.score, challenger.score, "raw"


def make_pair(task: TaskSpec, condition: RunCondition, family: str,
              champion: RunResult, challenger: RunResult) -> Pair:
    """The pair of two runs on one task and condition: both q mapped alike (`pair_q`), then δ and r."""
    q_champ, q_chall, source = pair_q(task.env, champion, challenger)
    delta, r, failure = relative_change(q_champ, q_chall)
    return Pair(task=task, condition=condition, family=family, q_source=source, champion=champion,
                challenger=challenger, delta=delta, r=r, failure=failure)


def instance_key(task: TaskSpec, condition: RunCondition) -> str:
    """What makes a task instance distinct: env, pool seed and agent seed.

    The gate requires its keys to be disjoint from the keys of traces the proposer saw,
    so a candidate is never judged on the instances it was derived from.
    """
    return f"{task.env}|pool{task.pool_seed}|seed{condition.seed}"


def eval_key(bundle_hash: str, task: TaskSpec, condition: RunCondition) -> str:
    """Store key of one evaluation: (bundle hash, task, condition), canonical JSON hashed."""
    cond = condition.model_dump(mode="json")
    if cond.get("command") is None:  # keys made before conditions had a command stay valid
        cond.pop("command", None)
    doc = {"bundle": bundle_hash, "task": task.model_dump(mode="json"), "condition": cond}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


class ResultStore(Protocol):
    """What paired evaluation needs from a store (see `ole.evolve.store.EvaluationStore`)."""

    def get(self, key: str) -> tuple[RunResult, str] | None: ...
    def put(self, key: str, instance: str, family: str, result: RunResult) -> None: ...


class MemoryStore:
    """A dict-backed ResultStore (for one-off evaluations that need no resumption)."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[RunResult, str]] = {}

    def get(self, key: str) -> tuple[RunResult, str] | None:
        return self.rows.get(key)

    def put(self, key: str, instance: str, family: str, result: RunResult) -> None:
        self.rows.setdefault(key, (result, family))


def env_family(env: str) -> str:
    """Env family of a slug, as the host defines it (`evogym.envs`)."""
    from evogym.envs import resolve
    return resolve(env).family


Instance = tuple[TaskSpec, RunCondition]

def longest_first(jobs: Sequence[EvalJob]) -> list[int]:
    """Job indices by descending expected wall time (`ole.cost.run_wall` × budget), ties in given order.

    Executors start jobs in the order given, so with a few workers the long runs (halfcheetah5:
    43 s quick on 2 cores, vs 11-16 s for pusher5, acrobot, continuouscar) start first and
    the short ones fill the batch's end instead of a worker idling while one long run finishes.
    Results do not depend on the order: each job is a pure value and results are stored by key.
    """
    from ole.cost import run_wall
    return sorted(range(len(jobs)), key=lambda i: -run_wall(jobs[i].task.env) * (jobs[i].task.budget or 1))


class PairedEvaluation:
    """Runs champion and challengers on identical instances, reusing every stored run.

    `evaluate` maps an `EvalJob` to a `Trace` (default: a real run through `ole.jobs.run_job`);
    it must be a top-level function so jobs can go to other processes. The driver — this
    object, never a worker — stores each result and archives each verified trace under
    `traces_root`. `before_batch(jobs)` is called with the runs about to start (cost caps
    hook); `on_result` with each new result (progress and cost accounting).
    """

    def __init__(self, executor: Executor, store: ResultStore, evaluate: Callable[[EvalJob], Trace], *,
                 traces_root: str, runs_root: str, isolation: str = DEFAULT_ISOLATION,
                 before_batch: Callable[[list[EvalJob]], None] = lambda jobs: None,
                 on_result: Callable[[EvalJob, RunResult], None] = lambda job, res: None,
                 execution: str = "fast") -> None:
        from ole.errors import ValidationError
        from ole.jobs import EXECUTIONS
        from ole.storage.traces import open_archive
        if execution not in EXECUTIONS:
            raise ValidationError(f"unknown execution {execution!r}; expected one of {list(EXECUTIONS)}",
                                  hint="pass fast")
        self.executor, self.store, self.evaluate = executor, store, evaluate
        self.archive = open_archive(traces_root)  # files, or the database `$OLE_STORAGE` names
        self.runs_root, self.isolation, self.execution = runs_root, isolation, execution
        self.before_batch, self.on_result = before_batch, on_result
        self.traces: dict[str, Trace] = {}
        """Traces of the runs made by this instance, by trace id."""

    @property
    def traces_root(self) -> str:
        return str(self.archive.root)

    def _job(self, chosen: ChosenVersion, inst: Instance) -> EvalJob:
        return EvalJob(chosen=chosen, task=inst[0], condition=inst[1], runs_root=self.runs_root,
                       isolation=self.isolation, execution=self.execution)

    def _keep(self, trace: Trace) -> None:
        """Archive a host-recorded trace once (a retried job or a resumed batch may return it again);
        failed runs too, since the pairs that name them are decisions' evidence."""
        self.traces[trace.trace_id] = trace
        from ole.trace import TraceExists
        if trace.host_recorded and trace.trace_id not in self.archive:
            try:
                self.archive.append(trace)
            except TraceExists:  # another driver of the same stream archived this id meanwhile
                pass

    def run(self, versions: Sequence[ChosenVersion], instances: Sequence[Instance]) -> dict[str, tuple[RunResult, str]]:
        """Make sure every (version, instance) has a stored result; returns them by store key."""
        jobs: list[EvalJob] = []
        keys: list[str] = []
        out: dict[str, tuple[RunResult, str]] = {}
        for chosen in versions:
            for inst in instances:
                key = eval_key(chosen.content_hash, *inst)
                hit = self.store.get(key)
                if hit is not None:
                    out[key] = hit
                elif key not in keys:
                    jobs.append(self._job(chosen, inst))
                    keys.append(key)
        if jobs:
            order = longest_first(jobs) if self.execution == "fast" else list(range(len(jobs)))
            jobs, keys = [jobs[i] for i in order], [keys[i] for i in order]
            self.before_batch(jobs)
            for i, trace in self.executor.run(self.evaluate, jobs):
                res, family = run_result(trace), env_family(jobs[i].task.env)
                self._keep(trace)
                self.store.put(keys[i], instance_key(jobs[i].task, jobs[i].condition), family, res)
                out[keys[i]] = (res, family)
                self.on_result(jobs[i], res)
        return out

    def pairs(self, champion: ChosenVersion, challengers: Sequence[ChosenVersion],
              instances: Sequence[Instance]) -> dict[str, list[Pair]]:
        """Per challenger ref, its pairs against the champion on every instance (one batch)."""
        champ_version, versions = champion, list(challengers)
        results = self.run([champ_version, *versions], instances)
        out: dict[str, list[Pair]] = {}
        for chosen in versions:
            out[chosen.ref] = []
            for task, cond in instances:
                champ, family = results[eval_key(champ_version.content_hash, task, cond)]
                chall, _ = results[eval_key(chosen.content_hash, task, cond)]
                out[chosen.ref].append(make_pair(task, cond, family, champ, chall))
        return out
