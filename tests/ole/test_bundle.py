"""Bundles: every seed round-trips, hashes ignore provenance, references have one grammar."""
from __future__ import annotations

from pathlib import Path

import pytest

from ole.bundle import (Applicability, Bundle, bundle_from_data, diff_bundles, dump_bundle_yaml, format_ref,
                        validate_data,
                        load_bundle_yaml, parse_ref)
from ole.errors import NotFound, ValidationError
from ole.loop_policy import LoopPolicy

BUNDLES = sorted((Path(__file__).resolve().parents[2] / "bundles").glob("*.yaml"))


def test_seed_bundles_exist():
    assert {p.stem for p in BUNDLES} >= {"coder", "coder-llm"}


@pytest.mark.parametrize("path", BUNDLES, ids=lambda p: p.name)
def test_every_bundle_round_trips_yaml_model_yaml(path):
    bundle = load_bundle_yaml(path)
    assert bundle.name == path.stem
    text = dump_bundle_yaml(bundle)
    again = load_bundle_yaml(text)
    assert again == bundle
    assert dump_bundle_yaml(again) == text
    assert again.content_hash == bundle.content_hash


def test_seed_applicability():
    coder = load_bundle_yaml(BUNDLES[[p.stem for p in BUNDLES].index("coder")])
    for host in ("builtin", "llm", "command"):
        assert coder.applicability.matches(host, "gym/acrobot", "classic_control", 64, None)
    llm = load_bundle_yaml(BUNDLES[[p.stem for p in BUNDLES].index("coder-llm")])
    assert llm.applicability.matches("llm", "gym/acrobot", "classic_control", 64, "openai/gpt-4o-mini")
    assert not llm.applicability.matches("builtin", "gym/acrobot", "classic_control", 64, None)


def _bundle(**kw) -> Bundle:
    return bundle_from_data({"name": "coder", "loop_policy": {}, **kw})


def test_content_hash_covers_policy_and_applicability_not_provenance():
    base = _bundle()
    assert _bundle(provenance={"proposer": "llm:x", "note": "other"}).content_hash == base.content_hash
    assert _bundle(description="other words").content_hash == base.content_hash
    assert _bundle(loop_policy={"action": {"step_size": 0.5}}).content_hash != base.content_hash
    assert _bundle(applicability={"hosts": ["llm"]}).content_hash != base.content_hash
    assert len(base.content_hash) == 64
    # -0.0 is 0.0: the same setting, the same hash (it registered as a new version `bundle diff` called the same)
    assert _bundle(loop_policy={"verification": {"margin": -0.0}}).content_hash == \
        _bundle(loop_policy={"verification": {"margin": 0.0}}).content_hash


@pytest.mark.parametrize("kw, args, expected", [
    ({}, ("command", "box2d/lunar-lander", "box2d", 5, "any/model"), True),
    ({"hosts": ["builtin"]}, ("llm", "gym/acrobot", "classic_control", 64, "gpt-4o"), False),
    ({"env_families": ["classic_control"]}, ("builtin", "gym/acrobot", "classic_control", 64, None), True),
    ({"env_families": ["classic_control"]}, ("builtin", "box2d/lunar-lander", "box2d", 64, None), False),
    ({"env_families": ["classic_control"], "env_ids": ["box2d/lunar-lander"]},
     ("builtin", "box2d/lunar-lander", "box2d", 64, None), True),
    ({"min_budget": 32}, ("builtin", "gym/acrobot", "classic_control", 16, None), False),
    ({"max_budget": 32}, ("builtin", "gym/acrobot", "classic_control", 64, None), False),
    ({"max_budget": 64}, ("builtin", "gym/acrobot", "classic_control", 64, None), True),
    ({"model_families": ["claude"]}, ("llm", "gym/acrobot", "classic_control", 64, "anthropic/claude-3-5"), True),
    ({"model_families": ["claude"]}, ("llm", "gym/acrobot", "classic_control", 64, "openai/gpt-4o"), False),
    ({"model_families": ["claude"]}, ("builtin", "gym/acrobot", "classic_control", 64, None), False),
])
def test_applicability_matches(kw, args, expected):
    assert validate_data(Applicability, kw).matches(*args) is expected


@pytest.mark.parametrize("data, message", [
    ({"name": "coder", "loop_policy": {}, "extra": 1}, "extra: unknown field"),
    ({"name": "Coder", "loop_policy": {}}, "name: String should match pattern"),
    ({"name": "coder"}, "loop_policy: Field required"),
    ({"name": "coder", "loop_policy": {}, "applicability": {"hosts": []}}, "hosts must name at least one"),
    ({"name": "coder", "loop_policy": {}, "applicability": {"hosts": ["robot"]}}, "applicability.hosts.0"),
    ({"name": "coder", "loop_policy": {}, "applicability": {"min_budget": 10, "max_budget": 5}}, "below min_budget"),
    ({"name": "coder", "loop_policy": {}, "provenance": {"parents": [1]}}, "needs 0 parent(s)"),
    ({"name": "coder", "loop_policy": {}, "provenance": {"parents": [1], "edge": "recombination",
                                                         "mode": "offline"}}, "needs 2 parent(s)"),
    ({"name": "coder", "loop_policy": {}, "provenance": {"parents": [1], "edge": "online"}},
     "belongs to mode 'online'"),
    ({"name": "coder", "loop_policy": {}, "provenance": {"parents": [2, 2], "edge": "recombination",
                                                         "mode": "offline"}}, "distinct"),
    ({"name": "coder", "loop_policy": {}, "provenance": {"created_at": "2026-01-01T00:00:00"}}, "time zone"),
])
def test_invalid_bundles_are_rejected_with_the_field(data, message):
    with pytest.raises(ValidationError) as info:
        bundle_from_data(data, source="b.yaml")
    assert message in info.value.message


