"""The built-in proposer: evidence-aimed multi-field mutation, section-wise recombination, seeded exploration.

A mutation picks one to `MAX_ITEMS` evidence items and applies each item's hints — all of them
with probability `WHOLE_ITEM_PROB` (an item's hints are one coherent change, computed together by
its detector), otherwise a non-empty subset — so a single proposal can move several fields
together; a field moved by one item is not moved again by a later item of the same proposal.
Hints carry target values computed by the detectors, so a move goes as far as the evidence says. With probability `EXPLORE_PROB` — always when no hint applies — it
also makes one or two exploratory moves drawn from the schema's own search space
(`ole.proposers.space`: log-scale steps on scale-like numbers, any other choice on a
categorical), with larger steps in later generations. Moves read the schema itself (types,
`Literal` choices, `ge`/`le` bounds), so every field can be moved and a new field needs no
change here. A move that leaves the schema is repaired where a rule says how (fractions
summing above 1 are scaled down) and otherwise a recorded rejection. Everything is a
function of (parents, evidence, seed): the same inputs give the same candidate.
"""
from __future__ import annotations

import functools
import random
from collections.abc import Sequence

from ole.errors import ValidationError
from ole.evidence import EvidenceItem
from ole.loop_policy import COMPONENTS, LoopPolicy
from ole.proposers import Edge, Parent, Proposal, Proposer, accepted, child_bundle, rejected
from ole.proposers import space

STEP_FACTOR = 1.5
"""Multiplicative step of an `up`/`down` hint on a numeric field (ints move by at least 1)."""
EXPLORE_PROB = 0.35
"""Chance that an evidence-aimed mutation also makes exploratory moves."""
MAX_ITEMS = 3
"""Most evidence items one mutation acts on."""
WHOLE_ITEM_PROB = 0.5
"""Chance that an item's hints are applied all together (its detector computed them as one change;
ablation later cuts the ones that carry no gain); otherwise a random non-empty subset."""
MAX_TRIES = 8
"""Attempts to find a move that changes the policy and passes validation."""
NAME = "builtin"


NOT_SEARCHED = space.NOT_SEARCHED


@functools.cache
def fields() -> tuple[str, ...]:
    """Every movable `component.field` path."""
    return tuple(f"{c}.{f}" for c in COMPONENTS
                 for f in getattr(LoopPolicy.model_fields[c].annotation, "model_fields")
                 if f"{c}.{f}" not in NOT_SEARCHED)


def _numeric(value: int | float, direction: str, component: str, field: str,
             factor: float | None = None) -> int | float:
    """`up`/`down` by STEP_FACTOR, or times `factor`; bools flip; clipped to the schema bounds."""
    low, high, strict = space.bounds(space.field_info(component, field))
    if isinstance(value, bool):
        return not value
    if factor is None:
        factor = STEP_FACTOR if direction == "up" else 1 / STEP_FACTOR
    new: float
    if isinstance(value, int):
        new = round(value * factor)
        if new == value:
            new = value + (1 if factor > 1 else -1)
    else:
        new = value * factor if value != 0 else (0.05 if factor > 1 else 0.0)
        new = round(new, 4)
    if low is not None:
        new = max(new, low + (1e-3 if strict else 0))
    if high is not None:
        new = min(new, high)
    return new


def _parse_value(text: str) -> bool | int | float | str:
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


