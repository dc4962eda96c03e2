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
from collections.abc import Callable, Sequence
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict

from ole.jobs import EvalJob
from ole.trace import RunCondition, TaskSpec, Trace

EPS_Q = 1.0
"""ε of Eq. 9 in value-score units: one normalized point (of 0–120). Keeps r finite when
the champion scores near zero (an unsolved MiniGrid task) without inflating it 10^6-fold."""

R_BOUND = 4.0
"""|r| is clipped here so one near-zero champion score cannot dominate a mean."""

FAIL_R = 1.0
"""Bounded failure-aware change: a failed challenger against a scoring champion gets
r = −FAIL_R (all of the champion's value lost); the reverse gets +FAIL_R; both failed, 0."""

CONTRACT_RESOURCES = ("episodes", "wall_time_s", "llm_calls", "tokens", "usd")
"""Keys of the task contract's resource budget β that a run's usage is checked against."""


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RunResult(_Record):
    """One evaluated run, reduced to what pairing and the gate need."""

    trace_id: str
    """The archived trace of the run."""
    bundle_hash: str
    """Content hash of the bundle that worked the task."""
    q: float | None
    """Value score: normalized held-out score, raw held-out score outside the anchors, None on failure."""
    q_source: Literal["normalized", "raw", "none"]
    """Where q came from (`raw` is not comparable across envs: r stays meaningful, q does not)."""
    score: float | None = None
    """Raw held-out mean return (None on failure); pairs recompute q from it with one anchor set."""
    status: str
    """Host run status (`completed`, `no_ok_submit`, `error`)."""
    verified: bool
    """True when the host's run.json recorded the outcome (a scored run, or a host-recorded failure)."""
    episodes: int
    """Train episodes charged."""
    wall_s: float
    """Agent wall time in seconds."""
    llm_calls: int = 0
    """LLM calls made."""
    tokens: int = 0
    """LLM tokens used."""
    usd: float = 0.0
    """LLM spend in US dollars."""
    within_contract: bool = True
    """True when every usage above stays within the task contract's resource budget β."""
    contract_breaches: tuple[str, ...] = ()
    """Which β entries were exceeded, as `name: used > bound`."""

    @property
    def failed(self) -> bool:
        return self.q is None


class Pair(_Record):
    """One paired comparison on an identical task and run condition."""

    task: TaskSpec
    """The task both bundles worked."""
    condition: RunCondition
    """The run condition both runs shared."""
    family: str
    """Env family of the task (for coverage checks)."""
    q_source: Literal["normalized", "raw"] = "normalized"
    """How both sides' q were computed for this pair (always the same for both)."""
    champion: RunResult
    """The champion's run."""
    challenger: RunResult
    """The challenger's run."""
    delta: float
    """q_challenger − q_champion (0 when either failed; see `r` for the failure-aware change)."""
    r: float
    """Relative change δ / max(|q_champion|, ε), clipped to ±R_BOUND, or ±FAIL_R / 0 on failures."""
    failure: Literal["none", "challenger", "champion", "both"]
    """Which side failed to score."""


def value_score(trace: Trace) -> tuple[float | None, Literal["normalized", "raw", "none"]]:
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
    usage = {"episodes": out.episodes_used, "wall_time_s": out.wall_time_s, "llm_calls": out.llm_calls,
             "tokens": out.tokens, "usd": out.usd}
    bounds = trace.contract.resource_budget
    breaches = tuple(f"{k}: {usage[k]:g} > {bounds[k]:g}" for k in CONTRACT_RESOURCES
                     if k in bounds and usage[k] > bounds[k])
    host_recorded = trace.verified or (out.status != "completed" and trace.run_json_sha256.startswith("sha256:"))
    score = float(out.final_score) if q is not None else None
    return RunResult(trace_id=trace.trace_id, bundle_hash=trace.bundle_hash, q=q, q_source=source,
                     score=score, status=out.status, verified=host_recorded, episodes=out.episodes_used,
                     wall_s=out.wall_time_s, llm_calls=out.llm_calls, tokens=out.tokens, usd=out.usd,
                     within_contract=not breaches, contract_breaches=breaches)


def relative_change(q_champion: float | None, q_challenger: float | None) -> tuple[float, float, str]:
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


