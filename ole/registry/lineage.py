"""The policy lineage: a networkx view derived from registry events (OLE §III-D).

Nodes are versions (`NAME@VERSION`), each with its scope (the applicability's scope key);
an edge runs parent -> child and is typed by how the child was derived: `online` (online
proposal), `offline_mutation`, `recombination` (a child with two parents: two edges,
`position` 0 and 1), `manual` or `specialization` (a strictly narrower scope than the
parent's), or `imported` (the child was imported before its parent and names it by content
hash in `provenance.external_parents`; drawn once the parent is registered too). Champion history comes from activation events, each carrying the release or
rollback that caused it and its scope, so "who was champion of scope S on channel C at
time X, and why" is answered from the record alone. Nothing here writes; build a fresh
`Lineage` to see new events.
"""
from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path

import networkx as nx

from ole.bundle import GENERAL_SCOPE, Bundle, Change, diff_bundles, format_ref, parse_ref, parse_scope
from ole.coverage import evidence_line
from ole.errors import NotFound, OleError, ValidationError
from ole.registry.api import Registry
from ole.registry.records import DEFAULT_CHANNEL, Event, Tenure
from ole.registry.state import derive_state

FORMATS = ("tree", "json", "dot", "mermaid")


def _version_key(ref: str) -> tuple[str, int]:
    name, version = parse_ref(ref)
    return name, version or 0


