"""Every release is watched: a release that is not staged (by the engine or by hand) is watched
from its first task against what served before — paired where OLE can rerun the task, unpaired
(failure count, per-env scores) where it cannot — and rolled back on harm, naming the test.

The guarantees are simulated (a look after every task, ≥ 300 streams): a harmless release is
rolled back with probability ≤ alpha_rollback; a release that makes every run fail is rolled back
after ≤ 3 harmed tasks once the control has a record."""
from __future__ import annotations

import random
import shutil
from pathlib import Path

from ole.evolve import EvolveConfig, Suite, open_engine
from ole.evolve.online import EXTERNAL_PROFILE, OnlineConfig, OnlineEvolution, engine_worker
from ole.executors import LocalExecutor
from ole.gate import GateConfig
from ole.monitor import AnalysisConfig
from ole.proposers.builtin import BuiltinProposer
from ole.registry import Registry
from ole.watch import Baseline, WatchedRun, bernoulli_wealth, judge
from synthetic import archive_fake

ROOT = Path(__file__).resolve().parents[2]
CFG = EvolveConfig(suite=Suite(envs=("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"), budget=8), gate_budgets=(8,),
                   search_pools=(101,), gate_pools=(201, 202, 203), seed=2)
GATE = GateConfig(min_pairs=6, min_families=2, max_pairs=None)
ANALYSIS = AnalysisConfig()


def _first_rollback(runs: list[WatchedRun], base: Baseline, cfg: AnalysisConfig = ANALYSIS) -> int | None:
    for k in range(1, len(runs) + 1):
        look = judge(runs[:k], base, cfg)
        if look.decision == "rollback":
            return k
        if look.decision != "hold":
            return None
    return None


# ----- the tests' guarantees, simulated ---------------------------------------------------------------

def test_a_harmless_release_is_rolled_back_at_most_alpha_of_the_time_however_often_one_looks():
    """The control fails 20 % of runs and scores N(50, 5) per env; so does the watched release. The
    baseline is drawn from the control before each stream (as the watch freezes it); 400 streams of
    the deadline's 16 tasks, half external (unpaired), a look after every task."""
    rng = random.Random(7)
    cfg = ANALYSIS
    fired = 0
    streams = 400
    for _ in range(streams):
        def draw() -> float | None:
            return None if rng.random() < 0.2 else rng.gauss(50.0, 5.0)
        history = [("e1" if i % 2 else "e2", draw()) for i in range(30)]
        scores: dict[str, list[float]] = {}
        for env, q in history:
            if q is not None:
                scores.setdefault(env, []).append(q)
        base = Baseline(control="c@1", runs=len(history), failures=sum(q is None for _, q in history),
                        env_scores={e: tuple(v[-cfg.reference:]) for e, v in scores.items()})
        runs = []
        for t in range(cfg.deadline):
            q, control_q = draw(), draw()
            paired = None
            if t % 2 == 0:  # a rerun task: its pair r (a failure on either side is ±1, clipped by the monitor)
                if q is None or control_q is None:
                    paired = 0.0 if q is None and control_q is None else (-1.0 if q is None else 1.0)
                else:
                    paired = (q - control_q) / control_q
            runs.append(WatchedRun(env="e1" if t % 3 else "e2", q=q, paired_r=paired))
        fired += _first_rollback(runs, base) is not None
    assert fired / streams <= cfg.alpha_rollback, fired


def test_a_release_whose_every_run_fails_is_rolled_back_within_three_tasks_paired_or_not():
    base = Baseline(control="c@1", runs=24, failures=1, env_scores={"e1": tuple(50.0 + i for i in range(16))})
    unpaired = [WatchedRun(env="e1", q=None) for _ in range(8)]
    paired = [WatchedRun(env="e1", q=None, paired_r=-1.0) for _ in range(8)]
    assert _first_rollback(unpaired, base) is not None and _first_rollback(unpaired, base) <= 3
    assert _first_rollback(paired, base) is not None and _first_rollback(paired, base) <= 3
    look = judge(unpaired[:3], base, ANALYSIS)
    assert look.decision == "rollback" and look.test == "failures" and "failures test" in look.reason


