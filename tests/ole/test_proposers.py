"""Proposers: evidence-aimed mutation, recombination, 1000 random proposals, LLM replies."""
from __future__ import annotations

import random

import pytest

from ole import evidence
from ole.bundle import Bundle, dump_bundle_yaml, load_bundle_yaml
from ole.llm import LLMClient
from ole.loop_policy import LoopPolicy
from ole.proposers import Parent
from ole.proposers.builtin import BuiltinProposer, fields
from ole.proposers.llm import LLMProposer
from synthetic import make_trace

SEED_BUNDLE = Bundle(name="default", loop_policy=LoopPolicy())
CHAMP = Parent("default@1", SEED_BUNDLE)


def _evidence():
    traces = [make_trace("a", [10.0, None, None, 12.0, None, 13.0]),
              make_trace("b", [10.0, 20.0, 15.0, 16.0, 14.0, 15.0, 12.0, 13.0], final=5.0)]
    return evidence.extract(traces)


def test_mutation_targets_the_evidence_and_cites_it():
    ev = _evidence()
    p = BuiltinProposer().mutate(CHAMP, ev, edge="offline_mutation", generation=1, seed=3)
    assert p.valid and p.evidence_ids and set(p.evidence_ids) <= {e.evidence_id for e in ev}
    b = p.bundle
    assert b.provenance.parents == (1,) and b.provenance.edge == "offline_mutation"
    assert b.content_hash != SEED_BUNDLE.content_hash
    cited = next(e for e in ev if e.evidence_id == p.evidence_ids[0])
    assert cited.component in p.note or any(h.split(".")[0] in p.note for h in cited.hints)


def test_mutation_is_deterministic_per_seed():
    ev = _evidence()
    a = BuiltinProposer().mutate(CHAMP, ev, edge="online", generation=2, seed=5)
    b = BuiltinProposer().mutate(CHAMP, ev, edge="online", generation=2, seed=5)
    assert a == b


def test_section_recombination_takes_whole_components():
    a = BuiltinProposer().mutate(CHAMP, [], edge="offline_mutation", generation=1, seed=1).bundle
    b = BuiltinProposer().mutate(CHAMP, [], edge="offline_mutation", generation=1, seed=2).bundle
    pa = Parent("default@2", a.model_copy(update={"loop_policy": a.loop_policy.model_copy(
        update={"stopping": a.loop_policy.stopping.model_copy(update={"mode": "finish_early"})})}))
    pb = Parent("default@3", b.model_copy(update={"loop_policy": b.loop_policy.model_copy(
        update={"memory": b.loop_policy.memory.model_copy(update={"top_k_programs": 9})})}))
    p = BuiltinProposer().recombine(pa, pb, [], generation=2, seed=0)
    assert p.valid, p.rejection
    child = p.bundle.loop_policy
    for comp in ("observation", "planning", "memory", "action", "verification", "recovery", "stopping", "budget"):
        assert getattr(child, comp) in (getattr(pa.bundle.loop_policy, comp), getattr(pb.bundle.loop_policy, comp))
    same = BuiltinProposer().recombine(pa, Parent("default@4", pa.bundle), [], generation=2, seed=0)
    assert not same.valid and "differ" in same.rejection


def test_thousand_random_proposals_are_valid_or_cleanly_rejected():
    rng = random.Random(0)
    ev = _evidence()
    bogus = ev[0].model_copy(update={"hints": ("budget.synthesis_fraction=0.99", "nope.field:up",
                                               "stopping.mode=sometimes", "action.population=1000")})
    pool = [*ev, bogus]
    parents = [CHAMP]
    valid = rejected = 0
    for i in range(1000):
        parent = rng.choice(parents)
        items = rng.sample(pool, rng.randint(0, len(pool)))
        p = BuiltinProposer().mutate(parent, items, edge="offline_mutation", generation=1, seed=i)
        if p.valid:
            b = p.bundle
            if i % 50 == 0:
                assert load_bundle_yaml(dump_bundle_yaml(b)) == b
            valid += 1
            if len(parents) < 40:
                parents.append(Parent(f"default@{len(parents) + 1}", b))
        else:
            assert p.rejection
            rejected += 1
    assert valid > 900 and valid + rejected == 1000


def test_every_field_is_reachable_by_exploration():
    touched = set()
    for seed in range(400):
        p = BuiltinProposer().mutate(CHAMP, [], edge="offline_mutation", generation=0, seed=seed)
        if p.valid:
            touched |= {line.split(":")[0].strip() for line in p.note.split(";")}
    assert set(fields()) <= touched


