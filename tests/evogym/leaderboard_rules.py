"""The rules EvoPolicyGym main's site applies to a `leaderboard-results/v1` file
(`site/lib/leaderboard/validate.ts`: `validateResults`, `validateSuiteCoverage`), restated in
Python for our tests. Written from the rules, not translated line by line; each rule raises
`LeaderboardError` with the file name and the field, as the site's validator does.

A value is "text" when it is a string that is not blank; a "number" is a finite int or float
(never a bool: JavaScript has none to confuse); a "record" is a JSON object.
"""
from __future__ import annotations

import math
from typing import Any

SCHEMA = "evopolicygym/leaderboard-results/v1"


class LeaderboardError(ValueError):
    pass


def _record(value: Any) -> bool:
    return isinstance(value, dict)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _integer(value: Any) -> bool:
    return _number(value) and float(value).is_integer()


def _text(value: Any, label: str) -> None:
    if not isinstance(value, str) or not value.strip():
        raise LeaderboardError(f"{label} must be non-empty text")


def _localized(value: Any, label: str) -> None:
    if not _record(value):
        raise LeaderboardError(f"{label} must be an object")
    _text(value.get("en"), f"{label}.en")
    _text(value.get("zh"), f"{label}.zh")


def validate_results(value: Any, path: str) -> dict:
    """Raise LeaderboardError where `value` breaks a rule; return it when it keeps them all."""
    if not _record(value):
        raise LeaderboardError(f"{path}: results must be an object")
    if value.get("schema") != SCHEMA:
        raise LeaderboardError(f"{path}: unsupported leaderboard results schema")
    _text(value.get("generated_at"), f"{path}: generated_at")
    if not _integer(value.get("final_reruns")) or value["final_reruns"] < 0:
        raise LeaderboardError(f"{path}: final_reruns must be a non-negative integer")
    for name in ("environments", "entries"):
        if not isinstance(value.get(name), list) or not value[name]:
            raise LeaderboardError(f"{path}: {name} must not be empty")
    configurations = _configurations(value, path)
    selected = _environments(value["environments"], configurations, path)
    entries = _entries(value["entries"], selected, path)
    if "policy_rollouts" in value:
        _rollouts(value["policy_rollouts"], entries, selected, path)
    return value


def _configurations(value: dict, path: str) -> set[str]:
    ids: set[str] = set()
    if "test_configurations" not in value:
        return ids
    items = value["test_configurations"]
    if not isinstance(items, list) or not items:
        raise LeaderboardError(f"{path}: test_configurations must not be empty")
    for item in items:
        if not _record(item):
            raise LeaderboardError(f"{path}: invalid test configuration")
        _text(item.get("id"), f"{path}: test_configuration.id")
        if item["id"] in ids:
            raise LeaderboardError(f"{path}: duplicate test configuration {item['id']}")
        ids.add(item["id"])
        _localized(item.get("label"), f"{path}: test_configuration.label")
        _localized(item.get("description"), f"{path}: test_configuration.description")
        if not _record(item.get("parameters")):
            raise LeaderboardError(f"{path}: test_configuration.parameters must be an object")
        for name, parameter in item["parameters"].items():
            _text(name, f"{path}: test_configuration parameter name")
            if not (isinstance(parameter, (str, bool)) or _number(parameter)):
                raise LeaderboardError(f"{path}: test_configuration parameter {name} is invalid")
    return ids


def _environments(items: list, configurations: set[str], path: str) -> dict[str, set[str] | None]:
    """Environment id -> the configurations it selects (None: scores are plain numbers)."""
    selected: dict[str, set[str] | None] = {}
    for item in items:
        if not _record(item):
            raise LeaderboardError(f"{path}: invalid environment")
        for name in ("id", "display", "category", "primary_metric"):
            _text(item.get(name), f"{path}: environment.{name}")
        _localized(item.get("summary"), f"{path}: environment.summary")
        if item["id"] in selected:
            raise LeaderboardError(f"{path}: duplicate environment {item['id']}")
        if not _integer(item.get("order")) or item["order"] < 0:
            raise LeaderboardError(f"{path}: environment.order must be non-negative")
        if item.get("score_direction") not in ("maximize", "minimize"):
            raise LeaderboardError(f"{path}: invalid score direction")
        places = item.get("score_decimal_places")
        if "score_decimal_places" in item and not (_integer(places) and 0 <= places <= 12):
            raise LeaderboardError(f"{path}: environment.score_decimal_places must be an integer from 0 to 12")
        if ("configuration_ids" in item) != ("default_configuration_id" in item):
            raise LeaderboardError(f"{path}: environment configuration fields must be declared together")
        selected[item["id"]] = _selected(item, configurations, path) if "configuration_ids" in item else None
    return selected


