"""Online mode: ask/tell, activation only at task boundaries, gate rounds, rollback on degradation."""
from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ole.evolve import EvolveConfig, Suite, open_engine
from ole.evolve.online import OnlineConfig, OnlineEvolution, engine_worker, run_stream
from ole.executors import LocalExecutor
from ole.gate import GateConfig
from ole.proposers.builtin import BuiltinProposer
from ole.registry import Registry
from synthetic import archive_fake

ROOT = Path(__file__).resolve().parents[2]
CFG = EvolveConfig(suite=Suite(envs=("gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"), budget=8), gate_budgets=(8,),
                   search_pools=(101,), gate_pools=(201, 202, 203), seed=2)
GATE = GateConfig(min_pairs=6, min_families=2, max_pairs=None)


def _online(tmp_path, online=OnlineConfig(tasks=6, every_k=3, gate_on="pools"), *, evaluate=archive_fake,  # noqa: B008 - frozen
            proposer=None):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
    reg = Registry(root)
    engine = open_engine(registry=reg, workdir=tmp_path / "work", traces_root=tmp_path / "traces", cfg=CFG,
                         evaluate=evaluate, proposer=proposer or BuiltinProposer(), gate=GATE,
                         executor=LocalExecutor(1), progress=lambda line: None)
    return reg, OnlineEvolution(engine, CFG, online)


def _harmful(reg):
    champ = reg.champion()
    lp = champ.bundle.loop_policy
    bad = champ.bundle.model_copy(update={"loop_policy": lp.model_copy(
        update={"observation": lp.observation.model_copy(update={"worst_k_episodes": 0})})})
    return reg.register(bad, parents=[champ.version], edge="manual")


def test_a_tiny_stream_runs_gate_rounds_and_records_decisions(tmp_path):
    reg, evo = _online(tmp_path)
    events = run_stream(evo, engine_worker(evo.e))
    assert len(events.worked) == 6 and len(events.decisions) >= 1
    assert all(d.stats.n_pairs == 6 and not d.stats.leaked_keys for d in events.decisions)
    assert sum(e.kind == "gate_decision" for e in reg.events()) == len(events.decisions)


def test_no_activation_mid_task(tmp_path):
    reg, evo = _online(tmp_path)
    work = engine_worker(evo.e)
    a = evo.ask()
    bad = _harmful(reg)
    reg.release(bad.ref, reason="injected")
    assert reg.champion().ref == a.bundle_ref == "coder@1"  # released, not active while the task runs
    evo.tell(work(a))
    assert reg.champion().ref == "coder@1"
    b = evo.ask()
    assert b.bundle_ref == bad.ref == reg.champion().ref


def _staged(reg, bundle_change, exposure=1.0):
    champ = reg.champion()
    lp = champ.bundle.loop_policy
    comp, field, value = bundle_change
    new = champ.bundle.model_copy(update={"loop_policy": lp.model_copy(
        update={comp: getattr(lp, comp).model_copy(update={field: value})})})
    ref = reg.register(new, parents=[champ.version], edge="manual").ref
    reg.release(ref, reason="staged by the test", exposure=exposure)
    return ref


def _stages(reg):
    return [(e.ref, e.payload["stage"]) for e in reg.events(kind="stage")]


def test_injected_harmful_release_is_a_canary_rolled_back_by_the_monitor(tmp_path):
    reg, evo = _online(tmp_path, OnlineConfig(tasks=20, every_k=100))
    work = engine_worker(evo.e)
    evo.tell(work(evo.ask()))
    bad = _staged(reg, ("observation", "worst_k_episodes", 0))  # -40 % on every task (the fake)
    a = evo.ask()
    assert a.bundle_ref == bad and a.canary is not None and a.control == "coder@1"
    assert reg.champion().ref == "coder@1"  # a canary never moves the pointer
    evo.tell(work(a))
    for _ in range(6):
        if not evo.events.rollbacks:
            evo.tell(work(evo.ask()))
    assert evo.events.rollbacks and evo.events.rollbacks[0][1] == bad
    assert len(evo.events.monitor_pairs) <= 4 and all(p.r < -0.3 for p in evo.events.monitor_pairs)
    assert _stages(reg) == [(bad, "canary"), (bad, "rolled_back")]
    assert reg.get(bad).status == "rolled_back"
    looks = [e for e in reg.events(kind="evaluation") if e.payload.get("stage") == "monitor-look"]
    assert looks and all(e.payload["analysis_hash"] == GATE.analysis.digest for e in looks)
    assert evo.ask().bundle_ref == "coder@1"