GOOD_REPLY = """Here you go.
```yaml
loop_policy:
  stopping: {mode: finish_early, patience_submits: 5}
evidence_ids: [%s]
note: stop at plateaus
```
"""


@pytest.mark.parametrize("reply,ok,reason", [
    ("no yaml at all", False, "no ```yaml block"),
    ("```yaml\nloop_policy: [1, 2]\n```", False, "no loop_policy mapping"),
    ("```yaml\nloop_policy:\n  stopping: {mode: sometimes}\n```", False, "stopping.mode"),
    ("```yaml\nloop_policy:\n  stoping: {}\n```", False, "unknown field"),
    ("```yaml\nloop_policy: {}\nevidence_ids: [ev-made-up]\n```", False, "unknown evidence"),
    ("```yaml\nloop_policy: {}\n```", False, "equals the parent"),
    ("```yaml\nloop_policy: {a: &x 1, b: *x}\n```", False, ""),
    ("GOOD", True, ""),
])
def test_llm_replies_become_bundles_or_recorded_rejections(reply, ok, reason):
    ev = _evidence()
    if reply == "GOOD":
        reply = GOOD_REPLY % ev[0].evidence_id
    client = LLMClient(model="scripted", mode="scripted", script=[reply])
    p = LLMProposer(client).mutate(CHAMP, ev, edge="online", generation=1, seed=0)
    assert p.valid is ok, p.rejection
    assert p.llm_request and p.llm_request.startswith("sha256:")
    if ok:
        assert p.bundle.loop_policy.stopping.mode == "finish_early"
        assert p.evidence_ids == (ev[0].evidence_id,)
    else:
        assert reason in p.rejection


def test_llm_failure_is_a_rejection_not_a_crash():
    client = LLMClient(model="scripted", mode="scripted", script=[])
    p = LLMProposer(client).mutate(CHAMP, _evidence(), edge="online", generation=1, seed=0)
    assert not p.valid and "LLM call failed" in p.rejection


def test_llm_proposals_replay_from_the_recorded_log(tmp_path):
    ev = _evidence()
    log = tmp_path / "calls.jsonl"
    live = LLMClient(model="scripted", mode="scripted", script=[GOOD_REPLY % ev[0].evidence_id], log_path=log)
    first = LLMProposer(live).mutate(CHAMP, ev, edge="online", generation=1, seed=0)
    replay = LLMClient(model="scripted", mode="replay", store_path=log)
    again = LLMProposer(replay).mutate(CHAMP, ev, edge="online", generation=1, seed=0)
    assert again.bundle == first.bundle and again.llm_request == first.llm_request


# ----- hints with targets, multi-field moves, the shared search space, baselines -------------------
import json  # noqa: E402

from ole.proposers import space  # noqa: E402
from ole.errors import ValidationError  # noqa: E402
from ole.proposers.builtin import apply_hint  # noqa: E402


def test_hint_grammar_has_factors_and_typed_targets():
    p = LoopPolicy().model_dump(mode="json")
    assert "4 -> 2" in apply_hint(p, "action.episodes_per_submit:x0.5")
    apply_hint(p, "budget.confirmation_fraction=0")
    assert p["budget"]["confirmation_fraction"] == 0.0 and isinstance(p["budget"]["confirmation_fraction"], float)
    for bad in ("action.population:x-1", "action.population:xfoo", "action.population:sideways"):
        with pytest.raises(Exception, match="bad hint"):
            apply_hint(p, bad)
    # moving a field that holds no number is a recorded rejection (ValidationError), never a crash
    for bad in ("stopping.mode:up", "planning.phases:x2", "stopping.best_last:down"):
        with pytest.raises(ValidationError, match="bad hint"):
            apply_hint(p, bad)


def test_mutations_move_several_fields_together_where_evidence_says_so():
    item = _evidence()[0].model_copy(update={"hints": ("action.population=3", "action.episodes_per_submit=2",
                                                       "budget.confirmation_fraction=0.0")})
    moved = set()
    for seed in range(40):
        p = BuiltinProposer(host="builtin").mutate(CHAMP, [item], edge="offline_mutation", generation=1, seed=seed)
        diff = {c + "." + f for c in ("action", "budget") for f, v in getattr(p.bundle.loop_policy, c)
                if v != getattr(getattr(SEED_BUNDLE.loop_policy, c), f)}
        moved.add(len(diff & {"action.population", "action.episodes_per_submit", "budget.confirmation_fraction"}))
    assert max(moved) == 3 and 1 in moved  # whole packages and parts of them


