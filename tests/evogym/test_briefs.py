"""Env briefs: every Core16 brief renders all headings without building the env."""
from __future__ import annotations

import re

import pytest

import evogym.envs as envs
from evogym.briefs import HEADINGS, brief, env_description
from evogym.envs import CORE16, resolve


@pytest.fixture
def no_env_construction(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a Core16 brief must not construct the env")

    monkeypatch.setattr(envs, "make_env", refuse)
    monkeypatch.setattr(envs, "_make", refuse)


@pytest.mark.parametrize("slug", CORE16)
def test_core16_brief_has_every_heading_in_order(slug, no_env_construction):
    spec = resolve(slug)
    text = brief(spec)
    assert text.startswith(f"# {spec.title}\n")
    assert f"Maximum episode steps: {spec.max_steps}" in text
    found = re.findall(r"^## (.+)$", text, flags=re.MULTILINE)
    assert found == list(HEADINGS)
    for section in re.split(r"^## .+$", text, flags=re.MULTILINE)[1:]:
        assert section.strip(), f"{slug}: empty section"


def test_briefs_carry_env_specific_facts():
    assert "0.05" in brief(resolve("gymnasium/FetchPush-v4"))
    assert "1 - 0.9 * steps / 2560" in brief(resolve("gymnasium/MiniGrid-DoorKey-16x16-v0"))
    assert "unhealthy" in brief(resolve("gym/ant5"))
    assert "0 lane left, 1 idle" in brief(resolve("gymnasium/roundabout-v0"))
    assert "`[steering in [-1, 1]" in brief(resolve("gym/racing"))
    assert "clipped" in brief(resolve("gym/continuouscar"))


def test_generic_brief_uses_schema_and_upstream_description():
    text = brief(resolve("gymnasium/CartPole-v1"))
    assert re.findall(r"^## (.+)$", text, flags=re.MULTILINE) == list(HEADINGS)
    assert "pole" in text and "Discrete(n=2)" in text and "Box [4] float32" in text


def test_env_description_is_one_paragraph_or_empty():
    text = env_description("MountainCar-v0")
    assert text and "\n" not in text and not text.startswith("#")
    assert env_description("NoSuchEnv-v0") == ""
