"""The online driver's watch of releases that are not staged (`ole.watch` has the tests).

A task routed to a version whose scope pointer was moved there by a **release** (an `activation`
event caused by a `release`; a canary's promotion is a `stage` event and was monitored already)
is a watched task while that activation's watch is open. Its control is what served the scope
before (the activation's `from`), or, for a scope the release created, the version the task would
have been routed to without that scope. The watch's state lives in the engine's store (steps
`watch-base|SEQ`, `watch-pair|SEQ|TRACE`, `watch-look|SEQ|K`, `watch-end|SEQ`), so every process
working the stream shares one watch and a resumed process repeats nothing.

Each watched task the host can rerun is paired with the control's rerun on the identical task
(one extra run, as a canary's); a task of an external harness is not rerun and counts in the
unpaired tests. After every watched task the watch looks (`ole.watch.judge`), records the look as
a `watch-look` evaluation of the watched version, and on `rollback` rolls the scope back to the
control (`Registry.rollback` with the look as its monitor record: the rollback names the test).

A staged release (a canary) whose tasks include some OLE cannot rerun is judged by the same tests
(`canary_look_unpaired`), so a canary beside an external harness is monitored too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

from ole.bundle import TaskContext, format_ref
from ole.chosen import ChosenVersion
from ole.paired import RunResult, make_pair
from ole.trace import RunCondition, TaskSpec
from ole.evolve.store import Step, step
from ole.watch import Baseline, WatchedRun, judge

if TYPE_CHECKING:
    from ole.evolve.engine import Engine


class StreamDriver(Protocol):
    """What the watch (and `ole.evolve.widening`) read of the online driver (`OnlineEvolution`), named
    structurally so neither module imports the driver that imports them."""

    e: Engine
    events: Any
    external: bool


def watch_of(evo: StreamDriver, ctx: TaskContext, activation: int, scope: str) -> tuple[int, str] | None:
    """(activation seq, control ref) when a task routed by `activation` in `scope` is watched, else None."""
    from ole.registry.scopes import route
    if activation <= 0 or evo.e.store.step(step("watch-end", activation)) is not None:
        return None
    reg = evo.e.registry
    event = next((e for e in reg.events(kind="activation", channel=evo.e.channel) if e.seq == activation), None)
    if event is None or event.payload.get("cause") != "release" or event.payload.get("clear"):
        return None
    control = event.payload.get("from")
    if control is None:
        others = {s: k for s, k in reg.state().champions(evo.e.channel).items() if s != scope}
        if not others:
            return None
        control = format_ref(*route(evo.e.channel, ctx, others).key)
    if control == format_ref(*event.key):
        return None
    return activation, control


def baseline(evo: StreamDriver, watch: int | str, control: str) -> Baseline:
    """The control's record before the watch began, frozen at its first look (a store step)."""
    done = step("watch-base", watch)
    stored = evo.e.store.step(done)
    if stored is not None:
        return Baseline.model_validate(stored)
    reference = evo.e.gate.analysis.reference
    bundle_hash = evo.e.registry.get(control).bundle.content_hash
    runs: list[tuple[str, float | None]] = []
    for instance, result in evo.e.store.results_of(bundle_hash):
        runs.append((instance.split("|", 1)[0], result.q))
    for _, row in evo.e.store.tasks():
        if row.get("bundle_ref") == control and row.get("watch") is None:
            runs.append((row["task"]["env"], row.get("q")))
    envs: dict[str, list[float]] = {}
    for env, q in runs:
        if q is not None:
            envs.setdefault(env, []).append(float(q))
    made = Baseline(control=control, runs=len(runs), failures=sum(q is None for _, q in runs),
                    env_scores={e: tuple(v[-reference:]) for e, v in sorted(envs.items())})
    evo.e.store.commit(done, made.model_dump(mode="json"))
    return made


def after_task(evo: StreamDriver, n: int, watch: int, control: str, ref: str, scope: str) -> None:
    """Pair the watched tasks not yet paired (reruns by the control), then look; act on the decision."""
    end = step("watch-end", watch)
    if evo.e.store.step(end) is not None:
        return
    base = baseline(evo, watch, control)
    rows = [(m, p) for m, p in evo.e.store.tasks() if p.get("watch") == watch]
    runs: list[WatchedRun] = []
    for m, row in rows:
        r = _paired_r(evo, watch, m, row, control) if row["reproducible"] else None
        runs.append(WatchedRun(env=row["task"]["env"], q=row.get("q"), paired_r=r))
    cfg = evo.e.gate.analysis
    result = None
    for k in range(1, len(runs) + 1):  # a look after every watched task, also those a crashed process missed
        result = judge(runs[:k], base, cfg)
        looked = step("watch-look", watch, k)
        if evo.e.store.step(looked) is None:
            event = {"stage": "watch-look", "watch": watch, "scope": scope, "control": control,
                     **result.model_dump(mode="json"), "trace_ids": [p["trace_id"] for _, p in rows[:k]],
                     "baseline": {"runs": base.runs, "failures": base.failures}}
            evo.e.store.commit(looked, result.model_dump(mode="json"),
                               lambda key: evo.e.registry.record_evaluation(ref, event, key=key))
        if result.decision != "hold":
            break
    if result is None or result.decision == "hold":
        if result is not None:
            evo.e.progress(f"watch of {ref} ({scope}): hold — {result.reason}")
        return
    if result.decision == "rollback":
        serving = evo.e.registry.state().champion(evo.e.channel, scope)
        if serving is None or format_ref(*serving) != ref:
            evo.e.store.commit(end, {"decision": "superseded", **result.model_dump(mode="json")})
            evo.e.progress(f"watch of {ref} ({scope}): harm shown, but {ref} no longer serves the scope")
            return
    judged = result.model_dump(mode="json")
    reason = f"watch: {result.reason}"
    # a rollback's default target: what served the scope before the release (a scope it created is removed)
    evo.e.store.commit(end, {"decision": result.decision, **judged}, None if result.decision != "rollback" else
                       lambda key: evo.e.registry.rollback(evo.e.channel, scope=scope, reason=reason,
                                                           monitor={"watch": watch, **judged}, key=key))
    if result.decision == "rollback":
        mean = sum(r.paired_r for r in runs if r.paired_r is not None) / max(1, sum(r.paired_r is not None
                                                                                  for r in runs))
        evo.events.rollbacks.append((n - 1, ref, mean))
    evo.e.progress(f"watch of {ref} ({scope}): {result.decision.upper()} — {result.reason}"
                   + ("; effective at the next task boundary" if result.decision == "rollback" else ""))