def pair_q(env: str, champion: RunResult, challenger: RunResult) -> tuple[float | None, float | None, str]:
    """q of both sides computed the same way: normalized with today's anchors, else raw.

    Both runs' raw scores are re-mapped with one anchor set, so a pair never mixes a
    normalized score with a raw one (anchors may be added between two runs).
    """
    from evogym.anchors import anchors, normalized
    if any(r.score is None and r.q is not None for r in (champion, challenger)):
        source = "raw" if "raw" in (champion.q_source, challenger.q_source) else "normalized"
        return champion.q, challenger.q, source  # results recorded without raw scores
    if anchors(env) is not None:
        return (*(None if r.score is None else normalized(env, r.score) for r in (champion, challenger)), "normalized")
    return champion.score, challenger.score, "raw"


def make_pair(task: TaskSpec, condition: RunCondition, family: str,
              champion: RunResult, challenger: RunResult) -> Pair:
    q_champ, q_chall, source = pair_q(task.env, champion, challenger)
    delta, r, failure = relative_change(q_champ, q_chall)
    return Pair(task=task, condition=condition, family=family, q_source=source, champion=champion,
                challenger=challenger, delta=delta, r=r, failure=failure)  # type: ignore[arg-type]


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

    def __init__(self, executor, store: ResultStore, evaluate: Callable[[EvalJob], Trace], *,
                 traces_root: str, runs_root: str, isolation: str = "bwrap",
                 before_batch: Callable[[list[EvalJob]], None] = lambda jobs: None,
                 on_result: Callable[[EvalJob, RunResult], None] = lambda job, res: None) -> None:
        from ole.trace import TraceArchive
        self.executor, self.store, self.evaluate = executor, store, evaluate
        self.archive = TraceArchive(traces_root)
        self.runs_root, self.isolation = runs_root, isolation
        self.before_batch, self.on_result = before_batch, on_result
        self.traces: dict[str, Trace] = {}
        """Traces of the runs made by this instance, by trace id."""

    @property
    def traces_root(self) -> str:
        return str(self.archive.root)

    def _job(self, ref: str, bundle, inst: Instance) -> EvalJob:
        return EvalJob(bundle_ref=ref, bundle=bundle, task=inst[0], condition=inst[1], runs_root=self.runs_root,
                       isolation=self.isolation)

    def _keep(self, trace: Trace) -> None:
        """Archive a host-recorded trace once (a retried job or a resumed batch may return it again);
        failed runs too, since the pairs that name them are decisions' evidence."""
        self.traces[trace.trace_id] = trace
        if trace.host_recorded and not (self.archive.root / f"{trace.trace_id}.json").exists():
            try:
                self.archive.append(trace)
            except FileExistsError:  # another driver of the same stream archived this id meanwhile
                pass

    def run(self, bundles: Sequence[tuple[str, object]], instances: Sequence[Instance]) -> dict[str, tuple[RunResult, str]]:
        """Make sure every (bundle, instance) has a stored result; returns them by store key."""
        jobs, keys, out = [], [], {}
        for ref, bundle in bundles:
            for inst in instances:
                key = eval_key(bundle.content_hash, *inst)
                hit = self.store.get(key)
                if hit is not None:
                    out[key] = hit
                elif key not in keys:
                    jobs.append(self._job(ref, bundle, inst))
                    keys.append(key)
        if jobs:
            order = longest_first(jobs)
            jobs, keys = [jobs[i] for i in order], [keys[i] for i in order]
            self.before_batch(jobs)
            for i, trace in self.executor.run(self.evaluate, jobs):
                res, family = run_result(trace), env_family(jobs[i].task.env)
                self._keep(trace)
                self.store.put(keys[i], instance_key(jobs[i].task, jobs[i].condition), family, res)
                out[keys[i]] = (res, family)
                self.on_result(jobs[i], res)
        return out

    def pairs(self, champion: tuple[str, object], challengers: Sequence[tuple[str, object]],
              instances: Sequence[Instance]) -> dict[str, list[Pair]]:
        """Per challenger ref, its pairs against the champion on every instance (one batch)."""
        results = self.run([champion, *challengers], instances)
        champ_hash = champion[1].content_hash
        out: dict[str, list[Pair]] = {}
        for ref, bundle in challengers:
            out[ref] = []
            for task, cond in instances:
                champ, family = results[eval_key(champ_hash, task, cond)]
                chall, _ = results[eval_key(bundle.content_hash, task, cond)]
                out[ref].append(make_pair(task, cond, family, champ, chall))
        return out
