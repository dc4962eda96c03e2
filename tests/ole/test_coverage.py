"""Evidence-bounded release scopes: what a gate's pairs covered bounds where its release may serve.

A release never reaches a task its gate did not sample: other hosts, env ids (not whole
families), budgets outside the sampled band, models. Ties show no effect. Registries written
before this rule are bounded on open, as events.
"""
from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from ole.bundle import Applicability, TaskContext, load_bundle_yaml
from ole.coverage import bounded, coverage, evidence_bound
from ole.errors import ValidationError
from ole.gate import GateConfig, decide
from ole.paired import RunResult, make_pair
from ole.registry import Registry
from ole.registry.scopes import features_of
from ole.trace import RunCondition, TaskSpec

ROOT = Path(__file__).resolve().parents[2]
FAMILY = {"gym/halfcheetah5": "generic", "gym/pusher5": "generic", "gym/acrobot": "curated",
          "gym/bipedal": "generic", "gym/continuouscar": "curated"}


def _run(q, tid):
    return RunResult(trace_id=tid, bundle_hash="h", q=q, q_source="normalized", status="completed", verified=True,
                     episodes=32, wall_s=1.0)


def pair(env, r, *, budget=32, pool=201, host="builtin", model=None, seed=0):
    task = TaskSpec(env=env, budget=budget, pool_seed=pool)
    cond = RunCondition(host=host, seed=seed, model=model)
    return make_pair(task, cond, FAMILY.get(env, "generic"), _run(50.0, f"c-{env}-{pool}-{budget}"),
                     _run(50.0 * (1 + r), f"x-{env}-{pool}-{budget}"))


def test_the_bound_lists_sampled_hosts_env_ids_with_an_effect_and_the_budget_band():
    pairs = [pair("gym/halfcheetah5", 0.4, budget=b, pool=p) for b in (32, 128) for p in (201, 202)]
    pairs += [pair("gym/acrobot", 0.0, budget=b, pool=p) for b in (32, 128) for p in (201, 202)]  # ties only
    cov = coverage(pairs)
    assert cov.hosts == ("builtin",) and cov.budgets == (32, 128) and cov.tied_envs == ("gym/acrobot",)
    bound = evidence_bound(cov)
    assert bound.scope_key == "hosts=builtin;envs=gym/halfcheetah5;budget=32-128"
    # families are never granted: bipedal shares `generic` with halfcheetah5 and is still outside
    ctx = lambda env, budget: TaskContext(host="builtin", env=env, family=FAMILY[env], budget=budget)  # noqa: E731
    assert bound.matches_task(ctx("gym/halfcheetah5", 64))
    assert not bound.matches_task(ctx("gym/bipedal", 32))
    assert not bound.matches_task(ctx("gym/acrobot", 32))  # a tie is no effect: the parent keeps it
    assert not bound.matches_task(ctx("gym/halfcheetah5", 256))  # above the sampled band
    assert not bound.matches_task(TaskContext(host="llm", env="gym/halfcheetah5", family="generic", budget=32,
                                              model="openai/gpt-4o"))


def test_one_budget_level_bounds_to_that_level_and_disjoint_bands_keep_the_filled_rectangle():
    only32 = evidence_bound(coverage([pair("gym/pusher5", 0.3, pool=p) for p in (201, 202)]))
    assert (only32.min_budget, only32.max_budget) == (32, 32)
    # halfcheetah5 sampled at 32 and 128, pusher5 only at 32: the band on both is [32, 32]
    mixed = [pair("gym/halfcheetah5", 0.3, budget=b) for b in (32, 128)] + [pair("gym/pusher5", 0.2)]
    b = evidence_bound(coverage(mixed))
    assert b.env_ids == ("gym/halfcheetah5", "gym/pusher5") and (b.min_budget, b.max_budget) == (32, 32)
    # bands that do not meet: the env with most pairs keeps its band, alone
    apart = [pair("gym/halfcheetah5", 0.3, budget=128, pool=p) for p in (201, 202)] + [pair("gym/pusher5", 0.2)]
    b = evidence_bound(coverage(apart))
    assert b.env_ids == ("gym/halfcheetah5",) and (b.min_budget, b.max_budget) == (128, 128)


def test_models_bound_llm_releases_and_all_ties_support_nothing():
    llm = [pair("gym/acrobot", 0.2, host="llm", model="openai/gpt-4o-mini", pool=p) for p in (201, 202)]
    assert evidence_bound(coverage(llm)).model_families == ("gpt-4o-mini",)
    with pytest.raises(ValidationError, match="no effect"):
        evidence_bound(coverage([pair("gym/acrobot", 0.0, pool=p) for p in (201, 202)]))