class Lineage:
    """Graph and history queries over a registry's events."""

    def __init__(self, events: Sequence[Event], *, bundle_of: Callable[[str], Bundle] | None = None,
                 default_channel: str = DEFAULT_CHANNEL) -> None:
        self.events = list(events)
        self.default_channel = default_channel
        self._bundle_of = bundle_of
        state = derive_state(self.events, default_channel)
        self.graph = nx.DiGraph()
        for event in self.events:
            if event.kind != "registration":
                continue
            self.graph.add_node(event.ref, name=event.name, version=event.version,
                                registered_at=event.ts.isoformat(), note=event.payload.get("note", ""),
                                edge=event.payload.get("edge"), seed=bool(event.payload.get("seed")),
                                status=state.status_of(event.name, event.version), scope=self._scope(event))
            for position, parent in enumerate(event.payload.get("parents", [])):
                self.graph.add_edge(format_ref(event.name, parent), event.ref,
                                    kind=event.payload.get("edge"), position=position)
        self._link_imports()
        for event in self.events:  # where each version was released, and what bounds that scope
            if event.kind == "release" and event.ref in self.graph:
                self.graph.nodes[event.ref].update(released_scope=event.payload.get("scope") or "general",
                                                   evidence=evidence_line(event))

    def _link_imports(self) -> None:
        """An `imported` edge from each version to every version of its name that names its content hash
        in `provenance.external_parents`: a child imported before its parent keeps that parent by hash,
        and the parent arriving later is that parent. Needs the bundles (`bundle_of`); a damaged one is
        skipped (`ole fsck` reports it)."""
        if self._bundle_of is None:
            return
        by_hash: dict[tuple[str, str], str] = {}
        counts: dict[str, int] = {}
        for event in self.events:
            if event.kind == "registration":
                counts[event.name] = counts.get(event.name, 0) + 1
                if event.payload.get("content_hash"):
                    by_hash.setdefault((event.name, str(event.payload["content_hash"])), event.ref)
        for event in self.events:
            if event.kind != "registration" or counts[event.name] < 2:  # a lone version has no parent here
                continue
            try:
                external = self._bundle_of(event.ref).provenance.external_parents
            except OleError:
                continue
            position = len(event.payload.get("parents", []))
            for digest in external:
                parent = by_hash.get((event.name, digest))
                if parent is None or parent == event.ref or self.graph.has_edge(parent, event.ref) \
                        or nx.has_path(self.graph, event.ref, parent):  # never a circle
                    continue
                self.graph.add_edge(parent, event.ref, kind="imported", position=position)
                position += 1

    def _scope(self, event: Event) -> str | None:
        """Scope key of a registered version: recorded since scopes exist, else read from its bundle."""
        if event.payload.get("scope"):
            return str(event.payload["scope"])
        if self._bundle_of is None:
            return None
        try:
            return self._bundle_of(event.ref).applicability.scope_key
        except OleError:  # a damaged blob: `ole fsck` reports it; the lineage still renders
            return None

    @classmethod
    def from_registry(cls, registry: Registry) -> Lineage:
        """Lineage of everything recorded in `registry` (diffs load bundles from it)."""
        state = registry.state()  # read once: each `get` would derive it again from every event
        return cls(registry.events(), bundle_of=lambda ref: registry.get(ref, state=state).bundle,
                   default_channel=state.default_channel)

    def _node(self, ref: str) -> str:
        name, version = parse_ref(ref)
        if version is None:
            versions = [d["version"] for _, d in self.graph.nodes(data=True) if d["name"] == name]
            if versions:
                return format_ref(name, max(versions))
        elif format_ref(name, version) in self.graph:
            return format_ref(name, version)
        close = difflib.get_close_matches(ref, list(self.graph), n=2)
        raise NotFound(f"`{ref}` is not in the lineage", suggestions=close,
                       hint="" if close else "see `ole bundle list`")

    def ancestors(self, ref: str) -> list[str]:
        """Every version `ref` descends from, oldest first."""
        return sorted(nx.ancestors(self.graph, self._node(ref)), key=_version_key)

    def descendants(self, ref: str) -> list[str]:
        """Every version derived from `ref`, directly or not, oldest first."""
        return sorted(nx.descendants(self.graph, self._node(ref)), key=_version_key)

    def parents(self, ref: str) -> list[str]:
        """Direct parents in position order (two for a recombination)."""
        node = self._node(ref)
        return sorted(self.graph.predecessors(node), key=lambda p: self.graph.edges[p, node]["position"])

    def path_to_root(self, ref: str) -> list[str]:
        """`ref`, its first parent, that one's first parent, ... down to a seed."""
        path = [self._node(ref)]
        while parents := self.parents(path[-1]):
            path.append(parents[0])
        return path

    def diff(self, a: str, b: str) -> list[Change]:
        """Per-component field changes from version `a` to version `b`."""
        if self._bundle_of is None:
            raise ValidationError("this lineage has no bundle source", hint="build it with Lineage.from_registry")
        return diff_bundles(self._bundle_of(self._node(a)), self._bundle_of(self._node(b)))

    # ----- champion history ----------------------------------------------------------------

    def champion_history(self, channel: str = DEFAULT_CHANNEL, scope: str = GENERAL_SCOPE) -> list[Tenure]:
        """Tenures of (`channel`, `scope`), oldest first (the last one has `until=None` unless the
        scope's pointer was removed, which ends the last tenure with no successor)."""
        scope = parse_scope(scope).scope_key
        own = [e for e in self.events if e.kind == "activation" and e.channel == channel and e.scope == scope]
        if channel == self.default_channel:
            first = next((e for e in self.events if e.kind == "registration"), None)
            prefix = [Tenure(channel=channel, scope=scope, ref=first.ref, since=first.ts, until=None, cause="default",
                             reason="", cause_seq=None)] if first and scope == GENERAL_SCOPE else []
        else:
            cut = own[0].ts if own else None
            prefix = [t.model_copy(update={"channel": channel, "cause": "inherited", "reason": "", "cause_seq": None,
                                           "until": t.until if cut is None or t.until is None or t.until < cut
                                           else cut})
                      for t in self.champion_history(self.default_channel, scope) if cut is None or t.since < cut]
        tenures = prefix
        for event in own:
            if tenures and tenures[-1].until is None:
                tenures[-1] = tenures[-1].model_copy(update={"until": event.ts})
            if event.payload.get("clear"):
                continue
            tenures.append(Tenure(channel=channel, scope=scope, ref=event.ref, since=event.ts, until=None,
                                  cause=event.payload.get("cause", "release"),
                                  reason=event.payload.get("reason", ""), cause_seq=event.payload.get("cause_seq")))
        return tenures

    def champion_at(self, when: datetime, channel: str = DEFAULT_CHANNEL,
                    scope: str = GENERAL_SCOPE) -> Tenure | None:
        """The tenure of (`channel`, `scope`) covering `when` (timezone-aware), or None when the scope
        had no champion then (before the first registration, or while its pointer was removed)."""
        if when.utcoffset() is None:
            raise ValidationError(f"time {when.isoformat()} has no time zone", hint="append Z, e.g. 2026-01-01T00:00Z")
        for tenure in self.champion_history(channel, scope):
            if tenure.since <= when and (tenure.until is None or when < tenure.until):
                return tenure
        return None

    def scopes(self, channel: str = DEFAULT_CHANNEL) -> list[str]:
        """Every scope key that ever had a champion on `channel` (or on `default`, which it inherits)."""
        owners = {channel, self.default_channel}
        found = {e.scope for e in self.events if e.kind == "activation" and e.channel in owners}
        return [GENERAL_SCOPE] + sorted(found - {GENERAL_SCOPE})

    # ----- rendering -------------------------------------------------------------------------

    def view(self, name: str | None = None) -> nx.DiGraph:
        """The graph restricted to one bundle name (all names when None)."""
        if name is None:
            return self.graph
        nodes = [n for n, d in self.graph.nodes(data=True) if d["name"] == name]
        if not nodes:
            names = sorted({d["name"] for _, d in self.graph.nodes(data=True)})
            raise NotFound(f"no bundle named `{name}`", suggestions=difflib.get_close_matches(name, names, n=2))
        return self.graph.subgraph(nodes)

    def render(self, fmt: str = "tree", name: str | None = None) -> str:
        """Text rendering: `tree`, `json`, `dot` or `mermaid`."""
        if fmt not in FORMATS:
            raise ValidationError(f"unknown format `{fmt}`", hint=f"one of {', '.join(FORMATS)}")
        graph = self.view(name)
        return {"tree": _tree, "json": _json, "dot": _dot, "mermaid": _mermaid}[fmt](graph)

    def write_png(self, path: str | Path, name: str | None = None) -> Path:
        """Draw the lineage (layered by depth, edges labelled by kind) to a PNG file."""
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        graph = self.view(name)
        positions = _layers(graph)
        fig, ax = plt.subplots(figsize=(max(4, 1.6 * len(graph)), 3 + max((-y for _, y in positions.values()),
                                                                          default=0)))
        colors = ["#4caf50" if graph.nodes[n]["status"] == "active" else "#90caf9" for n in graph]
        labels = {n: n if graph.nodes[n].get("scope") in (None, GENERAL_SCOPE) else f"{n}\n{graph.nodes[n]['scope']}"
                  for n in graph}
        nx.draw_networkx(graph, positions, ax=ax, node_color=colors, node_size=1800, font_size=8, labels=labels)
        nx.draw_networkx_edge_labels(graph, positions, ax=ax, font_size=7,
                                     edge_labels={(u, v): d["kind"] for u, v, d in graph.edges(data=True)})
        ax.set_axis_off()
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        plt.close(fig)
        return Path(path)


