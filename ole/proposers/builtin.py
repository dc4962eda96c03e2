"""The built-in proposer: evidence-aimed mutation, section-wise recombination, seeded exploration.

Mutations read the loop-policy schema itself (types, `Literal` choices, `ge`/`le`
bounds), so every field can be moved and a new field needs no change here. A move
that leaves the schema (e.g. fractions summing above 1) is a recorded rejection.
Everything is a function of (parents, evidence, seed): the same inputs give the same
candidate.
"""
from __future__ import annotations

import functools
import random
import typing
from collections.abc import Sequence

from ole.errors import ValidationError
from ole.evidence import EvidenceItem
from ole.loop_policy import COMPONENTS, LoopPolicy
from ole.proposers import Edge, Parent, Proposal, Proposer, accepted, child_bundle, rejected

STEP_FACTOR = 1.5
"""Multiplicative step of an `up`/`down` move on a numeric field (ints move by at least 1)."""
EXPLORE_PROB = 0.3
"""Chance that an evidence-aimed mutation also makes one random exploratory move."""
MAX_TRIES = 8
"""Attempts to find a move that changes the policy and passes validation."""
NAME = "builtin"


def _bounds(component: str, field: str) -> tuple[float | None, float | None, bool]:
    """(low, high, low_is_strict) of a numeric field, from its pydantic metadata."""
    info = getattr(LoopPolicy.model_fields[component].annotation, "model_fields")[field]
    low = high = None
    strict = False
    for m in info.metadata:
        if getattr(m, "ge", None) is not None:
            low = m.ge
        if getattr(m, "gt", None) is not None:
            low, strict = m.gt, True
        if getattr(m, "le", None) is not None:
            high = m.le
    return low, high, strict


def _annotation(component: str, field: str):
    return getattr(LoopPolicy.model_fields[component].annotation, "model_fields")[field].annotation


@functools.cache
def fields() -> tuple[str, ...]:
    """Every movable `component.field` path."""
    return tuple(f"{c}.{f}" for c in COMPONENTS
                 for f in getattr(LoopPolicy.model_fields[c].annotation, "model_fields"))


def _numeric(value, direction: str, component: str, field: str):
    low, high, strict = _bounds(component, field)
    factor = STEP_FACTOR if direction == "up" else 1 / STEP_FACTOR
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        new = max(value + (1 if direction == "up" else -1), round(value * factor)) if direction == "up" \
            else min(value - 1, round(value * factor))
    else:
        new = value * factor if value != 0 else (0.05 if direction == "up" else 0.0)
        new = round(new, 4)
    if low is not None:
        new = max(new, low + (1e-3 if strict else 0))
    if high is not None:
        new = min(new, high)
    return new


def _random_move(value, component: str, field: str, rng: random.Random):
    ann = _annotation(component, field)
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        return rng.choice([a for a in args if a != value] or list(args))
    if origin is tuple:
        inner = typing.get_args(args[0]) if typing.get_origin(args[0]) is typing.Literal else ()
        from ole.loop_policy import SUMMARY_FIELDS
        pool = inner or SUMMARY_FIELDS
        item = rng.choice(pool)
        return [v for v in value if v != item] if item in value else [*value, item]
    if isinstance(value, bool):
        return not value
    return _numeric(value, rng.choice(["up", "down"]), component, field)


def _parse_value(text: str):
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def apply_hint(policy: dict, hint: str) -> str:
    """Apply `component.field:up|down` or `component.field=value` in place; returns a note line.

    Raises `ValidationError` for a hint outside that grammar or naming an unknown field.
    """
    path, op, raw = (hint.partition("=") if "=" in hint else hint.rpartition(":"))
    if path not in fields() or (op == ":" and raw not in ("up", "down")):
        raise ValidationError(f"bad hint {hint!r}: expected component.field:up|down or component.field=value",
                              hint=f"fields: {', '.join(fields()[:4])}, ...")
    component, field = path.split(".", 1)
    if op == "=":
        new = _parse_value(raw)
    else:
        new = _numeric(policy[component][field], raw, component, field)
    old = policy[component][field]
    policy[component][field] = new
    return f"{path}: {old!r} -> {new!r}"


def explore(policy: dict, rng: random.Random) -> str:
    """One random move of a random field (seeded exploration)."""
    path = rng.choice(fields())
    component, field = path.split(".", 1)
    old = policy[component][field]
    new = _random_move(old, component, field, rng)
    policy[component][field] = new
    return f"{path}: {old!r} -> {new!r} (exploration)"


def _pick(evidence: Sequence[EvidenceItem], rng: random.Random) -> EvidenceItem | None:
    usable = [e for e in evidence if e.hints]
    return rng.choice(usable) if usable else None  # uniform: detectors' δ are in different units


def _attempt(parent: Parent, evidence: Sequence[EvidenceItem], rng: random.Random) -> tuple[dict, list[str], list[str]]:
    policy = parent.bundle.loop_policy.model_dump(mode="json")
    item = _pick(evidence, rng)
    notes, cited = [], []
    if item is not None:
        for hint in rng.sample(item.hints, len(item.hints)):  # the first hint that changes something
            before = {k: dict(v) for k, v in policy.items() if isinstance(v, dict)}
            note = apply_hint(policy, hint)
            if policy != {**policy, **before}:
                notes.append(note + f" [{item.evidence_id}: {item.sentence}]")
                cited.append(item.evidence_id)
                break
    if not cited or rng.random() < EXPLORE_PROB:
        notes.append(explore(policy, rng))
    return policy, notes, cited


def evidence_mutation(proposer: str, parent: Parent, evidence: Sequence[EvidenceItem], *,
                      edge: Edge, generation: int, seed: int) -> Proposal:
    """A mutation aimed at the evidence (or pure exploration without any); never raises on bad moves."""
    rng = random.Random(f"{seed}|{parent.ref}|{generation}")
    last = "no move changed the policy"
    for _ in range(MAX_TRIES):
        try:
            policy, notes, cited = _attempt(parent, evidence, rng)
        except ValidationError as exc:
            last = exc.message
            continue
        if policy == parent.bundle.loop_policy.model_dump(mode="json"):
            continue
        try:
            bundle = child_bundle([parent], policy, edge=edge, evidence_ids=cited, generation=generation,
                                  proposer=proposer, note="; ".join(notes))
        except ValidationError as exc:
            last = exc.message
            continue
        return accepted(proposer, edge, [parent], bundle)
    return rejected(proposer, edge, [parent], f"after {MAX_TRIES} tries: {last}")


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
    policy = {**pa, **{c: pb[c] for c in take_b}}
    note = "components from " + b.ref + ": " + ", ".join(sorted(take_b)) + f"; the rest from {a.ref}"
    cited = sorted({i for p in (a, b) for i in p.bundle.provenance.evidence_ids})
    try:
        bundle = child_bundle([a, b], policy, edge="recombination", evidence_ids=cited,
                              generation=generation, proposer=proposer, note=note)
    except ValidationError as exc:
        return rejected(proposer, "recombination", [a, b], exc.message, cited)
    return accepted(proposer, "recombination", [a, b], bundle)


class BuiltinProposer(Proposer):
    """Deterministic, dependency-free proposer (the embedded default)."""

    name = NAME

    def mutate(self, parent: Parent, evidence: Sequence[EvidenceItem], *, edge: Edge,
               generation: int, seed: int) -> Proposal:
        return evidence_mutation(self.name, parent, evidence, edge=edge, generation=generation, seed=seed)