def _paired_r(evo: StreamDriver, watch: int, n: int, row: dict[str, Any], control: str) -> float | None:
    """The watched task's pair with the control's rerun on the identical task (made once)."""
    done = step("watch-pair", watch, row["trace_id"])
    stored = evo.e.store.step(done)
    if stored is not None:
        return float(stored["r"])
    return control_pair(evo, row, control, done, {"watch": watch, "task_index": n})


def control_pair(evo: StreamDriver, row: dict[str, Any], control: str, done: Step, fields: dict[str, Any]) -> float:
    """The stream task `row` paired with `control`'s rerun of the identical task: recorded as a monitor
    pair under step `done` (with `fields`, e.g. the canary or the watch it belongs to); its r.
    One route for a canary's pairs (`OnlineEvolution`) and a watched release's."""
    task, cond = TaskSpec.model_validate(row["task"]), RunCondition.model_validate(row["condition"])
    rerun = ChosenVersion(ref=control, bundle=evo.e.registry.get(control).bundle)
    (res, family), = evo.e.paired.run([rerun], [(task, cond)]).values()
    pair = make_pair(task, cond, family, res, RunResult.model_validate(row["result"]))
    evo.events.monitor_pairs.append(pair)
    evo.e.record_monitor(row["bundle_ref"], done, {
        "parent": control, "control": control, **fields, "r": pair.r,
        "trace_id": row["trace_id"], "control_trace_id": res.trace_id})
    return pair.r


def canary_look_unpaired(evo: StreamDriver, n: int, canary: int, ref: str, scope: str) -> None:
    """The look of a canary some of whose tasks OLE cannot rerun (an external harness's): the watch's
    tests (`ole.watch.judge`: the paired r where a pair exists, and the failure count and per-env
    score tests against the control's record on the others), each at its share of
    `alpha_rollback`. A rollback names the test; `promote` needs the paired test; at the deadline
    an undecided canary is rolled back (an open analysis is not a pass)."""
    if evo.e.store.step(step("stage", canary)) is not None:
        return
    rows = [(m, p) for m, p in evo.e.store.tasks() if p.get("canary") == canary]
    control = rows[0][1]["control"]
    base = baseline(evo, f"canary-{canary}", control)
    runs = []
    for _, p in rows:
        made = evo.e.store.step(step("monitor", canary, p["trace_id"])) if p["reproducible"] else None
        runs.append(WatchedRun(env=p["task"]["env"], q=p.get("q"), paired_r=None if made is None else made["r"]))
    analysis = evo.e.gate.analysis
    result = None
    for k in range(1, len(runs) + 1):
        result = judge(runs[:k], base, analysis)
        looked = step("look", canary, k)
        if evo.e.store.step(looked) is None:
            event = {"stage": "monitor-look", "canary": canary, "scope": scope, "unpaired": True,
                     **result.model_dump(mode="json"), "trace_ids": [p["trace_id"] for _, p in rows[:k]],
                     "baseline": {"control": control, "runs": base.runs, "failures": base.failures}}
            evo.e.store.commit(looked, result.model_dump(mode="json"),
                               lambda key: evo.e.registry.record_evaluation(ref, event, key=key))
        if result.decision != "hold":
            break
    if result is None or result.decision == "hold":
        return
    staged: Literal["promoted", "rolled_back"] = "promoted" if result.decision == "promote" else "rolled_back"
    reason = result.reason if result.decision != "closed" else (
        f"inconclusive after the deadline of {analysis.deadline} canary tasks ({result.reason}): an open "
        "analysis is not a pass")
    monitor = result.model_dump(mode="json")
    evo.e.store.commit(step("stage", canary), {"stage": staged, **monitor},
                       lambda key: evo.e.registry.stage(evo.e.channel, scope, staged,
                                                        reason=f"monitor: {reason}", monitor=monitor, key=key))
    paired = [r.paired_r for r in runs if r.paired_r is not None]
    record = (n - 1, ref, sum(paired) / len(paired) if paired else float("nan"))
    (evo.events.promotions if staged == "promoted" else evo.events.rollbacks).append(record)
    evo.e.progress(f"canary {ref} ({scope}): {staged.upper().replace('_', ' ')} — {reason}; "
                   "effective at the next task boundary")