def _layers(graph: nx.DiGraph) -> dict[str, tuple[float, float]]:
    depth: dict[str, int] = {}
    for node in nx.topological_sort(graph):
        depth[node] = max((depth[p] + 1 for p in graph.predecessors(node)), default=0)
    positions: dict[str, tuple[float, float]] = {}
    seen: dict[int, int] = {}
    for node in sorted(graph, key=_version_key):
        row = depth[node]
        positions[node] = (float(seen.get(row, 0)), float(-row))
        seen[row] = seen.get(row, 0) + 1
    return positions


def _scope_text(data: dict) -> str:
    return f"scope {data['scope']}" if data.get("scope") else "scope unknown"


def _label(graph: nx.DiGraph, node: str) -> str:
    data = graph.nodes[node]
    extra = f" {data['edge']}" if data["edge"] else " seed"
    released = ""
    if data.get("released_scope"):
        ev = data.get("evidence") or ""
        if "gate decision #" in ev:
            seq = ev.split("gate decision #", 1)[1].split(" ", 1)[0]
            released = f" released for {data['released_scope']} (bounded by gate decision #{seq})"
        elif ev:
            released = f" released for {data['released_scope']} (not bounded by gate evidence)"
    return (f"{node} [{data['status']}]{extra} ({_scope_text(data)}){released}"
            + (f" — {data['note']}" if data["note"] else ""))


def _tree(graph: nx.DiGraph) -> str:
    lines: list[str] = []

    def walk(node: str, prefix: str, last: bool, depth: int) -> None:
        others = [p for p in graph.predecessors(node) if graph.edges[p, node]["position"] > 0]
        also = f" (+ {', '.join(others)})" if others else ""
        branch = "" if depth == 0 else ("└── " if last else "├── ")
        lines.append(f"{prefix}{branch}{_label(graph, node)}{also}")
        children = sorted((c for c in graph.successors(node) if graph.edges[node, c]["position"] == 0), key=_version_key)
        for i, child in enumerate(children):
            walk(child, prefix + ("" if depth == 0 else ("    " if last else "│   ")), i == len(children) - 1, depth + 1)

    for root in sorted((n for n in graph if graph.in_degree(n) == 0), key=_version_key):
        walk(root, "", True, 0)
    return "\n".join(lines)


def _json(graph: nx.DiGraph) -> str:
    nodes = [{"ref": n, **graph.nodes[n]} for n in sorted(graph, key=_version_key)]
    edges = [{"parent": u, "child": v, "kind": d["kind"], "position": d["position"]}
             for u, v, d in sorted(graph.edges(data=True), key=lambda e: (_version_key(e[1]), e[2]["position"]))]
    return json.dumps({"nodes": nodes, "edges": edges}, indent=2)


def _dot(graph: nx.DiGraph) -> str:
    lines = ["digraph lineage {", "  rankdir=TB;"]
    for node in sorted(graph, key=_version_key):
        data = graph.nodes[node]
        lines.append(f'  "{node}" [label="{node}\\n{data["status"]}\\n{_scope_text(data)}"];')
    for u, v, d in graph.edges(data=True):
        lines.append(f'  "{u}" -> "{v}" [label="{d["kind"]}"];')
    lines.append("}")
    return "\n".join(lines)


def _mermaid(graph: nx.DiGraph) -> str:
    def ident(ref: str) -> str:
        name, version = parse_ref(ref)
        return "n_" + name.replace("_", "_u").replace("-", "_d") + f"_{version}"

    lines = ["graph TD"]
    for node in sorted(graph, key=_version_key):
        data = graph.nodes[node]
        scope = _scope_text(data).replace(";", "#59;")  # `;` ends a Mermaid statement even inside quotes
        lines.append(f'  {ident(node)}["{node} ({data["status"]}, {scope})"]')
    for u, v, d in graph.edges(data=True):
        lines.append(f"  {ident(u)} -->|{d['kind']}| {ident(v)}")
    return "\n".join(lines)
