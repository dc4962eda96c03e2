"""Nested documents as dotted names (standard library only).

`flatten({"suite": {"envs": [...]}, "budget": 32})` is `{"suite.envs": [...], "budget": 32}`: a
mapping's keys join with dots, anything else (lists included) is a leaf. The one flattening behind
bundle diffs (`ole.bundle.diff_bundles`), a resumed run's settings check
(`ole.evolve.store.differences`) and tracked parameters (`ole.tracking.flatten`).
"""
from __future__ import annotations


def flatten(doc: object, prefix: str = "") -> dict[str, object]:
    """Dotted name -> leaf value of `doc` (`prefix` names `doc` itself; a non-mapping is one leaf)."""
    if not isinstance(doc, dict):
        return {prefix: doc}
    out: dict[str, object] = {}
    for key, value in doc.items():
        out.update(flatten(value, f"{prefix}.{key}" if prefix else str(key)))
    return out
