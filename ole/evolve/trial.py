"""A round's challenger on trial on the stream itself: the stream's own run is the champion side.

A gate on the gate pools runs both sides of every pair (the champion's runs are cached only while
the champion and the pools stay the same). On a stream whose tasks the host can rerun, the stream
already ran the champion on fresh instances; so a round's challenger is put **on trial** instead:
every later stream task that the trial's champion works (routed to it, not a canary's or a watched
task, rerunnable) is rerun once by the challenger on the identical task (env, profile, budget, pool
seed, agent seed), and the pair (stream run, challenger rerun) is one gate pair. One extra run per
pair, not two. The proposer read only traces finished before the round, so every trial pair is an
instance it never saw (the gate's leak check still runs on them).

Looks: the gate judges after `min_pairs` pairs and again every `min_pairs` more while its verdict
is open (`ole.gate.should_extend`), each look at its share of α under the gate's spending
(`ole.gate.look_alpha`), up to `max_pairs`: the same decision rule as a gate on pools, on other
instances. A released verdict is released staged (a watched canary, `ole.evolve.online`), so
every release of a trial is monitored again on the tasks after it.

A challenger that does not pass as a whole but whose trial pairs gain on some envs (the scope plan
of `ole.evolve.scoping`, as a pools gate's) is registered as a specialization for those env ids and
put on a **scoped trial** (key `{R}s`): only the stream's later tasks of those envs pair, and the
gate judges the scope's families — the pairs that chose the scope never judge it.

A trial ends with its gate decision, or unjudged when its champion stops serving the general scope
(a rollback or another release moved the pointer: its later tasks cannot pair) or when it saw
`trial_tasks` stream tasks without reaching a final verdict. While a trial is open no new round
starts. State lives in the engine's store (steps `trial|R`, `trial-pair|R|TRACE`, `trial-end|R`),
shared by every process working the stream; pairs are made under a per-task lease, so each is made
once.

`stream_gate_ok` says whether a round may use the stream: at least half of the proposer's window
must be tasks the host can rerun (a stream of an external harness is gated on the pools).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from ole.chosen import ChosenVersion
from ole.evolve.store import step
from ole.evolve.watching import StreamDriver
from ole.gate import GateDecision, Look, decide, look_alpha, should_extend
from ole.paired import Pair, RunResult, env_family, instance_key, make_pair
from ole.trace import RunCondition, TaskSpec
from ole.verdicts import is_release

if TYPE_CHECKING:
    from ole.evolve.engine import Candidate


class OnlineEvolution(StreamDriver, Protocol):
    """What a trial reads of the online driver (`ole.evolve.online.OnlineEvolution`), named structurally
    so this module does not import the driver that imports it."""

    online: Any
    holder: str

    @property
    def index(self) -> int: ...

    def release_staged(self, ref: str, reason: str, r: int | str) -> None: ...


def stream_gate_ok(rows: list[dict[str, Any]]) -> bool:
    """Whether a round's window of stream rows is rerunnable enough to gate on the stream."""
    return bool(rows) and 2 * sum(bool(p["reproducible"]) for p in rows) >= len(rows)


def open_trial(evo: OnlineEvolution, r: int | str, champion: ChosenVersion, cand: Candidate, seen: set[str],
               envs: list[str] | None = None) -> dict:
    """Put round r's challenger on trial from the next stream task on (recorded once); with `envs`, a
    scoped trial (key `{r}s`): only tasks of those envs pair, and the gate judges the scope's families."""
    since = evo.index
    payload = {"round": r, "champion": champion.ref, "candidate": cand.ref, "since": since,
               "seen": sorted(seen), "envs": envs}
    evo.e.store.commit(step("trial", r), payload)
    where = f"the stream's next tasks of {', '.join(envs)}" if envs else "the stream's next tasks"
    evo.e.progress(f"round {r}: challenger {cand.ref} on trial against {champion.ref} on {where} "
                   f"(the stream's run is the champion side; one rerun per pair)")
    return {"champion": champion.ref, "candidate": cand.ref, "trial": r}