def test_scores_below_the_controls_worst_are_caught_on_an_env_without_failures():
    base = Baseline(control="c@1", runs=16, failures=0, env_scores={"e1": tuple(50.0 + i % 5 for i in range(16))})
    low = [WatchedRun(env="e1", q=10.0) for _ in range(8)]
    k = _first_rollback(low, base)
    assert k is not None and k <= 4
    assert judge(low[:k], base, ANALYSIS).test == "env_scores"
    # an env the control never worked is not judged by scores (no reference): no test, no rollback
    assert _first_rollback([WatchedRun(env="other", q=10.0) for _ in range(8)],
                           base.model_copy(update={"runs": 0, "failures": 0})) is None


def test_bernoulli_wealth_is_one_without_a_bound_and_grows_with_hits():
    assert bernoulli_wealth([True] * 5, 1.0) == 1.0
    assert bernoulli_wealth([True, True, True], 0.1) > bernoulli_wealth([True, True], 0.1) > 1.0
    assert bernoulli_wealth([False] * 5, 0.1) < 1.0


def test_a_watch_closes_at_the_deadline_without_a_verdict():
    base = Baseline(control="c@1", runs=0, failures=0)
    runs = [WatchedRun(env="e1", q=50.0) for _ in range(ANALYSIS.deadline)]
    assert judge(runs, base, ANALYSIS).decision == "closed"
    assert judge(runs[:3], base, ANALYSIS).decision == "hold"


# ----- the online driver watches unstaged and hand releases --------------------------------------

def _online(tmp_path: Path, *, external: bool = False, evaluate=archive_fake):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
    reg = Registry(root)
    engine = open_engine(registry=reg, workdir=tmp_path / "work", traces_root=tmp_path / "traces", cfg=CFG,
                         evaluate=evaluate, proposer=BuiltinProposer(), gate=GATE, executor=LocalExecutor(1),
                         progress=lambda line: None)
    return reg, OnlineEvolution(engine, CFG, OnlineConfig(tasks=40, every_k=1000), external=external)


def _hand_release(reg, component: str, field: str, value) -> str:
    champ = reg.champion()
    lp = champ.bundle.loop_policy
    new = champ.bundle.model_copy(update={"loop_policy": lp.model_copy(
        update={component: getattr(lp, component).model_copy(update={field: value})})})
    ref = reg.register(new, parents=[champ.version], edge="manual").ref
    reg.release(ref, reason="by hand, not staged", force=True)  # no --exposure: active on every task
    return ref


def test_an_unstaged_hand_release_that_fails_every_run_is_rolled_back_within_three_tasks(tmp_path):
    reg, evo = _online(tmp_path)
    work = engine_worker(evo.e)
    for _ in range(24):  # the champion's record on this stream: what the watch compares with
        evo.tell(work(evo.ask()))
    bad = _hand_release(reg, "recovery", "max_retries", 10)  # the fake crashes every run of it
    harmed = 0
    for _ in range(8):
        a = evo.ask()
        if a.bundle_ref != bad:
            break
        assert a.watch is not None and a.control == "coder@1" and a.canary is None
        harmed += 1
        evo.tell(work(a))
    assert 1 <= harmed <= 3, harmed
    assert reg.champion().ref == "coder@1" and reg.get(bad).status == "rolled_back"
    rollback = [e for e in reg.events(kind="rollback")][-1]
    assert rollback.payload["monitor"]["test"] in ("failures", "paired_r")
    assert rollback.payload["reason"].startswith("watch: ") and rollback.payload["from"] == bad
    looks = [e.payload for e in reg.events(kind="evaluation") if e.payload.get("stage") == "watch-look"]
    assert looks[-1]["decision"] == "rollback" and all(x["control"] == "coder@1" for x in looks)