def test_a_good_canary_is_promoted_and_then_serves_every_task(tmp_path):
    reg, evo = _online(tmp_path, OnlineConfig(tasks=40, every_k=100, adapt_exposure=False))
    work = engine_worker(evo.e)
    good = _staged(reg, ("verification", "retest_episodes", 8), exposure=0.5)  # +15 % (the fake)
    got = []
    while not evo.events.promotions and len(got) < 30:
        a = evo.ask()
        got.append(a.bundle_ref)
        evo.tell(work(a))
    assert evo.events.promotions and evo.events.promotions[0][1] == good
    assert got[:4] == [good, "coder@1", good, "coder@1"]  # exposure 0.5: every second in-scope task
    assert _stages(reg) == [(good, "canary"), (good, "promoted")]
    assert reg.champion().ref == good and reg.get(good).status == "active"
    nxt = evo.ask()
    assert nxt.bundle_ref == good and nxt.canary is None  # promoted: every task, no control runs


def test_an_inconclusive_canary_is_held_then_rolled_back_at_the_deadline(tmp_path):
    from ole.monitor import AnalysisConfig
    gate = GATE.model_copy(update={"analysis": AnalysisConfig(deadline=3, promote_tolerance=0.01,
                                                              prior_harm=0.0)})
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
    reg = Registry(root)
    engine = open_engine(registry=reg, workdir=tmp_path / "work", traces_root=tmp_path / "traces", cfg=CFG,
                         evaluate=archive_fake, proposer=BuiltinProposer(), gate=gate, executor=LocalExecutor(1),
                         progress=lambda line: None)
    evo = OnlineEvolution(engine, CFG, OnlineConfig(tasks=10, every_k=100))
    work = engine_worker(evo.e)
    tied = _staged(reg, ("memory", "carry_lessons", False))  # the fake ignores it: every pair is a tie
    for _ in range(3):
        evo.tell(work(evo.ask()))
    looks = [e.payload for e in reg.events(kind="evaluation") if e.payload.get("stage") == "monitor-look"]
    assert [x["decision"] for x in looks] == ["hold", "hold", "rollback"]
    assert "deadline" in looks[-1]["reason"] and _stages(reg)[-1] == (tied, "rolled_back")
    show = reg.scope_champions()[0]
    assert show.canary is None and "rolled back" in show.stage


@pytest.mark.slow
@pytest.mark.sandbox
def test_online_rollback_experiment_smoke(tmp_path):
    out = tmp_path / "report.md"
    subprocess.run([sys.executable, str(ROOT / "experiments" / "online_rollback.py"), "--envs", "gym/acrobot",
                    "--budget", "2", "--tasks", "3", "--inject-after", "1",
                    "--workdir", str(tmp_path / "work"), "--out", str(out)], check=True, cwd=ROOT, timeout=600)
    text = out.read_text()
    assert "| task | env | active bundle |" in text and "injected" in text.lower()


def test_every_trace_a_decision_names_is_archived_and_fsck_checks_it(tmp_path):
    """Monitor pairs, their controls and gate pairs name trace ids; each is in the archive (a
    harmed canary's runs included), and `fsck` with the archive reports one that is gone."""
    reg, evo = _online(tmp_path, OnlineConfig(tasks=20, every_k=3))
    work = engine_worker(evo.e)
    evo.tell(work(evo.ask()))
    _staged(reg, ("observation", "worst_k_episodes", 0))
    for _ in range(8):
        evo.tell(work(evo.ask()))
    from ole.registry.fsck import named_trace_ids
    named = {t for e in reg.events() for t in named_trace_ids(e)}
    monitor = [e for e in reg.events(kind="evaluation") if e.payload.get("stage") == "monitor"]
    assert monitor and named >= {e.payload["trace_id"] for e in monitor}
    assert reg.fsck(repair=False, traces=[tmp_path / "traces"]).ok
    victim = sorted(named)[0]
    (tmp_path / "traces" / f"{victim}.json").unlink()
    report = reg.fsck(repair=False, traces=[tmp_path / "traces"])
    assert not report.ok and any(victim in p and "not in" in p for p in report.problems)


class _Retest8(BuiltinProposer):
    """A scripted challenger: retest 8 (gains on FourRooms only in the fake) plus a field that does nothing."""

    def mutate(self, parent, evidence, *, edge, generation, seed, host=None):
        from ole.proposers import accepted, child_bundle
        lp = parent.bundle.loop_policy.model_dump(mode="json")
        lp["verification"]["retest_episodes"] = 8
        lp["memory"]["top_k_programs"] = 2
        bundle = child_bundle([parent], lp, edge=edge, evidence_ids=(), generation=generation, proposer=self.name,
                              note="scripted")
        return accepted(self.name, edge, [parent], bundle)