def test_unknown_key_in_yaml_is_an_error_not_ignored():
    text = dump_bundle_yaml(_bundle()).replace("  recovery:\n", "  recovery:\n    on_timeout: retry\n")
    with pytest.raises(ValidationError, match="loop_policy.recovery.on_timeout: unknown field"):
        load_bundle_yaml(text)


def test_missing_file_is_not_found(tmp_path):
    with pytest.raises(NotFound):
        load_bundle_yaml(tmp_path / "nope.yaml")


@pytest.mark.parametrize("ref, parsed", [("coder", ("coder", None)), ("coder@3", ("coder", 3)),
                                         ("coder-llm@12", ("coder-llm", 12)), (" x_1@1 ", ("x_1", 1))])
def test_parse_ref(ref, parsed):
    assert parse_ref(ref) == parsed
    if parsed[1]:
        assert format_ref(*parsed) == ref.strip()


@pytest.mark.parametrize("ref", ["Coder", "coder@", "coder@0", "coder@-1", "coder@x", "@1", "a@1@2", "", "1abc"])
def test_bad_refs_explain_the_grammar(ref):
    with pytest.raises(ValidationError, match="expected NAME or NAME@VERSION"):
        parse_ref(ref)


def test_diff_is_per_component():
    a = _bundle()
    b = _bundle(loop_policy={"action": {"step_size": 0.5}, "stopping": {"mode": "finish_early"}},
                applicability={"hosts": ["llm"]})
    changes = {(c.component, c.field): (c.old, c.new) for c in diff_bundles(a, b)}
    assert changes == {("action", "step_size"): (0.3, 0.5), ("stopping", "mode"): ("spend_all", "finish_early"),
                       ("applicability", "hosts"): (["builtin", "llm", "command"], ["llm"])}
    assert diff_bundles(a, a) == []
    assert LoopPolicy() == a.loop_policy


# ----- content hashes survive schema additions ------------------------------------------------------
FIRST_SCHEMA_FIELDS = {
    "observation": {"summary_fields", "worst_k_episodes", "trajectory_window", "read_stdout", "max_context_chars"},
    "planning": {"phases", "max_mechanisms", "plateau_submits", "on_plateau"},
    "memory": {"top_k_programs", "edit_log_size", "carry_lessons"},
    "action": {"episodes_per_submit", "index_selection", "step_size", "population", "edit_granularity"},
    "verification": {"static_checks", "retest_episodes", "margin", "matched_comparison"},
    "recovery": {"on_error_verdict", "on_regression", "max_retries"},
    "stopping": {"mode", "patience_submits", "reserve_episodes"},
    "budget": {"synthesis_fraction", "confirmation_fraction", "max_llm_calls", "max_tokens", "max_usd",
               "wall_time_s"},
}
"""The loop-policy fields of the first schema (every registry made before an addition hashes over these)."""


def test_every_added_field_is_hash_neutral_at_its_default():
    from ole.loop_policy import COMPONENTS, HASH_NEUTRAL_DEFAULTS, LoopPolicy
    lp = LoopPolicy()
    for comp in COMPONENTS:
        for field, info in type(getattr(lp, comp)).model_fields.items():
            path = f"{comp}.{field}"
            if field not in FIRST_SCHEMA_FIELDS[comp]:
                assert path in HASH_NEUTRAL_DEFAULTS, f"{path} was added: list it in HASH_NEUTRAL_DEFAULTS"
                assert getattr(getattr(lp, comp), field) == HASH_NEUTRAL_DEFAULTS[path], \
                    f"{path}: its default must reproduce the old behaviour (the neutral value)"


def test_the_seed_bundle_hash_is_stable_across_schema_additions():
    seed = load_bundle_yaml(Path(__file__).resolve().parents[2] / "bundles" / "coder.yaml")
    assert seed.content_hash == "d07e336f3eae47dac71c55c8c3075f56b96b7dfbe71607649368ab539f2b9f7c"
    moved = seed.model_copy(update={"loop_policy": seed.loop_policy.model_copy(update={
        "verification": seed.loop_policy.verification.model_copy(update={"stderr_multiple": 0.0})})})
    assert moved.content_hash != seed.content_hash  # a non-neutral value is part of the content