def test_a_staged_release_that_fails_every_run_is_rolled_back_within_three_canary_tasks(tmp_path):
    """The canary's look adds the failure-count test (a fifth of alpha_rollback) to its paired test: every
    pair r = -1 alone would need four pairs at alpha 0.08; three failures against the control's 0 of 24 do it."""
    reg, evo = _online(tmp_path)
    work = engine_worker(evo.e)
    for _ in range(24):  # the champion's record on this stream
        evo.tell(work(evo.ask()))
    bad = _staged_crashing_release(reg)
    harmed = 0
    for _ in range(8):
        a = evo.ask()
        if a.bundle_ref != bad:
            break
        assert a.canary is not None and a.control == "coder@1"
        harmed += 1
        evo.tell(work(a))
    assert 1 <= harmed <= 3, harmed
    assert reg.get(bad).status == "rolled_back" and reg.champion().ref == "coder@1"
    stage = [e for e in reg.events(kind="stage") if e.payload["stage"] == "rolled_back"][-1]
    assert "failures test" in stage.payload["reason"]
    looks = [e.payload for e in reg.events(kind="evaluation") if e.payload.get("stage") == "monitor-look"]
    assert all(x["analysis_hash"] == GATE.analysis.digest for x in looks)


def _staged_crashing_release(reg) -> str:
    """A child of the champion that the fake crashes on every run, released by hand and staged on every task."""
    champ = reg.champion()
    lp = champ.bundle.loop_policy
    bad = reg.register(champ.bundle.model_copy(update={"loop_policy": lp.model_copy(
        update={"recovery": lp.recovery.model_copy(update={"max_retries": 10})})}), parents=[champ.version],
        edge="manual").ref  # the fake crashes every run of it
    reg.release(bad, reason="staged by hand", force=True, exposure=1.0)
    return bad


def _external_task(reg, evo, i: int):
    """Stream task i as an external harness works it (profile `external`: OLE cannot rerun it)."""
    from ole.chosen import ChosenVersion
    from ole.jobs import EvalJob
    from ole.registry.scopes import task_context
    from ole.trace import RunCondition, TaskSpec
    from synthetic import fake_evaluate
    cond = RunCondition(host="builtin", seed=0)
    env = CFG.suite.envs[i % 2]
    a = evo.ask(condition=cond, ctx=task_context(env, "builtin", 8))
    trace = fake_evaluate(EvalJob(chosen=ChosenVersion(a.bundle_ref, reg.get(a.bundle_ref).bundle), runs_root="r",
                                  task=TaskSpec(env=env, profile=EXTERNAL_PROFILE, budget=8, pool_seed=700 + i),
                                  condition=cond))
    evo.tell(trace.model_copy(update={"trace_id": f"ext-{i}"}))
    return a


def test_external_harness_tasks_are_watched_unpaired(tmp_path):
    reg, evo = _online(tmp_path, external=True)

    def external_task(i: int):
        return _external_task(reg, evo, i)
    for i in range(24):
        external_task(i)
    bad = _hand_release(reg, "recovery", "max_retries", 10)
    worked = [external_task(24 + i) for i in range(6)]
    harmed = [a for a in worked if a.bundle_ref == bad]
    assert 1 <= len(harmed) <= 3 and worked[len(harmed)].bundle_ref == "coder@1"
    assert not evo.events.monitor_pairs  # nothing was rerun: external tasks are not reproducible
    rollback = reg.events(kind="rollback")[-1]
    assert rollback.payload["monitor"]["test"] == "failures"


