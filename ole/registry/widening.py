"""Widening a release: one more scope for a released version, on evidence beyond its gate's pairs.

A release is bounded by the pairs its gate sampled (`ole.coverage`): env ids. Two kinds of
evidence may widen it afterwards, each by one recorded `release` event of the same version into
an *additional* scope (`payload.widening`), so the scopes it already serves are untouched and a
rollback of the widening (that scope's pointer removed) restores exactly the narrower reach:

* **transfer**: the version's own gate decision paired it on envs held out from the search and
  claimed a region of task features (`ole.transfer`, `TransferDecision.regions`); the widening's
  scope must be one of those regions.
* **canary**: a task of an env outside every scope, whose features lie in a region of the
  decision's transfer evidence (claimed or candidate: a gain there and no loss), is handed to the
  version as a staged canary of the one-env scope; the monitor's verdict promotes it (the scope
  is widened by that env) or rolls it back (the env is recorded as excluded).

The scope must lie inside the version's own applicability (its `reach`, `ole.evolve.scoping`).
Pure: the registry calls `widening_evidence` inside its write transaction.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from ole.bundle import Applicability, parse_scope
from ole.errors import Conflict, ValidationError
from ole.registry.records import Event, Key
from ole.verdicts import is_release, verdict_of

WideningKind = Literal["transfer", "canary"]


def transfer_regions(decision: Event, *, candidates: bool = False) -> list[dict[str, Any]]:
    """The regions a stored gate decision's transfer part claimed (with `candidates`, also its candidate
    regions), as stored."""
    transfer = decision.payload.get("transfer") or {}
    found = list(transfer.get("regions") or [])
    return found + list(transfer.get("candidates") or []) if candidates else found


def widening_evidence(events: Sequence[Event], key: Key, scope: str, kind: WideningKind, decision_seq: int,
                      own: Applicability, features_of: Callable[[str], Any]) -> dict[str, Any]:
    """The `evidence` of a widening release of version `key` into `scope`, checked against the
    version's events (raises `ValidationError` when the evidence does not support the scope)."""
    decision = next((e for e in events if e.seq == decision_seq), None)
    if decision is None or decision.kind != "gate_decision" or decision.key != key:
        raise ValidationError(f"event #{decision_seq} is not a gate decision of this version",
                              hint="widen on the version's own gate decision")
    if not is_release(verdict_of(decision.payload)):
        raise ValidationError(f"gate decision #{decision_seq} did not release the version: nothing to widen")
    wanted = parse_scope(scope)
    if not wanted.within(own, features_of=features_of):
        raise ValidationError(f"scope `{wanted.scope_key}` reaches beyond the version's own applicability "
                              f"`{own.scope_key}`", hint="a widening never goes beyond where the version may apply")
    if kind == "transfer":
        claimed = {r["scope"]: r for r in transfer_regions(decision)}
        if wanted.scope_key not in claimed:
            raise ValidationError(f"gate decision #{decision_seq} claimed no region `{wanted.scope_key}`",
                                  hint=f"claimed: {', '.join(claimed) or 'none'}")
        region = claimed[wanted.scope_key]
        return {"decision_seq": decision_seq, "verdict": "release", "bound": wanted.scope_key, "widening": kind,
                "covered": f"transfer region of {len(region['envs'])} held-out envs ({', '.join(region['envs'])}); "
                           f"harm share < {region['harm_ucb']:.0%} at {region['level']:.0%} confidence"}
    if len(wanted.env_ids) != 1 or wanted.region:
        raise ValidationError(f"a canary widening adds one env id, not `{wanted.scope_key}`")
    env = wanted.env_ids[0]
    found = features_of(env)
    inside = [r for r in transfer_regions(decision, candidates=True)
              if found is not None and parse_scope(r["scope"]).region_admits(
                  found.family, found.obs, found.act, found.action_dim, found.horizon)]
    if not inside:
        raise ValidationError(f"{env} lies in no region of gate decision #{decision_seq}'s transfer evidence",
                              hint="a canary widening tries a change only where its transfer evidence gained")
    return {"decision_seq": decision_seq, "verdict": "release", "bound": wanted.scope_key, "widening": kind,
            "covered": f"{env} lies in the transfer region `{inside[0]['scope']}`; a watched canary decides"}


def check_widening(pinned: Key | None, key: Key, scope: str, where: str) -> None:
    """Refuse a widening into a scope the version already holds."""
    if pinned == key:
        raise Conflict(f"version already serves {where}", hint=f"see `ole champion show` (scope `{scope}`)")
