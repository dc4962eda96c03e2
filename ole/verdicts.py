"""The gate's verdict vocabulary, once, for everything that writes or reads a decision.

The gate decides `release`, `reject` or `indecisive` (`ole.gate`); the engine records that word
in the registry's `gate_decision` event and in its resume store, the registry derives a
version's status from it (`release` -> `evaluated`, anything else -> `rejected`), and the report
and the trackers show it. Records written before the word was stored everywhere said it in other
words: `accepted: true|false` (the registry's own key, still written beside the verdict) or
`decision: "accept"|"reject"` (hand-made records); `verdict_of` reads all of them.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Literal, get_args

Verdict = Literal["release", "reject", "indecisive"]
"""release: every criterion holds. reject: benefit, tail or cost failed. indecisive: the evidence
is too thin to judge (too few pairs or families, unverified runs, leaked instances)."""
VERDICTS: tuple[str, ...] = get_args(Verdict)
"""Every verdict, in the order above."""
_OLD_DECISIONS: dict[str, Verdict] = {"accept": "release", "reject": "reject"}
"""`decision` values of hand-made records, as verdicts."""


def verdict_of(record: Mapping[str, object]) -> Verdict | None:
    """The verdict a stored decision record states: its `verdict`, else its `accepted` flag
    (True -> `release`, False -> `reject`), else its `decision` word; None when it states none."""
    said = record.get("verdict")
    if isinstance(said, str) and said in VERDICTS:
        return said  # type: ignore[return-value]  # checked against VERDICTS just above
    accepted = record.get("accepted")
    if isinstance(accepted, bool):
        return "release" if accepted else "reject"
    decision = record.get("decision")
    return _OLD_DECISIONS.get(decision) if isinstance(decision, str) else None


def is_release(verdict: Verdict | None) -> bool:
    """True for the one verdict that lets a version be released."""
    return verdict == "release"