def test_a_staged_release_on_external_harness_tasks_is_judged_unpaired_and_rolled_back(tmp_path):
    """A canary whose tasks OLE cannot rerun is still monitored: the watch's unpaired tests against the
    control's record (before: such tasks were "not monitored" and the canary ran on unjudged)."""
    reg, evo = _online(tmp_path, external=True)

    def external_task(i: int):
        return _external_task(reg, evo, i)
    for i in range(24):
        external_task(i)
    bad = _staged_crashing_release(reg)
    worked = [external_task(24 + i) for i in range(8)]
    harmed = [a for a in worked if a.bundle_ref == bad]
    assert all(a.canary is not None for a in harmed) and 1 <= len(harmed) <= 3, len(harmed)
    assert worked[-1].bundle_ref == "coder@1" and reg.get(bad).status == "rolled_back"
    assert not evo.events.monitor_pairs  # nothing was rerun
    stage = [e for e in reg.events(kind="stage") if e.payload["stage"] == "rolled_back"][-1]
    assert stage.payload["monitor"]["test"] == "failures" and "failures test" in stage.payload["reason"]
    looks = [e.payload for e in reg.events(kind="evaluation") if e.payload.get("stage") == "monitor-look"]
    assert looks and all(x["unpaired"] for x in looks) and looks[-1]["decision"] == "rollback"


def test_a_harmless_unstaged_release_is_promoted_by_its_pairs_and_stays(tmp_path):
    reg, evo = _online(tmp_path)
    work = engine_worker(evo.e)
    for _ in range(4):
        evo.tell(work(evo.ask()))
    good = _hand_release(reg, "verification", "retest_episodes", 8)  # +15 % on every task (the fake)
    for _ in range(12):
        a = evo.ask()
        evo.tell(work(a))
        if evo.e.store.step(f"watch-end|{a.watch}") is not None:
            break
    ended = evo.e.store.step(f"watch-end|{a.watch}")
    assert ended is not None and ended["decision"] == "promote"
    assert reg.champion().ref == good and not reg.events(kind="rollback")
    nxt = evo.ask()
    assert nxt.bundle_ref == good and nxt.watch is None  # the watch ended: no more control reruns


# ----- widening online by canaries (releases that travel, item 3) -----------------------------------

def _released_with_transfer(reg, region: str, *, excluded=()):
    """coder@2 (retests 8: +15 % on every task in the fake) released for gym/acrobot on a gate decision
    whose pairs are acrobot pairs and whose transfer part names `region` as a candidate."""
    from ole.chosen import ChosenVersion
    from ole.jobs import EvalJob
    from ole.paired import make_pair, run_result
    from ole.trace import RunCondition, TaskSpec
    from synthetic import fake_evaluate
    champ = reg.champion()
    lp = champ.bundle.loop_policy
    app = champ.bundle.applicability.model_copy(update={"hosts": ("builtin",), "min_budget": 8, "max_budget": 8})
    child = champ.bundle.model_copy(update={"applicability": app, "loop_policy": lp.model_copy(
        update={"verification": lp.verification.model_copy(update={"retest_episodes": 8})})})
    new = reg.register(child, parents=[champ.version], edge="specialization")
    pairs = []
    for pool in (201, 202, 203):
        task, cond = TaskSpec(env="gym/acrobot", budget=8, pool_seed=pool), RunCondition(host="builtin", seed=0)
        runs = [run_result(fake_evaluate(EvalJob(chosen=ChosenVersion(b.ref, b.bundle), runs_root="r", task=task,
                                                 condition=cond))) for b in (champ, new)]
        pairs.append(make_pair(task, cond, "generic", *runs).model_dump(mode="json"))
    candidate = {"scope": region, "envs": ["gymnasium/MiniGrid-FourRooms-v0"], "gains": ["gymnasium/MiniGrid-FourRooms-v0"],
                 "ties": [], "mean_r": 0.15, "harm_ucb": 0.9, "level": 0.9}
    reg.record_gate_decision(new.ref, {"verdict": "release", "pairs": pairs, "bound": "hosts=builtin;envs=gym/acrobot;"
                                       "budget=8-8", "transfer": {"regions": [], "candidates": [candidate],
                                                                  "excluded": list(excluded)}})
    reg.release(new.ref, reason="gated for acrobot")
    reg.activate_pending()
    return new.ref


