"""Re-apply the current transfer rule (`ole/gate.yaml`'s `transfer`) to every transfer decision a
registry recorded, from the decisions' own per-env cells (`ole.transfer.rejudge`: no run), and
print what was claimed then and what the rule claims now.

    python experiments/transfer_rejudge.py --root experiments/out/travel2/seed/root
"""
from __future__ import annotations

import argparse

from ole.applicability import parse_scope
from ole.gate import load_config
from ole.registry import Registry
from ole.transfer import TransferDecision, rejudge


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", required=True, help="registry root")
    p.add_argument("--gate-config", default=None, help="gate YAML (default ole/gate.yaml)")
    args = p.parse_args()
    cfg = load_config(args.gate_config).transfer
    with Registry(args.root) as reg:
        for event in reg.events(kind="gate_decision"):
            recorded = event.payload.get("transfer")
            if not recorded:
                continue
            old = TransferDecision.model_validate(recorded)
            bound = parse_scope(event.payload["bound"])
            base = bound.model_copy(update={"env_ids": (), "min_budget": 1, "max_budget": None})
            budgets = sorted({c.budget for r in old.envs for c in r.cells})
            new = rejudge(old, cfg, base, budgets)
            print(f"#{event.seq} {event.ref}: recorded {[r.scope for r in old.regions] or 'no region'}")
            print(f"  now ({new.rule}): {[r.scope for r in new.regions] or 'no region'}")
            for r in new.envs:
                if r.role == "transfer":
                    print(f"    {r.env}: {r.verdict} {r.mean_r:+.4f}")


if __name__ == "__main__":
    main()