def test_a_bundle_scope_is_narrowed_to_the_bound_and_refused_when_they_do_not_meet():
    bound = Applicability(hosts=("builtin",), env_ids=("gym/halfcheetah5", "gym/acrobot"), min_budget=32,
                          max_budget=128)
    assert bounded(Applicability(), bound).scope_key == "hosts=builtin;envs=gym/acrobot,gym/halfcheetah5;budget=32-128"
    own = Applicability(env_families=("generic",), max_budget=64)
    narrowed = bounded(own, bound, features_of=features_of)
    assert narrowed.env_ids == ("gym/halfcheetah5",) and (narrowed.min_budget, narrowed.max_budget) == (32, 64)
    with pytest.raises(ValidationError, match="outside the bundle's own scope"):
        bounded(Applicability(hosts=("llm",)), bound)


def test_ties_never_count_as_covering_a_family_and_every_env_must_hold():
    cfg = GateConfig(min_pairs=6, min_families=2, min_win_rate=0.0, cost_kappa={}, max_pairs=None)
    # the one-env gain of issue 23: pusher5 gains, acrobot and halfcheetah5 are bit-identical
    pairs = [pair("gym/pusher5", 0.45, pool=p) for p in (201, 202, 203, 204)]
    pairs += [pair(e, 0.0, pool=p) for e in ("gym/acrobot", "gym/halfcheetah5") for p in (201, 202, 203, 204)]
    d = decide(pairs, cfg, champion="coder@1", challenger="coder@2")
    assert d.verdict == "indecisive" and d.stats.informative_families == ("generic",)
    assert any("only ties, i.e. no effect, on ['curated']" in r for r in d.reasons)
    assert d.bound == "hosts=builtin;envs=gym/pusher5;budget=32-32"
    # a gain on one env never pays for a loss on another the release would serve
    mixed = [pair("gym/pusher5", 0.45, pool=p) for p in (201, 202, 203)]
    mixed += [pair("gym/acrobot", -0.05, pool=p) for p in (201, 202, 203)]
    d = decide(mixed, cfg.model_copy(update={"min_families": 1}), champion="coder@1", challenger="coder@2")
    tail = next(c for c in d.criteria if c.name == "tail")
    assert not tail.passed and any("env gym/acrobot mean r -0.0500" in r for r in tail.reasons)


# ----- the registry: releases take the bounded scope; a task outside gets the parent ---------------