def _selected(item: dict, configurations: set[str], path: str) -> set[str]:
    ids = item["configuration_ids"]
    if not isinstance(ids, list) or not ids:
        raise LeaderboardError(f"{path}: environment.configuration_ids must not be empty")
    _text(item["default_configuration_id"], f"{path}: environment.default_configuration_id")
    chosen: set[str] = set()
    for config_id in ids:
        _text(config_id, f"{path}: environment.configuration_id")
        if config_id not in configurations:
            raise LeaderboardError(f"{path}: environment references unknown configuration {config_id}")
        if config_id in chosen:
            raise LeaderboardError(f"{path}: environment repeats configuration {config_id}")
        chosen.add(config_id)
    if item["default_configuration_id"] not in chosen:
        raise LeaderboardError(f"{path}: environment default configuration is not selected")
    return chosen


def _entries(items: list, selected: dict[str, set[str] | None], path: str) -> set[str]:
    ids: set[str] = set()
    for item in items:
        if not _record(item):
            raise LeaderboardError(f"{path}: invalid entry")
        for name in ("id", "display", "harness"):
            _text(item.get(name), f"{path}: entry.{name}")
        if item["id"] in ids:
            raise LeaderboardError(f"{path}: duplicate entry {item['id']}")
        ids.add(item["id"])
        if item.get("kind") not in ("agent", "baseline"):
            raise LeaderboardError(f"{path}: invalid entry kind")
        if "thinking_effort" in item:
            _text(item["thinking_effort"], f"{path}: entry.thinking_effort")
        if not _record(item.get("scores")):
            raise LeaderboardError(f"{path}: entry.scores must be an object")
        for env_id, score in item["scores"].items():
            _score(env_id, score, selected, path)
    return ids


def _score(env_id: str, score: Any, selected: dict[str, set[str] | None], path: str) -> None:
    if env_id not in selected:
        raise LeaderboardError(f"{path}: score references unknown {env_id}")
    chosen = selected[env_id]
    if chosen is None:
        if not _number(score):
            raise LeaderboardError(f"{path}: score for {env_id} must be finite")
        return
    if not _record(score):
        raise LeaderboardError(f"{path}: configured score for {env_id} must be an object")
    for config_id, value in score.items():
        if config_id not in chosen:
            raise LeaderboardError(f"{path}: score references unavailable configuration {config_id}")
        if not _number(value):
            raise LeaderboardError(f"{path}: score for {env_id}/{config_id} must be finite")


def _rollouts(items: Any, entries: set[str], selected: dict[str, set[str] | None], path: str) -> None:
    if not isinstance(items, list):
        raise LeaderboardError(f"{path}: policy_rollouts must be an array")
    keys: set[tuple] = set()
    for item in items:
        if not _record(item):
            raise LeaderboardError(f"{path}: invalid policy rollout")
        for name in ("entry_id", "environment_id", "artifact", "split"):
            _text(item.get(name), f"{path}: policy_rollout.{name}")
        if item["entry_id"] not in entries:
            raise LeaderboardError(f"{path}: policy rollout references unknown entry {item['entry_id']}")
        env_id = item["environment_id"]
        if env_id not in selected:
            raise LeaderboardError(f"{path}: policy rollout references unknown environment {env_id}")
        chosen = selected[env_id]
        if chosen is None and "configuration_id" in item:
            raise LeaderboardError(f"{path}: unconfigured policy rollout cannot select a configuration")
        if chosen is not None:
            _text(item.get("configuration_id"), f"{path}: policy_rollout.configuration_id")
            if item["configuration_id"] not in chosen:
                raise LeaderboardError(f"{path}: policy rollout references unavailable configuration "
                                       f"{item['configuration_id']}")
        if not item["artifact"].startswith("/") or ".." in item["artifact"]:
            raise LeaderboardError(f"{path}: policy rollout artifact must be a safe site-absolute path")
        if item.get("media_type") != "image/gif":
            raise LeaderboardError(f"{path}: policy rollout media_type must be image/gif")
        if "camera" in item:
            _text(item["camera"], f"{path}: policy_rollout.camera")
        if not _integer(item.get("episode_index")) or item["episode_index"] < 0:
            raise LeaderboardError(f"{path}: policy rollout episode_index must be non-negative")
        if not _number(item.get("score")):
            raise LeaderboardError(f"{path}: policy rollout score must be finite")
        key = (item["entry_id"], env_id, item.get("configuration_id", ""))
        if key in keys:
            raise LeaderboardError(f"{path}: duplicate policy rollout {key}")
        keys.add(key)


def validate_suite_coverage(suite_id: str, results: dict, path: str) -> None:
    """Every agent entry scores every environment, under each configuration it declares."""
    for entry in results["entries"]:
        if entry["kind"] != "agent":
            continue
        missing = [env["id"] for env in results["environments"] if env["id"] not in entry["scores"]]
        if missing:
            raise LeaderboardError(f"{path}: {suite_id}/{entry['id']} is missing {', '.join(missing)}")
        for env in results["environments"]:
            if "configuration_ids" not in env:
                continue
            scored = entry["scores"][env["id"]]
            if not _record(scored):
                raise LeaderboardError(f"{path}: {suite_id}/{entry['id']} has no configured scores for {env['id']}")
            absent = [c for c in env["configuration_ids"] if c not in scored]
            if absent:
                raise LeaderboardError(f"{path}: {suite_id}/{entry['id']}/{env['id']} is missing {', '.join(absent)}")