def test_a_later_item_never_overwrites_a_field_an_earlier_item_moved():
    first = _evidence()[0].model_copy(update={"evidence_id": "ev-a", "hints": ("action.episodes_per_submit=1",
                                                                              "action.population=3")})
    second = _evidence()[0].model_copy(update={"evidence_id": "ev-b", "hints": ("action.episodes_per_submit=8",)})
    whole = 0
    for seed in range(60):
        p = BuiltinProposer(host="builtin").mutate(CHAMP, [first, second], edge="offline_mutation", generation=1,
                                                   seed=seed)
        notes = p.bundle.provenance.note
        assert notes.count("action.episodes_per_submit") <= 1 + notes.count("(exploration)")
        a = p.bundle.loop_policy.action
        whole += a.episodes_per_submit == 1 and a.population == 3
    assert whole > 0  # an item's hints also travel together


def test_the_builtin_host_never_moves_fields_it_does_not_read():
    for seed in range(200):
        p = BuiltinProposer(host="builtin").mutate(CHAMP, [], edge="offline_mutation", generation=2, seed=seed)
        b = p.bundle.loop_policy.budget
        assert (b.max_llm_calls, b.max_tokens, b.max_usd) == (64, 400000, 5.0)


def test_space_samples_are_valid_and_cover_every_dimension():
    rng = random.Random(0)
    seen: dict[str, set] = {}
    for _ in range(600):
        p = space.sample_policy(rng, "builtin")
        LoopPolicy.model_validate_json(json.dumps(p))
        for d in space.dims("builtin"):
            seen.setdefault(d.path, set()).add(repr(space.get(p, d)))
    assert all(len(v) >= 2 for v in seen.values())
    assert "0" in seen["verification.retest_episodes"]  # zero is reachable on a log scale starting at 0


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["random", "tpe"])
def test_baselines_propose_valid_bundles_and_tpe_learns_from_observations(kind):
    from ole.proposers.baselines import RandomProposer, TPEProposer
    cls = RandomProposer if kind == "random" else TPEProposer
    a, b = cls(seed=3), cls(seed=3)
    for i in range(30):
        pa = a.mutate(CHAMP, [], edge="offline_mutation", generation=1, seed=i)
        pb = b.mutate(CHAMP, [], edge="offline_mutation", generation=1, seed=i)
        assert pa.valid and pa.bundle.content_hash == pb.bundle.content_hash  # seeded: reproducible
        for prop, obj in ((pa, a), (pb, b)):
            score = -abs(prop.bundle.loop_policy.action.episodes_per_submit - 2) / 10
            obj.observe("x@2", prop.bundle, {"mean_r": score}, rung=0, final=True)
    if kind == "tpe":
        told = [t for t in a.study.trials if t.value is not None]
        assert len(told) == 30
        late = [abs(a.mutate(CHAMP, [], edge="offline_mutation", generation=2, seed=100 + i).bundle
                    .loop_policy.action.episodes_per_submit - 2) for i in range(10)]
        early = [abs(t.params["action.episodes_per_submit"] - 2) for t in a.study.trials[:10]]
        assert sum(late) < sum(early)  # TPE concentrates where the observed values were high


def test_the_proposer_factory_builds_an_llm_client_under_the_runs_caps(tmp_path):
    """`--max-tokens`/`--max-usd` bind the proposer's own client too (it refuses a call past them)."""
    import json

    from ole.cost import CostCaps
    from ole.llm import LLMCapReached
    from ole.proposers.factory import make_proposer
    from ole.proposers.baselines import TPEProposer
    from ole.proposers.builtin import BuiltinProposer
    script = tmp_path / "script.jsonl"
    script.write_text(json.dumps([{"text": "no bundle here", "prompt_tokens": 90, "completion_tokens": 30}] * 2))
    made = make_proposer(f"scripted:{script}", log_path=tmp_path / "calls.jsonl", caps=CostCaps(tokens=100, usd=2.0))
    assert (made.client.caps.tokens, made.client.caps.usd) == (100, 2.0)
    made.client.complete([{"role": "user", "content": "hi"}])  # 120 tokens: the cap is reached after it
    with pytest.raises(LLMCapReached):
        made.client.complete([{"role": "user", "content": "again"}])
    free = make_proposer(f"scripted:{script}")  # the control: no caps, both calls answered
    free.client.complete([{"role": "user", "content": "hi"}])
    assert free.client.complete([{"role": "user", "content": "again"}]).text == "no bundle here"
    assert isinstance(make_proposer("builtin"), BuiltinProposer) and isinstance(make_proposer("tpe"), TPEProposer)
