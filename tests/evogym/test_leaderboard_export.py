"""Our `leaderboard-results/v1` export passes EvoPolicyGym main's validator rules (issue 31),
ported as `leaderboard_rules.py`; upstream's own twelve published files pass the same port
(positive control), and each rule refuses what it should (negative controls)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from evogym import leaderboard
from evogym.finalize import run_record_config
from evogym.host import make_config
from leaderboard_rules import LeaderboardError, validate_results, validate_suite_coverage

FIXTURES = sorted((Path(__file__).parent / "data" / "upstream_leaderboards").glob("*.json"))


def test_there_are_twelve_upstream_files():
    assert len(FIXTURES) == 12


@pytest.mark.parametrize("path", FIXTURES, ids=[p.stem for p in FIXTURES])
def test_upstream_s_own_files_pass_the_ported_rules(path):
    doc = json.loads(path.read_text())
    validate_results(doc, path.name)
    validate_suite_coverage(path.stem, doc, path.name)


def _env(doc: dict) -> dict:
    return doc["environments"][0]


MUTATIONS = [
    ("schema", lambda d: d.update(schema="evopolicygym/leaderboard-results/v2"), "unsupported"),
    ("final_reruns", lambda d: d.pop("final_reruns"), "final_reruns"),
    ("final_reruns_negative", lambda d: d.update(final_reruns=-1), "final_reruns"),
    ("generated_at_blank", lambda d: d.update(generated_at="  "), "generated_at"),
    ("no_environments", lambda d: d.update(environments=[]), "environments must not be empty"),
    ("label_without_zh", lambda d: d["test_configurations"][0]["label"].pop("zh"), "label.zh"),
    ("parameters_null", lambda d: d["test_configurations"][0]["parameters"].update(x=None), "parameter x"),
    ("parameters_nested", lambda d: d["test_configurations"][0]["parameters"].update(x={"a": 1}), "parameter x"),
    ("duplicate_configuration", lambda d: d["test_configurations"].append(copy.deepcopy(d["test_configurations"][0])),
     "duplicate test configuration"),
    ("env_display", lambda d: _env(d).pop("display"), "environment.display"),
    ("env_category", lambda d: _env(d).pop("category"), "environment.category"),
    ("env_summary", lambda d: _env(d).update(summary="text"), "environment.summary"),
    ("env_order", lambda d: _env(d).update(order=-1), "order"),
    ("env_direction", lambda d: _env(d).update(score_direction="up"), "score direction"),
    ("env_places", lambda d: _env(d).update(score_decimal_places=13), "score_decimal_places"),
    ("env_half_configured", lambda d: _env(d).pop("default_configuration_id"), "declared together"),
    ("env_unknown_configuration", lambda d: _env(d).update(configuration_ids=["nope"], default_configuration_id="nope"),
     "unknown configuration"),
    ("entry_display", lambda d: d["entries"][0].pop("display"), "entry.display"),
    ("entry_kind", lambda d: d["entries"][0].update(kind="human"), "entry kind"),
    ("thinking_effort_null", lambda d: d["entries"][0].update(thinking_effort=None), "thinking_effort"),
    ("score_not_configured", lambda d: d["entries"][0]["scores"].update({_env(d)["id"]: 1.0}), "must be an object"),
    ("score_unknown_env", lambda d: d["entries"][0]["scores"].update(nowhere=1.0), "unknown nowhere"),
    ("score_infinite", lambda d: d["entries"][0]["scores"][_env(d)["id"]].update(
        {_env(d)["default_configuration_id"]: float("inf")}), "must be finite"),
    ("rollout_path", lambda d: d["policy_rollouts"][0].update(artifact="../x.gif"), "site-absolute"),
    ("rollout_media", lambda d: d["policy_rollouts"][0].update(media_type="video/mp4"), "image/gif"),
]


@pytest.mark.parametrize("mutate, needle", [m[1:] for m in MUTATIONS], ids=[m[0] for m in MUTATIONS])
def test_each_rule_refuses_what_it_should(mutate, needle):
    doc = json.loads((FIXTURES[0].parent / "minigrid-v1.json").read_text())
    mutate(doc)
    with pytest.raises(LeaderboardError, match=needle):
        validate_results(doc, "minigrid-v1.json")


def test_coverage_wants_every_environment_scored():
    doc = json.loads((FIXTURES[0].parent / "minigrid-v1.json").read_text())
    doc["entries"][0]["scores"] = {}
    with pytest.raises(LeaderboardError, match="is missing"):
        validate_suite_coverage("minigrid-v1", doc, "minigrid-v1.json")


def run_doc(env: str, profile: str, score: float | None, status: str = "completed") -> dict:
    """A run.json's fields the export reads, with the config exactly as finalize writes it."""
    return {"profile": profile, "config": run_record_config(make_config(env, profile)),
            "outcome": {"status": status, "final_score": score}}


def test_our_export_passes_the_ported_rules():
    runs = {"gym/acrobot": run_doc("gym/acrobot", "strict", -81.5),
            "gymnasium/MiniGrid-FourRooms-v0": run_doc("gymnasium/MiniGrid-FourRooms-v0", "strict", 0.61),
            "gym/pusher5": run_doc("gym/pusher5", "strict", None, "error")}
    doc = leaderboard.results_v1(runs, config_id="strict-128", generated_at="2026-08-09T00:00:00Z",
                                 entry={"id": "ours", "harness": "command", "kind": "agent", "thinking_effort": None})
    json.dumps(doc, allow_nan=False)
    validate_results(doc, "ours.json")
    assert doc["final_reruns"] == 1 and "thinking_effort" not in doc["entries"][0]
    by_id = {c["id"]: c for c in doc["test_configurations"]}
    assert set(by_id) == {"strict-128-a64", "strict-128-a128"}  # MiniGrid's assessment is 128 episodes
    assert by_id["strict-128-a128"]["parameters"]["assessment_episodes"] == 128
    assert by_id["strict-128-a64"]["parameters"]["finish_budget_policy"] == "require_budget_exhaustion"
    envs = {e["id"]: e for e in doc["environments"]}
    assert envs["gymnasium/MiniGrid-FourRooms-v0"]["default_configuration_id"] == "strict-128-a128"
    assert envs["gym/acrobot"]["display"] == "Acrobot" and envs["gym/acrobot"]["category"] == "Classic control"
    assert doc["entries"][0]["scores"] == {"gym/acrobot": {"strict-128-a64": -81.5},
                                           "gymnasium/MiniGrid-FourRooms-v0": {"strict-128-a128": 0.61}}
    with pytest.raises(LeaderboardError, match="missing gym/pusher5"):  # an unscored run is not hidden
        validate_suite_coverage("ours", doc, "ours.json")
    del runs["gym/pusher5"]
    doc = leaderboard.results_v1(runs, config_id="strict-128", generated_at="2026-08-09T00:00:00Z",
                                 entry={"id": "ours", "harness": "codex", "thinking_effort": "high"})
    validate_results(doc, "ours.json")
    validate_suite_coverage("ours", doc, "ours.json")
    assert doc["entries"][0]["thinking_effort"] == "high" and doc["entries"][0]["kind"] == "agent"