def test_a_one_env_gain_is_gated_again_as_a_specialization_on_its_own_pools(tmp_path):
    from synthetic import one_env_gain_evaluate
    online = OnlineConfig(tasks=3, every_k=3, gate_on="pools")
    reg, evo = _online(tmp_path, online, evaluate=one_env_gain_evaluate, proposer=_Retest8())
    events = run_stream(evo, engine_worker(evo.e))
    general, scoped = events.decisions
    assert general.verdict != "release"  # -10 % on acrobot: it does not hold on every env
    assert scoped.verdict == "release" and events.releases == [scoped.challenger]
    assert {p.task.pool_seed for p in scoped.pairs} == set(online.scope_pools)  # never the pairs that chose it
    assert {p.task.env for p in scoped.pairs} == {"gymnasium/MiniGrid-FourRooms-v0"}
    assert {p.task.pool_seed for p in general.pairs} <= {*CFG.gate_pools, *CFG.gate_extra_pools}
    released = reg.get(scoped.challenger).bundle
    assert released.applicability.env_ids == ("gymnasium/MiniGrid-FourRooms-v0",)
    assert released.provenance.edge == "specialization" and released.loop_policy.verification.retest_episodes == 8
    # the ablation on the round's gate pairs cut the field that did nothing
    assert released.loop_policy.memory.top_k_programs == reg.get("coder@1").bundle.loop_policy.memory.top_k_programs
    assert scoped.ablation is not None and scoped.ablation.dropped == ("memory.top_k_programs",)


def test_scope_pools_must_be_fresh(tmp_path):
    with pytest.raises(Exception, match="scope pools"):
        _online(tmp_path, OnlineConfig(tasks=3, every_k=3, scope_pools=(201, 300)))


def test_a_round_reads_first_the_evidence_no_earlier_challenger_of_the_champion_tried(tmp_path):
    from ole.proposers import Parent, accepted, child_bundle
    reg, evo = _online(tmp_path)
    champ = reg.champion()
    lp = champ.bundle.loop_policy.model_dump(mode="json")
    lp["verification"]["retest_episodes"] = 6
    tried = child_bundle([Parent(champ.ref, champ.bundle)], lp, edge="online", generation=1, proposer="builtin",
                         evidence_ids=("ev-tuning_rounds-0123456789", "ev-verification_miss-abcdef0123"), note="r1")
    evo.e.register(accepted("builtin", "online", [Parent(champ.ref, champ.bundle)], tried), champ.bundle)
    assert evo.tried_detectors(champ) == {"tuning_rounds", "verification_miss"}
    events = run_stream(evo, engine_worker(evo.e))  # rounds after tasks 3 and 6
    for rb in reg.versions("coder"):
        prov = rb.bundle.provenance
        if prov.edge == "online" and prov.parents == (champ.version,) and rb.version > 2:
            assert not {e.split("-")[1] for e in prov.evidence_ids} & {"tuning_rounds", "verification_miss"}
    assert events.decisions


class _Retest8Only(BuiltinProposer):
    """A scripted challenger: retest 8 (+15 % on every task in the fake)."""

    def mutate(self, parent, evidence, *, edge, generation, seed, host=None):
        from ole.proposers import accepted, child_bundle
        lp = parent.bundle.loop_policy.model_dump(mode="json")
        lp["verification"]["retest_episodes"] = 8
        bundle = child_bundle([parent], lp, edge=edge, evidence_ids=(), generation=generation, proposer=self.name,
                              note="scripted")
        return accepted(self.name, edge, [parent], bundle)


def test_a_round_gates_on_the_streams_own_runs_one_rerun_per_pair(tmp_path):
    """gate_on=stream: the round's challenger reruns the next stream tasks its champion works; the
    stream's own runs are the champion side, never rerun; no gate-pool instance is run at all."""
    reg, evo = _online(tmp_path, OnlineConfig(tasks=9, every_k=3), proposer=_Retest8Only())
    events = run_stream(evo, engine_worker(evo.e))
    (decision,) = events.decisions
    assert decision.stats.n_pairs == GATE.min_pairs and decision.verdict == "release"
    rows = [p for _, p in evo.e.store.tasks()]
    stream_ids = {p["trace_id"] for p in rows}
    assert {p.champion.trace_id for p in decision.pairs} <= stream_ids  # the stream's own runs
    assert {p.challenger.trace_id for p in decision.pairs}.isdisjoint(stream_ids)
    assert [p.task.pool_seed for p in decision.pairs] == [TaskSpecOf(p).pool_seed for p in rows[3:9]]
    champ_hash, cand_hash = reg.get("coder@1").bundle.content_hash, reg.get(decision.challenger).bundle.content_hash
    assert len(evo.e.store.results_of(champ_hash)) == 9  # the stream's nine tasks, no champion rerun
    assert len(evo.e.store.results_of(cand_hash)) == 6  # one rerun per pair
    assert not any(p.task.pool_seed in CFG.gate_pools for p in decision.pairs)
    assert not decision.stats.leaked_keys and events.releases == [decision.challenger]
    assert [e.payload.get("stage") for e in reg.events(kind="evaluation")][-1] == "online-r1-stream"
    # the released challenger is staged: a canary watched from the next task on
    assert reg.canaries(evo.e.channel)