def open_trials(evo: OnlineEvolution) -> list[tuple[int | str, dict]]:
    """Trials opened and not ended (at most one: a round is skipped while a trial is open)."""
    out: list[tuple[int | str, dict]] = []
    for n in range(1, evo.index // evo.online.every_k + 2):
        for r in (n, f"{n}s"):
            t = evo.e.store.step(step("trial", r))
            if t is not None and evo.e.store.step(step("trial-end", r)) is None:
                out.append((r, t))
    return out


def _pairs(evo: OnlineEvolution, r: int | str, since: int) -> list[Pair]:
    """The trial's pairs so far, in stream order."""
    out = []
    for _, row in evo.e.store.tasks()[since:]:
        made = evo.e.store.step(step("trial-pair", r, row["trace_id"]))
        if made is not None:
            out.append(Pair.model_validate(made["pair"]))
    return out


def _pairable(row: dict[str, Any], trial: dict) -> bool:
    return (bool(row["reproducible"]) and row["bundle_ref"] == trial["champion"] and row.get("canary") is None
            and row.get("watch") is None and (not trial.get("envs") or row["task"]["env"] in trial["envs"]))


def after_task(evo: OnlineEvolution, n: int) -> None:
    """After stream task n finished: pair it (and any task a crashed process left unpaired) for each
    open trial, end a trial whose champion no longer serves, and look when a look is due."""
    for r, trial in open_trials(evo):  # noqa: B007 - r names the trial's steps
        champ = evo.e.registry.champion(evo.e.channel)
        rows = evo.e.store.tasks()
        if champ.ref != trial["champion"]:
            _end(evo, r, {"ended": f"{trial['champion']} no longer serves the general scope (now {champ.ref})"})
            continue
        for m, row in rows[trial["since"]:]:
            if not _pairable(row, trial):
                continue
            done = step("trial-pair", r, row["trace_id"])
            if evo.e.store.step(done) is not None:
                continue
            lease = evo.e.registry.lease(f"trial:{evo.e.channel}:{row['trace_id']}", evo.holder)
            if not lease.hold():
                continue
            try:
                if evo.e.store.step(done) is None:
                    _make_pair(evo, r, row, trial, m)
            finally:
                lease.release()
        _look(evo, r, trial, n)


def _make_pair(evo: OnlineEvolution, r: int | str, row: dict[str, Any], trial: dict, m: int) -> None:
    task, cond = TaskSpec.model_validate(row["task"]), RunCondition.model_validate(row["condition"])
    cand = ChosenVersion(ref=trial["candidate"], bundle=evo.e.registry.get(trial["candidate"]).bundle)
    (res, family), = evo.e.paired.run([cand], [(task, cond)]).values()
    pair = make_pair(task, cond, family or env_family(task.env), RunResult.model_validate(row["result"]), res)
    evo.e.store.commit(step("trial-pair", r, row["trace_id"]), {"pair": pair.model_dump(mode="json"), "task_index": m})
    evo.e.progress(f"trial {r}: {trial['candidate']} reran stream task {m} ({task.env}, budget {task.budget}): "
                   f"r {pair.r:+.3f}")


def look_sizes(evo: OnlineEvolution) -> list[int]:
    """Pair counts at which the trial's gate looks: every `min_pairs` up to `max_pairs` (one look
    at `min_pairs` without a cap)."""
    g = evo.e.gate
    first = max(1, g.min_pairs)
    if g.max_pairs is None:
        return [first]
    return list(range(first, g.max_pairs + 1, first)) or [g.max_pairs]


def _look(evo: OnlineEvolution, r: int | str, trial: dict, n: int) -> None:
    """Judge the trial at every look size its pairs reached (recomputed from the stored pairs, so a
    resumed or concurrent process reaches the same decision); decide, record and release once final."""
    from ole.evolve.engine import Candidate
    pairs = _pairs(evo, r, trial["since"])
    sizes = look_sizes(evo)
    due = [k for k in sizes if k <= len(pairs)]
    stale = n - trial["since"] >= evo.online.trial_tasks
    bundle = evo.e.registry.get(trial["candidate"]).bundle
    cand = Candidate(chosen=ChosenVersion(ref=trial["candidate"], bundle=bundle), proposal=None)
    champion = trial["champion"]
    envs = trial.get("envs")
    families = sorted({env_family(e) for e in envs}) if envs else None
    record: list[Look] = []
    decision: GateDecision | None = None
    final, n_prev = False, 0
    for i, size in enumerate(due):
        evo.e.keep_pairs(cand, pairs[:size])
        alpha = look_alpha(evo.e.gate, size, n_prev)
        decision = decide(cand.pairs, evo.e.gate, champion=champion, challenger=cand.ref,
                          seen_keys=set(trial["seen"]), alpha=alpha, scope_families=families)
        record.append(Look(n_pairs=decision.stats.n_pairs, alpha=alpha, p_value=decision.stats.p_value,
                           mean_r=decision.stats.mean_r, verdict=decision.verdict))
        n_prev = size
        why = should_extend(decision, sizes[i + 1]) if i + 1 < len(sizes) else None
        if why is None:
            final = True
            break
        record[-1] = record[-1].model_copy(update={"extend": why})
    if decision is None or not final:
        if stale:
            _end(evo, r, {"ended": f"no final verdict after {evo.online.trial_tasks} stream tasks "
                                   f"({len(pairs)} pairs)"})
        return
    decided = decision.model_copy(update={"looks": tuple(record)})
    stage = f"online-r{r}"
    evo.e.record_pairs(champion, cand, f"{stage}-stream")
    done = step("gate", stage, cand.ref, champion)
    if evo.e.store.step(done) is None:
        evo.e.store.commit(done, decided.model_dump(mode="json"),
                           lambda key: evo.e.registry.record_gate_decision(cand.ref, decided.event_payload(), key=key))
    evo.events.decisions.append(decided)
    evo.e.progress(f"trial {r}: gate on {decided.stats.n_pairs} stream pairs says {decided.verdict}: "
                   f"{'; '.join(decided.reasons)[:200]}")
    _end(evo, r, {"verdict": decided.verdict, "n_pairs": decided.stats.n_pairs})
    if is_release(decided.verdict):
        evo.release_staged(cand.ref, f"online gate round {r} on the stream's own runs"
                                     + (f" ({', '.join(envs)})" if envs else "")
                                     + f": mean r {decided.stats.mean_r:+.3f}", r)
    elif not envs:
        _scoped_trial(evo, r, trial, cand)


def _scoped_trial(evo: OnlineEvolution, r: int | str, trial: dict, cand: Candidate) -> None:
    """The round's challenger did not pass as a whole: where its trial pairs gained (the scope plan of
    `ole.evolve.scoping`, tail and cost holding there), it is registered as a specialization for those
    env ids and put on trial again on the stream's *later* tasks of those envs only — the pairs that
    chose the scope never judge it. No ablation here (it would rerun the change's parts on the pairs):
    the scoped trial judges the whole change."""
    from ole.evolve import scoping
    if not evo.online.scoped:
        return
    plans = scoping.plan([cand], max_scopes=1,
                         feasible=lambda c, envs: scoping.holds_tail_and_cost(evo.e, c, envs))
    if not plans:
        return
    scope = plans[0]
    champion = ChosenVersion(ref=trial["champion"], bundle=evo.e.registry.get(trial["champion"]).bundle)
    gated = scoping.specialize(evo.e, champion, cand, scope, None, keep_pairs=False, basis=f"trial {r}")
    if gated is None:
        return
    seen = set(trial["seen"]) | {instance_key(p.task, p.condition) for p in cand.pairs}
    open_trial(evo, f"{r}s", champion, gated, seen, envs=list(scope.envs))


def _end(evo: OnlineEvolution, r: int | str, payload: dict) -> None:
    done = step("trial-end", r)
    if evo.e.store.step(done) is None:
        evo.e.store.commit(done, payload)
        if "ended" in payload:
            evo.e.progress(f"trial {r}: ended unjudged: {payload['ended']}")