def test_an_env_in_a_transfer_region_gets_the_change_by_a_canary_and_its_rollback_restores_the_narrower_scope(
        tmp_path):
    reg, evo = _online(tmp_path)
    work = engine_worker(evo.e)
    good = _released_with_transfer(reg, "hosts=builtin;obs=dict;act=discrete;budget=8-8")
    four = "envs=gymnasium/MiniGrid-FourRooms-v0"
    got = []
    for _ in range(16):
        a = evo.ask()
        got.append((a.task.env, a.bundle_ref, a.canary is not None))
        evo.tell(work(a))
        if evo.events.promotions:
            break
    assert evo.events.promotions and evo.events.promotions[0][1] == good  # the monitor widened it
    widening = [e for e in reg.events(kind="release") if e.payload.get("widening") == "canary"]
    assert len(widening) == 1 and four in widening[0].scope and widening[0].payload["exposure"]
    assert "transfer region" in widening[0].payload["evidence"]["covered"]
    widened = next(s for s in reg.state().champions("default") if four in s)
    assert reg.select("default", _ctx("gymnasium/MiniGrid-FourRooms-v0"), activate=False).ref == good
    # the rollback of the widening removes that one-env scope: FourRooms goes back to the seed
    reg.rollback(scope=widened, reason="test: undo the widening")
    reg.activate_pending()
    assert reg.select("default", _ctx("gymnasium/MiniGrid-FourRooms-v0"), activate=False).ref == "coder@1"
    assert reg.select("default", _ctx("gym/acrobot"), activate=False).ref == good  # the narrower reach stays
    assert any(canary for env, _, canary in got if env == "gymnasium/MiniGrid-FourRooms-v0")


def test_no_canary_widening_outside_the_region_or_on_an_excluded_env(tmp_path):
    reg, evo = _online(tmp_path)
    work = engine_worker(evo.e)
    _released_with_transfer(reg, "hosts=builtin;obs=box;act=box;budget=8-8")  # FourRooms: dict/discrete
    for _ in range(4):
        a = evo.ask()
        assert a.canary is None
        evo.tell(work(a))
    assert not [e for e in reg.events(kind="release") if e.payload.get("widening")]


def test_an_env_the_change_lost_on_is_never_tried(tmp_path):
    reg, evo = _online(tmp_path)
    work = engine_worker(evo.e)
    _released_with_transfer(reg, "hosts=builtin;obs=dict;act=discrete;budget=8-8",
                            excluded=("gymnasium/MiniGrid-FourRooms-v0",))
    for _ in range(4):
        evo.tell(work(evo.ask()))
    assert not [e for e in reg.events(kind="release") if e.payload.get("widening")]


def _ctx(env: str):
    from ole.registry.scopes import task_context
    return task_context(env, "builtin", 8)


def test_no_canary_widening_beside_a_harness_whose_tasks_cannot_be_rerun(tmp_path):
    from ole.evolve.widening import canary_widening
    reg, evo = _online(tmp_path, external=True)
    _released_with_transfer(reg, "hosts=builtin;obs=dict;act=discrete;budget=8-8")
    assert canary_widening(evo, _ctx("gymnasium/MiniGrid-FourRooms-v0")) is None  # nothing known yet
    for i in range(3):
        _external_task(reg, evo, i)  # profile `external`: OLE cannot rerun them
    assert canary_widening(evo, _ctx("gymnasium/MiniGrid-FourRooms-v0")) is None
    assert not [e for e in reg.events(kind="release") if e.payload.get("widening")]