def TaskSpecOf(row):
    from ole.trace import TaskSpec
    return TaskSpec.model_validate(row["task"])


def test_a_trial_whose_champion_stops_serving_ends_unjudged(tmp_path):
    reg, evo = _online(tmp_path, OnlineConfig(tasks=12, every_k=3), proposer=_Retest8Only())
    work = engine_worker(evo.e)
    for _ in range(4):  # round 1 after task 3 opens the trial; task 4 is its first pair
        evo.tell(work(evo.ask()))
    from ole.evolve.trial import open_trials
    assert len(open_trials(evo)) == 1
    other = _harmful(reg)
    reg.release(other.ref, reason="by hand")
    evo.tell(work(evo.ask()))  # task 5, worked by the hand release: the trial's pairs cannot grow
    from ole.evolve.store import step
    assert not open_trials(evo) and not evo.events.decisions
    ended = evo.e.store.step(step("trial-end", 1))
    assert ended and "no longer serves" in ended["ended"]


def test_a_stream_of_external_tasks_is_gated_on_the_pools():
    from ole.evolve.trial import stream_gate_ok
    assert stream_gate_ok([{"reproducible": True}, {"reproducible": False}])
    assert not stream_gate_ok([{"reproducible": False}] * 2 + [{"reproducible": True}])
    assert not stream_gate_ok([])


def test_exposure_follows_the_monitors_evidence(tmp_path):
    """A clearly better canary takes more than its starting share of the tasks, a harmful one fewer;
    with adapt_exposure off the share is the release's."""
    from ole.monitor import AnalysisConfig, exposure_after
    cfg = AnalysisConfig()
    assert exposure_after([], cfg, 0.5) == 0.5 and exposure_after([0.0] * 6, cfg, 0.5) == 0.5
    up = [exposure_after([0.15] * k, cfg, 0.5) for k in range(1, 5)]
    down = [exposure_after([-0.4] * k, cfg, 0.5) for k in range(1, 3)]
    assert 0.5 < up[0] < up[1] < up[2] < up[3] <= 0.9 and 0.5 > down[0] > down[1] >= 0.1
    assert exposure_after([0.15] * 4, cfg, 1.0) == 1.0 and exposure_after([-0.4], cfg, 1.0) < 1.0
    reg, evo = _online(tmp_path, OnlineConfig(tasks=40, every_k=100))
    work = engine_worker(evo.e)
    good = _staged(reg, ("verification", "retest_episodes", 8), exposure=0.5)  # +15 % (the fake)
    got = []
    while not evo.events.promotions and len(got) < 30:
        a = evo.ask()
        got.append(a.bundle_ref)
        evo.tell(work(a))
    assert evo.events.promotions
    canary_share = got.count(good) / len(got)
    assert canary_share > 0.5 and got[:2] == [good, good]  # after one +15 % pair the share is above 0.5


def test_a_one_env_gain_on_trial_is_put_on_a_scoped_trial_on_later_tasks_of_that_env(tmp_path):
    """gate_on=stream: the whole change fails its trial (it costs 10 % on acrobot), its trial pairs gain
    on FourRooms, so it is registered for FourRooms and tried again on the stream's *later* FourRooms
    tasks only; there it is released (staged) for that env."""
    from synthetic import one_env_gain_evaluate
    from ole.evolve.store import step
    reg, evo = _online(tmp_path, OnlineConfig(tasks=22, every_k=3), evaluate=one_env_gain_evaluate,
                       proposer=_Retest8Only())
    events = run_stream(evo, engine_worker(evo.e))
    general, scoped = events.decisions
    assert general.verdict != "release" and scoped.verdict == "release"
    four = "gymnasium/MiniGrid-FourRooms-v0"
    assert {p.task.env for p in scoped.pairs} == {four} and scoped.stats.n_pairs == GATE.min_pairs
    chose = {instance_key_of(p) for p in general.pairs}
    assert not chose & {instance_key_of(p) for p in scoped.pairs}  # the pairs that chose the scope never judge it
    trial = evo.e.store.step(step("trial", "1s"))
    assert trial["envs"] == [four] and trial["since"] == 9
    released = reg.get(scoped.challenger).bundle
    assert released.applicability.env_ids == (four,) and released.provenance.edge == "specialization"
    assert events.releases == [scoped.challenger]
    rows = [p for _, p in evo.e.store.tasks()]
    assert {p.champion.trace_id for p in scoped.pairs} <= {p["trace_id"] for p in rows}


def instance_key_of(pair):
    from ole.paired import instance_key
    return instance_key(pair.task, pair.condition)
