"""The LLM proposer: champion YAML + evidence + schema in, one candidate bundle out.

The model is reached only through `ole.llm.LLMClient`, so a proposal made live can be
replayed from the recorded call log (same request hash -> same answer). Whatever the
model returns, the result is a `Proposal`: a reply without a YAML block, YAML that
breaks the schema, unknown evidence ids or an unchanged policy, and an LLM error or
spent cap, are all recorded rejections, never exceptions.
"""
from __future__ import annotations

import json
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ole.bundle import dump_bundle_yaml
from ole.errors import OleError, ValidationError
from ole.evidence import EvidenceItem
from ole.loop_policy import LoopPolicy
from ole.proposers import Edge, Parent, Proposal, ProposalCost, Proposer, accepted, child_bundle, rejected
from ole.yamlio import load_yaml

if TYPE_CHECKING:
    from ole.llm import LLMClient

MAX_EVIDENCE = 12
"""Evidence items shown to the model (largest |δ| first): keeps the prompt bounded."""
_FENCE = re.compile(r"```(?:yaml|yml)?\s*\n(.*?)```", re.DOTALL)

SYSTEM = (
    "You improve the loop policy of a coding agent that writes control policies for Gymnasium "
    "environments under an episode budget. You are given the current champion bundle, evidence "
    "extracted from verified runs, and the JSON schema of the loop policy. Propose ONE changed loop "
    "policy that acts on the evidence. Answer with exactly one ```yaml block holding a mapping with "
    "keys: loop_policy (the complete new loop policy), evidence_ids (list of the evidence ids you act "
    "on), note (one or two sentences on what you changed and why)."
)


def build_messages(parent: Parent, evidence: Sequence[EvidenceItem]) -> list[dict]:
    """The request: champion YAML, the strongest evidence items and the loop-policy schema."""
    shown = sorted(evidence, key=lambda e: (-abs(e.delta), e.evidence_id))[:MAX_EVIDENCE]
    ev = [e.model_dump(mode="json", include={"evidence_id", "direction", "metric", "delta", "component",
                                                "sentence", "hints"}) for e in shown]
    user = (f"## Champion bundle `{parent.ref}`\n```yaml\n{dump_bundle_yaml(parent.bundle)}```\n\n"
            f"## Evidence\n```json\n{json.dumps(ev, indent=1)}\n```\n\n"
            f"## Loop policy schema\n```json\n{json.dumps(LoopPolicy.model_json_schema())}\n```\n")
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def parse_reply(text: str, known_ids: set[str]) -> tuple[dict, tuple[str, ...], str]:
    """(loop_policy, evidence_ids, note) from a reply; raises ValidationError with the reason."""
    match = _FENCE.search(text)
    if match is None:
        raise ValidationError("reply has no ```yaml block", hint="the model must answer with one YAML block")
    doc = load_yaml(match.group(1), source="<llm reply>")
    policy = doc.get("loop_policy")
    if not isinstance(policy, dict):
        raise ValidationError("reply YAML has no loop_policy mapping", hint="keys: loop_policy, evidence_ids, note")
    ids = doc.get("evidence_ids") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise ValidationError(f"evidence_ids must be a list of strings, got {ids!r}", hint="cite given ids")
    unknown = sorted(set(ids) - known_ids)
    if unknown:
        raise ValidationError(f"reply cites unknown evidence ids {unknown}", hint="cite only the ids given")
    note = doc.get("note")
    return policy, tuple(ids), note if isinstance(note, str) else ""


class LLMProposer(Proposer):
    """Candidate bundles written by a language model through `ole.llm.LLMClient`."""

    def __init__(self, client: LLMClient) -> None:
        self.client = client
        self.name = f"llm:{client.model}"

    def mutate(self, parent: Parent, evidence: Sequence[EvidenceItem], *, edge: Edge,
               generation: int, seed: int) -> Proposal:
        messages = build_messages(parent, evidence)
        try:
            comp = self.client.complete(messages, temperature=0.7, seed=seed)
        except OleError as exc:
            return rejected(self.name, edge, [parent], f"LLM call failed: {exc}")
        cost: ProposalCost = {"llm_request": comp.request_hash, "tokens": comp.tokens, "usd": comp.usd}
        try:
            policy, ids, note = parse_reply(comp.text, {e.evidence_id for e in evidence})
            bundle = child_bundle([parent], policy, edge=edge, evidence_ids=ids, generation=generation,
                                  proposer=self.name, note=note)
            if bundle.content_hash == parent.bundle.content_hash:
                raise ValidationError("the proposed loop policy equals the parent's", hint="change something")
        except ValidationError as exc:
            return rejected(self.name, edge, [parent], exc.message, **cost)
        return accepted(self.name, edge, [parent], bundle, **cost)