def test_a_harness_whose_tasks_the_host_reproduces_gets_the_canary_widening(tmp_path):
    """`ole agent work --online` under `evogym suite run` on a host profile: its tasks can be rerun, so a
    task of an env in a release's transfer region is served by that release as a watched canary there too."""
    from ole.chosen import ChosenVersion
    from ole.jobs import EvalJob
    from ole.registry.scopes import task_context
    from ole.trace import RunCondition, TaskSpec
    from synthetic import fake_evaluate
    reg, evo = _online(tmp_path, external=True)
    good = _released_with_transfer(reg, "hosts=builtin;obs=dict;act=discrete;budget=8-8")
    cond = RunCondition(host="builtin", seed=0)
    for i in range(2):  # two harness tasks of acrobot on the quick profile: reproducible
        a = evo.ask(condition=cond, ctx=task_context("gym/acrobot", "builtin", 8))
        trace = fake_evaluate(EvalJob(chosen=ChosenVersion(a.bundle_ref, reg.get(a.bundle_ref).bundle), runs_root="r",
                                      task=TaskSpec(env="gym/acrobot", budget=8, pool_seed=800 + i), condition=cond))
        evo.tell(trace.model_copy(update={"trace_id": f"h-{i}"}))
    a = evo.ask(condition=cond, ctx=task_context("gymnasium/MiniGrid-FourRooms-v0", "builtin", 8))
    widening = [e for e in reg.events(kind="release") if e.payload.get("widening") == "canary"]
    assert len(widening) == 1 and widening[0].ref == good and "MiniGrid-FourRooms" in widening[0].scope
    assert reg.canaries("default")  # staged: the monitor judges it (paired where the control reruns)
    evo.abandon()


def test_a_widening_canary_that_only_ties_on_the_env_is_rolled_back_never_promoted(tmp_path):
    """Never widen on ties: a canary widening needs its monitor to show a gain above the transfer rule's
    min_gain; a change the env ignores (every pair ties) is held to the deadline and rolled back, while
    the same ties on a plain canary would be promoted (no harm)."""
    from ole.monitor import AnalysisConfig, look
    cfg = AnalysisConfig()
    assert look([0.0] * 12, cfg).decision == "promote"  # the plain canary: no harm shown
    assert look([0.0] * 12, cfg, min_gain=0.02).decision == "hold"
    assert look([0.0] * cfg.deadline, cfg, min_gain=0.02).decision == "rollback"
    assert look([0.15] * 8, cfg, min_gain=0.02).decision == "promote"
    from synthetic import no_minigrid_effect_evaluate
    reg, evo = _online(tmp_path, evaluate=no_minigrid_effect_evaluate)  # retests 8: no effect on FourRooms
    work = engine_worker(evo.e)
    tied = _released_with_transfer(reg, "hosts=builtin;obs=dict;act=discrete;budget=8-8")
    four = "gymnasium/MiniGrid-FourRooms-v0"
    for _ in range(4 * cfg.deadline + 8):  # FourRooms is every second task, the canary every second of those
        evo.tell(work(evo.ask()))
        if evo.events.rollbacks or evo.events.promotions:
            break
    assert not evo.events.promotions and evo.events.rollbacks and evo.events.rollbacks[0][1] == tied
    looks = [e.payload for e in reg.events(kind="evaluation") if e.payload.get("stage") == "monitor-look"]
    assert looks[-1]["decision"] == "rollback" and "gain wealth" in looks[-1]["reason"]
    assert all(x == 0.0 for x in looks[-1]["r"])
    evo.tell(work(evo.ask()))
    assert reg.select("default", _ctx(four), activate=False).ref == "coder@1"  # FourRooms keeps the seed


def test_several_envs_of_a_region_are_on_trial_at_once_one_canary_each(tmp_path):
    """A second new env in a release's transfer region does not wait for the first one's verdict: each
    gets its own one-env canary (judged on its own tasks); the same env is never tried twice at once."""
    from ole.evolve.widening import canary_widening, widening_canaries
    reg, evo = _online(tmp_path)
    good = _released_with_transfer(reg, "hosts=builtin;obs=dict;act=discrete;budget=8-8")
    four, empty = "gymnasium/MiniGrid-FourRooms-v0", "gymnasium/MiniGrid-Empty-8x8-v0"
    assert canary_widening(evo, _ctx(four)) is not None
    reg.select("default", _ctx(four))  # the task boundary: its canary starts
    assert canary_widening(evo, _ctx(four)) is None  # tried there already
    staged = canary_widening(evo, _ctx(empty))
    assert staged is not None and staged.startswith(good)
    reg.select("default", _ctx(empty))
    running = widening_canaries(evo)
    assert len(running) == 2 and {e.ref for e in running.values()} == {good}
    assert any(four in s for s in running) and any(empty in s for s in running)
    assert evo._canary_for(_ctx(empty)).payload["scope"] != evo._canary_for(_ctx(four)).payload["scope"]
    assert evo._canary_for(_ctx("gym/acrobot")) is None  # acrobot is served by the release's own scope


