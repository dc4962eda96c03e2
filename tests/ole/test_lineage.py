"""Lineage queries on a generated graph, renderings, and champion history."""
from __future__ import annotations

import json
import random
import shutil
from datetime import datetime, timedelta, timezone
from pathlib import Path

import networkx as nx
import pytest

from ole.bundle import bundle_from_data
from ole.errors import NotFound, ValidationError
from ole.registry.lineage import Lineage
from ole.registry import Event, Registry

T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _registration(seq: int, version: int, parents: list[int], edge: str | None, name: str = "coder") -> Event:
    return Event(seq=seq, ts=T0 + timedelta(minutes=seq), kind="registration", name=name, version=version,
                 channel=None, payload={"parents": parents, "edge": edge, "note": f"v{version}", "seed": not parents})


def generated(n: int = 40, seed: int = 3) -> tuple[list[Event], dict[int, list[int]]]:
    """A random lineage: each version derives from 1 or 2 earlier versions."""
    rng = random.Random(seed)
    events, parents = [_registration(1, 1, [], None)], {1: []}
    for version in range(2, n + 1):
        if version > 3 and rng.random() < 0.25:
            chosen = rng.sample(range(1, version), 2)
            edge = "recombination"
        else:
            chosen = [rng.randrange(1, version)]
            edge = rng.choice(["online", "offline_mutation", "manual"])
        parents[version] = chosen
        events.append(_registration(version, version, chosen, edge))
    return events, parents


def _ancestors(parents: dict[int, list[int]], v: int) -> set[int]:
    seen, stack = set(), list(parents[v])
    while stack:
        p = stack.pop()
        if p not in seen:
            seen.add(p)
            stack.extend(parents[p])
    return seen


def test_queries_on_a_generated_graph_match_a_brute_force_model():
    events, parents = generated()
    lineage = Lineage(events)
    assert nx.is_directed_acyclic_graph(lineage.graph)
    for v in range(1, 41):
        expected = sorted(_ancestors(parents, v))
        assert lineage.ancestors(f"coder@{v}") == [f"coder@{a}" for a in expected]
        below = sorted(w for w in parents if v in _ancestors(parents, w))
        assert lineage.descendants(f"coder@{v}") == [f"coder@{w}" for w in below]
        path = lineage.path_to_root(f"coder@{v}")
        assert path[0] == f"coder@{v}" and path[-1] == "coder@1"
        for child, parent in zip(path, path[1:]):
            assert int(parent.split("@")[1]) == parents[int(child.split("@")[1])][0]
        assert lineage.parents(f"coder@{v}") == [f"coder@{p}" for p in parents[v]]
    kinds = {d["kind"] for _, _, d in lineage.graph.edges(data=True)}
    assert kinds == {"online", "offline_mutation", "manual", "recombination"}


def test_renderings_cover_every_node_and_edge():
    events, parents = generated(12)
    lineage = Lineage(events)
    data = json.loads(lineage.render("json"))
    assert len(data["nodes"]) == 12 and len(data["edges"]) == sum(len(p) for p in parents.values())
    tree = lineage.render("tree")
    assert tree.splitlines()[0].startswith("coder@1 [active] seed")
    assert all(f"coder@{v} [" in tree for v in range(1, 13))
    dot = lineage.render("dot")
    assert dot.startswith("digraph") and dot.count("->") == len(data["edges"])
    mermaid = lineage.render("mermaid")
    assert mermaid.startswith("graph TD") and mermaid.count("-->|") == len(data["edges"])
    with pytest.raises(ValidationError, match="unknown format"):
        lineage.render("svg")


def test_unknown_refs_suggest_close_ones():
    lineage = Lineage(generated(5)[0])
    with pytest.raises(NotFound) as info:
        lineage.ancestors("coder@9")
    assert "did you mean" in str(info.value)
    assert lineage.path_to_root("coder") == lineage.path_to_root("coder@5")


@pytest.fixture
def reg(tmp_path):
    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "bundles" / "coder.yaml", root)
    with Registry(root) as registry:
        yield registry


def _child(step: float):
    return bundle_from_data({"name": "coder", "loop_policy": {"action": {"step_size": step}}})


def test_champion_history_answers_who_and_why(reg):
    reg.register(_child(0.5), parents=[1])
    reg.register(_child(0.6), parents=[2], edge="online")
    reg.release("coder@2", reason="gate passed")
    reg.activate_pending()
    reg.release("coder@3", reason="online win")
    reg.activate_pending()
    reg.rollback(reason="degradation detected")
    reg.activate_pending()
    lineage = Lineage.from_registry(reg)
    history = lineage.champion_history()
    assert [(t.ref, t.cause, t.reason) for t in history] == [
        ("coder@1", "default", ""), ("coder@2", "release", "gate passed"), ("coder@3", "release", "online win"),
        ("coder@2", "rollback", "degradation detected")]
    assert all(a.until == b.since for a, b in zip(history, history[1:])) and history[-1].until is None
    middle = history[2]
    assert lineage.champion_at(middle.since).ref == "coder@3"
    assert lineage.champion_at(middle.since - timedelta(microseconds=1)).ref == "coder@2"
    assert lineage.champion_at(T0 - timedelta(days=400)) is None
    assert lineage.champion_at(datetime.now(timezone.utc)).reason == "degradation detected"
    with pytest.raises(ValidationError, match="no time zone"):
        lineage.champion_at(datetime(2026, 1, 1))
    other = lineage.champion_history("box2d")
    assert [t.cause for t in other] == ["inherited"] * 4 and other[-1].ref == "coder@2"
    assert [c.field for c in lineage.diff("coder@1", "coder@3")] == ["step_size"]


def test_png_is_written(reg, tmp_path):
    reg.register(_child(0.5), parents=[1])
    out = Lineage.from_registry(reg).write_png(tmp_path / "lineage.png")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