@pytest.fixture
def reg(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
    with Registry(root) as r:
        yield r


def _child(reg, **loop):
    seed = reg.get("coder@1").bundle.model_dump(mode="json")
    for path, value in loop.items():
        comp, field = path.split("__")
        seed["loop_policy"][comp][field] = value
    seed["provenance"] = {"parents": [1], "edge": "manual", "mode": "manual"}
    return reg.register(load_bundle_yaml(json.dumps(seed)), parents=[1])


def _decide(pairs, challenger):
    cfg = GateConfig(min_pairs=4, min_families=1, min_win_rate=0.0, cost_kappa={}, max_pairs=None)
    d = decide(pairs, cfg, champion="coder@1", challenger=challenger)
    return {**d.model_dump(mode="json"), "accepted": d.verdict == "release"}


def _ctx(env, budget, host="builtin"):
    return TaskContext(host=host, env=env, family=FAMILY[env], budget=budget)


def test_a_release_is_bounded_by_its_gate_and_a_task_outside_gets_the_parent(reg):
    ref = _child(reg, action__episodes_per_submit=1).ref
    decision = _decide([pair("gym/halfcheetah5", 0.5, pool=p) for p in (201, 202, 203, 204)], ref)
    assert decision["verdict"] == "release"
    seq = reg.record_gate_decision(ref, decision)
    reg.release(ref, reason="gate passed")
    event = reg.events(kind="release")[-1]
    assert event.payload["scope"] == "hosts=builtin;envs=gym/halfcheetah5;budget=32-32"
    assert event.payload["evidence"]["decision_seq"] == seq
    assert reg.select("default", _ctx("gym/halfcheetah5", 32)).ref == ref
    for outside in (_ctx("gym/halfcheetah5", 128), _ctx("gym/bipedal", 32), _ctx("gym/acrobot", 32),
                    _ctx("gym/halfcheetah5", 32, host="command")):
        chosen = reg.select("default", outside)
        assert chosen.ref == "coder@1" and chosen.scope == "general", outside
    champs = {c.scope: c for c in reg.scope_champions()}
    assert "bounded by gate decision" in champs["hosts=builtin;envs=gym/halfcheetah5;budget=32-32"].evidence
    assert reg.fsck(repair=False).ok  # a bounded scope lies inside the bundle's own: consistent


def test_a_release_without_gate_evidence_keeps_its_own_scope_and_says_so(reg):
    ref = _child(reg, action__episodes_per_submit=2).ref
    reg.release(ref, reason="a person's word")
    event = reg.events(kind="release")[-1]
    assert event.payload["scope"] == "general" and event.payload["evidence"]["bound"] is None
    assert "without gate evidence" in reg.scope_champions()[0].evidence


def test_a_gate_whose_pairs_all_tie_supports_no_release(reg):
    ref = _child(reg, action__episodes_per_submit=2).ref
    reg.record_gate_decision(ref, {**_decide([pair("gym/acrobot", 0.0, pool=p) for p in (201, 202, 203, 204)], ref),
                                   "accepted": True})
    with pytest.raises(ValidationError, match="no effect"):
        reg.release(ref, reason="ties")
    assert not reg.events(kind="release")


def test_a_registry_released_before_bounds_is_bounded_on_open_once_as_events(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root / "coder.yaml")
    with Registry(root) as reg:
        ref = _child(reg, action__episodes_per_submit=1).ref
        pairs = [pair("gym/halfcheetah5", 0.5, pool=p) for p in (201, 202)]
        pairs += [pair("gym/acrobot", 0.0, pool=p) for p in (201, 202)]
        reg.record_gate_decision(ref, _decide(pairs, ref))
    # the release as the previous code wrote it: the bundle's own scope (general), no evidence
    db = sqlite3.connect(root / ".registry" / "registry.sqlite3")
    db.execute("INSERT INTO events (ts, kind, name, version, channel, payload) VALUES (?, 'release', 'coder', 2, "
               "'default', ?)", ("2026-11-30T12:00:00+00:00",
                                 json.dumps({"reason": "old gate", "forced": False, "scope": "general",
                                             "active": "coder@1"})))
    db.commit()
    db.close()
    with Registry(root) as reg:
        assert len(reg.bounded_on_open) == 1 and "bounded on open" in reg.bounded_on_open[0]
        kinds = [(e.kind, e.payload.get("scope")) for e in reg.events()[-2:]]
        assert kinds == [("rollback", "general"),
                         ("release", "hosts=builtin;envs=gym/halfcheetah5;budget=32-32")]
        assert reg.select("default", _ctx("gym/halfcheetah5", 32)).ref == ref
        assert reg.select("default", _ctx("gym/halfcheetah5", 128)).ref == "coder@1"
        assert reg.select("default", _ctx("gym/acrobot", 32)).ref == "coder@1"
        n = len(reg.events())
        assert reg.fsck(repair=False).ok
    with Registry(root) as again:  # bounded once: nothing more on the next open
        assert again.bounded_on_open == [] and len(again.events()) == n + 0


def test_champion_show_and_lineage_show_say_what_bounds_a_release(reg, capsys):
    from ole.cli import main
    ref = _child(reg, action__episodes_per_submit=1).ref
    pairs = [pair("gym/halfcheetah5", 0.5, budget=b, pool=p) for b in (32, 128) for p in (201, 202)]
    pairs += [pair("gym/acrobot", 0.0, budget=b, pool=p) for b in (32, 128) for p in (201, 202)]
    seq = reg.record_gate_decision(ref, _decide(pairs, ref))
    reg.release(ref, reason="gate passed")
    root = str(reg.root)
    assert main(["--root", root, "champion", "show"]) == 0
    out = capsys.readouterr().out
    assert "hosts=builtin;envs=gym/halfcheetah5;budget=32-128" in out and f"gate decision #{seq}" in out
    assert "gym/acrobot [32: tie" in out  # the tie is shown as no effect
    assert main(["--root", root, "champion", "show", "--env", "gym/halfcheetah5", "--budget", "128"]) == 0
    routed = capsys.readouterr().out
    assert f": {ref} (scope hosts=builtin;envs=gym/halfcheetah5;budget=32-128)" in routed and "evidence:" in routed
    assert main(["--root", root, "champion", "show", "--env", "gym/bipedal", "--budget", "128"]) == 0
    assert ": coder@1 (scope general)" in capsys.readouterr().out  # same family, never sampled: the parent
    assert main(["--root", root, "lineage", "show"]) == 0
    assert f"released for hosts=builtin;envs=gym/halfcheetah5;budget=32-128 (bounded by gate decision #{seq})" \
        in capsys.readouterr().out
