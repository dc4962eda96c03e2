"""Proposers: evidence + parent bundles -> candidate bundles (OLE G_on, G_off, V_off).

A proposal is either a valid candidate bundle (YAML, with provenance naming its parents,
edge, generation, proposer and the evidence ids it acts on) or a recorded rejection
saying why no valid bundle came out. Proposers never raise on bad candidates: an
invalid mutation or an unusable LLM answer is a `Proposal` with `rejection` set.
"""
from __future__ import annotations

import abc
import random
from collections.abc import Sequence
from typing import Any, Final, Literal, TypedDict, Unpack

from pydantic import BaseModel, ConfigDict

from ole.bundle import Bundle, bundle_from_data
from ole.chosen import ChosenVersion
from ole.errors import ValidationError
from ole.evidence import EvidenceItem
from ole.loop_policy import COMPONENTS
from ole.paired import Objectives


SCHEMA_VERSION: Final = "1"
Edge = Literal["online", "offline_mutation", "recombination", "specialization"]


class Proposal(BaseModel):
    """One proposer output: a candidate bundle, or the reason none could be formed."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    schema_version: Literal["1"] = SCHEMA_VERSION
    """Proposal record schema version."""
    proposer: str
    """`builtin` or `llm:<model>`."""
    edge: Edge
    """Lineage edge the candidate would get."""
    parents: tuple[str, ...]
    """Parent refs (`name@version`)."""
    evidence_ids: tuple[str, ...]
    """Evidence items the proposal acts on."""
    bundle: Bundle | None
    """The candidate bundle; None when rejected."""
    rejection: str | None = None
    """Why no valid bundle was formed; None for a valid proposal."""
    note: str = ""
    """What was changed and why (one line per change)."""
    llm_request: str | None = None
    """Request hash of the LLM call behind it (replayable from the recorded call log)."""
    tokens: int = 0
    """LLM tokens spent on it."""
    usd: float = 0.0
    """LLM spend on it."""

    @property
    def valid(self) -> bool:
        return self.bundle is not None


class ProposalCost(TypedDict, total=False):
    """What a proposal spent, as `Proposal` records it (an LLM proposer's call; none for the others)."""

    llm_request: str | None
    tokens: int
    usd: float


Parent = ChosenVersion
"""A registered bundle a proposer may derive from: a chosen version (its ref and bundle), the same
value the driver evaluates and gates."""


def child_bundle(parents: Sequence[Parent], policy: dict, *, edge: Edge, evidence_ids: Sequence[str],
                 generation: int, proposer: str, note: str, applicability: dict | None = None) -> Bundle:
    """A candidate bundle: the first parent's name and applicability, a new policy and provenance.

    `applicability` replaces the parent's scope (a `specialization` narrows it). Raises
    `ValidationError` when the policy breaks the schema (the caller records it).
    """
    base = parents[0].bundle.model_dump(mode="json")
    base["loop_policy"] = policy
    if applicability is not None:
        base["applicability"] = applicability
    base["provenance"] = {
        "parents": [p.version for p in parents], "edge": edge,
        "mode": "online" if edge == "online" else "offline", "evidence_ids": list(evidence_ids),
        "generation": generation, "proposer": proposer, "note": note[:4000]}
    return bundle_from_data(base, source=f"{proposer} proposal")


def accepted(proposer: str, edge: Edge, parents: Sequence[Parent], bundle: Bundle,
             **kw: Unpack[ProposalCost]) -> Proposal:
    return Proposal(proposer=proposer, edge=edge, parents=tuple(p.ref for p in parents),
                    evidence_ids=bundle.provenance.evidence_ids, bundle=bundle,
                    note=bundle.provenance.note, **kw)


def rejected(proposer: str, edge: Edge, parents: Sequence[Parent], reason: str,
             evidence_ids: Sequence[str] = (), **kw: Unpack[ProposalCost]) -> Proposal:
    return Proposal(proposer=proposer, edge=edge, parents=tuple(p.ref for p in parents),
                    evidence_ids=tuple(evidence_ids), bundle=None, rejection=reason[:2000], **kw)


def section_recombination(proposer: str, a: Parent, b: Parent, evidence: Sequence[EvidenceItem], *,
                          generation: int, seed: int) -> Proposal:
    """Each of the eight components taken whole from one parent or the other (seeded)."""
    rng = random.Random(f"{seed}|{a.ref}|{b.ref}|{generation}|x")
    pa, pb = (p.bundle.loop_policy.model_dump(mode="json") for p in (a, b))
    differing = [c for c in COMPONENTS if pa[c] != pb[c]]
    if len(differing) < 2:
        return rejected(proposer, "recombination", [a, b],
                        f"parents differ in {len(differing)} component(s); recombination needs 2 or more")
    take_b = set(rng.sample(differing, rng.randint(1, len(differing) - 1)))
    policy: dict[str, Any] = {**pa, **{c: pb[c] for c in take_b}}
    note = "components from " + b.ref + ": " + ", ".join(sorted(take_b)) + f"; the rest from {a.ref}"
    cited = sorted({i for p in (a, b) for i in p.bundle.provenance.evidence_ids})
    try:
        bundle = child_bundle([a, b], policy, edge="recombination", evidence_ids=cited,
                              generation=generation, proposer=proposer, note=note)
    except ValidationError as exc:
        return rejected(proposer, "recombination", [a, b], exc.message, cited)
    return accepted(proposer, "recombination", [a, b], bundle)


class Proposer(abc.ABC):
    """Makes candidate bundles from parents and evidence."""

    name: str = "proposer"

    @abc.abstractmethod
    def mutate(self, parent: Parent, evidence: Sequence[EvidenceItem], *, edge: Edge,
               generation: int, seed: int) -> Proposal:
        """One candidate derived from one parent, aimed at the components the evidence names."""

    def recombine(self, a: Parent, b: Parent, evidence: Sequence[EvidenceItem], *,
                  generation: int, seed: int) -> Proposal:
        """One candidate mixing two parents; by default section-wise (`section_recombination`)."""
        return section_recombination(self.name, a, b, evidence, generation=generation, seed=seed)

    def observe(self, ref: str, bundle: Bundle, summary: Objectives, *, rung: int, final: bool) -> None:
        """How a candidate did on the search instances so far (`summary`: its `PairStats` as the
        search's objectives: n, mean_r, cvar, cost, submits).

        Called after every rung of the staged evaluation, `final` on the last one. Model-based
        proposers (TPE) learn from it; the evidence-guided and random proposers ignore it. Gate
        pairs are never passed here, so no proposer ever learns from gate instances.
        """