def test_a_widening_canary_holds_no_round_but_a_rounds_own_canary_holds_rounds_and_widening(tmp_path):
    from ole.evolve.widening import canary_widening, round_holders
    reg, evo = _online(tmp_path)
    _released_with_transfer(reg, "hosts=builtin;obs=dict;act=discrete;budget=8-8")
    four = "gymnasium/MiniGrid-FourRooms-v0"
    assert canary_widening(evo, _ctx(four)) is not None
    assert round_holders(evo) is None  # pending widening: no round waits for it
    reg.select("default", _ctx(four))
    assert reg.canaries("default") and round_holders(evo) is None  # running: still none
    champ = reg.champion()
    lp = champ.bundle.loop_policy
    other = reg.register(champ.bundle.model_copy(update={"loop_policy": lp.model_copy(update={
        "budget": lp.budget.model_copy(update={"max_llm_calls": 32})})}), parents=[champ.version], edge="manual")
    reg.release(other.ref, reason="a round's staged release", force=True, exposure=0.5)
    assert round_holders(evo) == "a release is pending"
    reg.select("default", _ctx("gym/acrobot"))
    assert round_holders(evo).startswith("a canary runs") and other.ref in round_holders(evo)
    assert canary_widening(evo, _ctx("gymnasium/MiniGrid-Empty-8x8-v0")) is None  # no widening beside it


def test_a_gated_release_into_the_scope_of_a_widening_canary_ends_that_canary_first(tmp_path):
    """A round's gated release whose bound is the one-env scope on trial: the widening canary ends (rolled
    back, recorded) before the release, so the scope has one canary, the gated one."""
    from ole.evolve.widening import canary_widening, clear_for_release, widening_canaries
    reg, evo = _online(tmp_path)
    good = _released_with_transfer(reg, "hosts=builtin;obs=dict;act=discrete;budget=8-8")
    four = "gymnasium/MiniGrid-FourRooms-v0"
    canary_widening(evo, _ctx(four))
    reg.select("default", _ctx(four))
    (scope, _), = widening_canaries(evo).items()
    from ole.chosen import ChosenVersion
    from ole.jobs import EvalJob
    from ole.paired import make_pair, run_result
    from ole.trace import RunCondition, TaskSpec
    from synthetic import fake_evaluate
    champ = reg.get("coder@1")
    lp = champ.bundle.loop_policy
    rival = reg.register(champ.bundle.model_copy(update={"loop_policy": lp.model_copy(update={
        "verification": lp.verification.model_copy(update={"retest_episodes": 8})})}), parents=[champ.version],
        edge="online")  # retests 8: +15 % in the fake, a gain on FourRooms
    pairs = []
    for pool in (211, 212, 213):
        task, cond = TaskSpec(env=four, budget=8, pool_seed=pool), RunCondition(host="builtin", seed=0)
        runs = [run_result(fake_evaluate(EvalJob(chosen=ChosenVersion(b.ref, b.bundle), runs_root="r", task=task,
                                                 condition=cond))) for b in (champ, rival)]
        pairs.append(make_pair(task, cond, "minigrid", *runs).model_dump(mode="json"))
    reg.record_gate_decision(rival.ref, {"verdict": "release", "pairs": pairs, "bound": scope})
    clear_for_release(evo, rival.ref)
    assert not widening_canaries(evo)
    ended = [e for e in reg.events(kind="stage") if e.payload["stage"] == "rolled_back"]
    assert ended and ended[-1].ref == good and rival.ref in ended[-1].payload["reason"]
    clear_for_release(evo, rival.ref)  # nothing left to end: no error, nothing recorded
    assert len([e for e in reg.events(kind="stage") if e.payload["stage"] == "rolled_back"]) == len(ended)