def _coerce(value: bool | int | float | str, current: object) -> bool | int | float | str:
    """A hint's value in the field's type (`=0` on a float field is 0.0; ints stay ints)."""
    if isinstance(current, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    return value


def apply_hint(policy: dict, hint: str) -> str:
    """Apply `component.field:up|down|xF` or `component.field=value` in place; returns a note line.

    A list field takes a comma-separated value (`planning.phases=synthesis,tuning`).

    Raises `ValidationError` for a hint outside that grammar, naming an unknown field, or moving a
    field that holds no number by `up`/`down`/`xF`.
    """
    path, op, raw = (hint.partition("=") if "=" in hint else hint.rpartition(":"))
    factor = None
    if op == ":" and raw.startswith("x"):
        try:
            factor = float(raw[1:])
        except ValueError:
            factor = None
        if factor is None or factor <= 0:
            raise ValidationError(f"bad hint {hint!r}: a factor must be a positive number, as in `:x0.5`")
    if path not in fields() or (op == ":" and factor is None and raw not in ("up", "down")):
        raise ValidationError(f"bad hint {hint!r}: expected component.field:up|down|xF or component.field=value",
                              hint=f"fields: {', '.join(fields()[:4])}, ...")
    component, field = path.split(".", 1)
    old = policy[component][field]
    if op == "=":
        new = [v for v in raw.split(",") if v] if isinstance(old, list) else _coerce(_parse_value(raw), old)
    elif isinstance(old, (int, float)) and not isinstance(old, bool):  # a bool is an int to Python, not to a hint
        new = _numeric(old, raw, component, field, factor)
    else:
        raise ValidationError(f"bad hint {hint!r}: {path} holds {old!r}, not a number to move up, down or by a factor",
                              hint=f"set it instead: {path}=VALUE")
    policy[component][field] = new
    return f"{path}: {old!r} -> {new!r}"


def explore(policy: dict, rng: random.Random, host: str | None = None, scale: float = 1.0) -> str:
    """One random move of a random dimension of the search space (seeded exploration)."""
    by_field: dict[str, list[space.Dim]] = {}
    for dim in space.dims(host or "llm"):
        by_field.setdefault(dim.field, []).append(dim)
    d = rng.choice(by_field[rng.choice(sorted(by_field))])  # fields equally likely, whatever their width
    old = space.get(policy, d)
    new = space.perturb_value(d, old, rng, scale)
    space.put(policy, d, new)
    return f"{d.path}: {old!r} -> {new!r} (exploration)"


def _hint_field(hint: str) -> str:
    """The `component.field` a hint moves (`a.b=3`, `a.b:up`, `a.b:x0.5` -> `a.b`)."""
    return hint.split("=")[0].split(":")[0]


def _usable(evidence: Sequence[EvidenceItem], host: str | None) -> list[EvidenceItem]:
    reads = space.READ_BY[host] if host else (lambda path: True)
    return [e for e in evidence if any(reads(_hint_field(h)) for h in e.hints)]


def _attempt(parent: Parent, evidence: Sequence[EvidenceItem], rng: random.Random, host: str | None,
             scale: float) -> tuple[dict, list[str], list[str]]:
    policy = parent.bundle.loop_policy.model_dump(mode="json")
    usable = _usable(evidence, host)
    notes, cited = [], []
    if usable:
        k = min(len(usable), 1 + (rng.random() < 0.5) + (rng.random() < 0.25), MAX_ITEMS)
        taken: set[str] = set()  # fields an earlier item of this proposal already moved
        for item in rng.sample(usable, k):
            hints = list(item.hints)
            whole = rng.random() < WHOLE_ITEM_PROB
            chosen = hints if whole else rng.sample(hints, rng.randint(1, len(hints)))
            moved = []
            for hint in chosen:
                field = _hint_field(hint)
                if field in taken:
                    continue  # one field, one item: a second item would overwrite the first's arithmetic
                before = repr(policy)
                note = apply_hint(policy, hint)
                if repr(policy) != before:
                    moved.append(note)
            taken.update(_hint_field(h) for h in chosen)
            if moved:
                notes.append("; ".join(moved) + f" [{item.evidence_id}: {item.sentence}]")
                cited.append(item.evidence_id)
    if not cited or rng.random() < EXPLORE_PROB:
        for _ in range(1 + (rng.random() < 0.4)):
            notes.append(explore(policy, rng, host, scale))
    space.repair(policy)
    return policy, notes, cited


def evidence_mutation(proposer: str, parent: Parent, evidence: Sequence[EvidenceItem], *,
                      edge: Edge, generation: int, seed: int, host: str | None = None) -> Proposal:
    """A mutation aimed at the evidence (or pure exploration without any); never raises on bad moves."""
    rng = random.Random(f"{seed}|{parent.ref}|{generation}")
    scale = 1.0 + 0.5 * max(0, generation - 1)  # later generations step further from the retained points
    last = "no move changed the policy"
    for _ in range(MAX_TRIES):
        try:
            policy, notes, cited = _attempt(parent, evidence, rng, host, scale)
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


class BuiltinProposer(Proposer):
    """Deterministic, dependency-free proposer (the embedded default).

    `host` restricts moves to the fields that host agent reads (`space.READ_BY`); None moves
    every field.
    """

    name = NAME

    def __init__(self, host: str | None = None) -> None:
        self.host = host

    def mutate(self, parent: Parent, evidence: Sequence[EvidenceItem], *, edge: Edge,
               generation: int, seed: int) -> Proposal:
        return evidence_mutation(self.name, parent, evidence, edge=edge, generation=generation, seed=seed,
                                 host=self.host)
