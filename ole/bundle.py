"""Bundle = Loop Policy + applicability conditions + provenance (OLE §III-D, Eq. 7).

A bundle has a `name` ("coder"); registration assigns its `version` (1, 2, ... per
name), so a version is never written in the YAML. Its applicability is its **scope**:
`TaskContext` describes one task, `Applicability.matches_task` says whether the bundle
may work it, `Applicability.scope_key` names the scope in one canonical string (parsed
back only by `parse_scope`), `Applicability.specificity` orders scopes (the registry
routes a task to the most specific matching champion) and `Applicability.within` says
whether one scope is a subset of another (a `specialization` child must be strictly
narrower than its parent). References have one grammar,
`NAME[@VERSION]`, parsed only by `parse_ref`. The content hash covers the loop policy and
the applicability conditions, never the provenance, so re-registering the same policy
under the same name dedupes to the existing version (a changed note or lineage alone is
not a new policy, so it gets no new version).

Loading goes YAML -> plain values (`ole.yamlio`, strict) -> JSON -> pydantic in strict
JSON mode: a JSON array fills a tuple field and an ISO string fills a datetime, while
an int never fills a string field and a string never fills a number field.
"""
from __future__ import annotations

import hashlib
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ole.applicability import (APPLICABILITY_NEUTRAL, GENERAL_SCOPE, HOSTS, Applicability, HostKind, TaskContext,
                               parse_scope)
from ole.dotted import flatten
from ole.errors import ValidationError
from ole.loop_policy import COMPONENTS, LoopPolicy
from ole.records import Record as _Record
from ole.records import validate_data
from ole.yamlio import dump_yaml, load_yaml, read_yaml_file

__all__ = ["APPLICABILITY_NEUTRAL", "GENERAL_SCOPE", "HOSTS", "Applicability", "HostKind", "TaskContext", "parse_scope",
           "validate_data"]  # re-exported: the applicability names live in ole.applicability

SCHEMA_VERSION: Final = "1"
Edge = Literal["online", "offline_mutation", "recombination", "manual", "specialization"]
EDGES: tuple[str, ...] = ("online", "offline_mutation", "recombination", "manual", "specialization")
Mode = Literal["online", "offline", "manual"]
EDGE_MODES: dict[str, tuple[str, ...]] = {
    "online": ("online",), "offline_mutation": ("offline",), "recombination": ("offline",),
    "manual": ("manual",), "specialization": ("offline", "online", "manual")}
"""The evolution modes each lineage edge kind may belong to: a specialisation (a child whose
applicability is strictly narrower than its parent's) can come from either engine or a person."""
EDGE_MODE: dict[str, str] = {edge: modes[0] for edge, modes in EDGE_MODES.items()}
"""The default mode of each edge kind (stamped when a file's own mode does not fit the edge)."""
NAME_PATTERN = r"[a-z][a-z0-9_-]{0,63}"
_NAME = re.compile(NAME_PATTERN)
_REF = re.compile(rf"(?P<name>{NAME_PATTERN})(@(?P<version>[1-9][0-9]{{0,8}}))?")
_HASH = re.compile(r"[0-9a-f]{64}")
MIN_HASH_PREFIX = 6
"""Shortest content-hash prefix accepted for a claimed hash (`--expect-hash`): 16^6 contents per
prefix is unique in any registry we know of, and `ole bundle list` prints 12 digits."""


class Provenance(_Record):
    """Where a version came from: its parents, the evidence behind it, and who proposed it."""

    parents: tuple[int, ...] = ()
    """Versions (of the same name) it was derived from: none for a seed, two for recombination."""
    external_parents: tuple[str, ...] = ()
    """Content hashes of parents that are not in this registry: a bundle moved between registries
    (`ole bundle export`/`import`) names its lineage by hash, and a parent that was not imported
    stays named here. An export lists every parent here and no version numbers."""
    edge: Edge | None = None
    """How it was derived: online, offline_mutation, recombination, manual, specialization (a
    strictly narrower applicability than the parent's, checked at registration); null for a seed."""
    mode: Mode = "manual"
    """Evolution mode that produced it; must agree with `edge` (online; offline; manual; any for specialization)."""
    evidence_ids: tuple[str, ...] = ()
    """Ids of the evolution evidence (OLE §III-B) that motivated the change."""
    generation: int = Field(0, ge=0)
    """Offline generation or online round that produced it (0 for seeds and manual edits)."""
    proposer: str = Field("human", min_length=1, max_length=200)
    """Who proposed it: `human`, `builtin`, or `llm:<model>`."""
    created_at: datetime | None = None
    """When it was written (UTC); null in a file to register means "stamp at registration"."""
    note: str = Field("", max_length=4000)
    """Free-text rationale, shown in `ole bundle show` and the lineage."""

    @field_validator("created_at")
    @classmethod
    def _utc(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.utcoffset() is None:
            raise ValueError("created_at needs a time zone, e.g. 2026-01-01T00:00:00Z")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "Provenance":
        wanted = {None: 0, "recombination": 2}.get(self.edge, 1)
        if len(self.parents) + len(self.external_parents) != wanted:
            raise ValueError(f"edge {self.edge!r} needs {wanted} parent(s), got {list(self.parents)}"
                             + (f" and external {list(self.external_parents)}" if self.external_parents else ""))
        bad = [h for h in self.external_parents if not _HASH.fullmatch(h)]
        if bad or len(set(self.external_parents)) != len(self.external_parents):
            raise ValueError(f"external_parents must be distinct sha256 content hashes (64 hex digits), "
                             f"got {list(self.external_parents)}")
        if len(set(self.parents)) != len(self.parents) or any(p < 1 for p in self.parents):
            raise ValueError(f"parents must be distinct versions >= 1, got {list(self.parents)}")
        if self.edge is not None and self.mode not in EDGE_MODES[self.edge]:
            modes = " or ".join(repr(m) for m in EDGE_MODES[self.edge])
            raise ValueError(f"edge {self.edge!r} belongs to mode {modes}, not {self.mode!r}")
        return self


class Bundle(_Record):
    """A loop policy packaged with where it applies and where it came from."""

    schema_version: Literal["1"] = SCHEMA_VERSION
    """Version of the bundle schema; a file written for another version is rejected."""
    name: str = Field(pattern=f"^{NAME_PATTERN}$")
    """Bundle name; all versions of one name form one lineage."""
    description: str = Field("", max_length=4000)
    """What this policy is for, in a sentence or two."""
    loop_policy: LoopPolicy
    """The eight-component loop policy that host agents obey."""
    applicability: Applicability = Applicability()
    """Hosts, envs, budgets and models the policy may be used with."""
    provenance: Provenance = Provenance()
    """Parents, edge kind, evidence and proposer."""

    @property
    def content_hash(self) -> str:
        """sha256 (hex) of the canonical JSON of loop_policy + applicability (not provenance).

        Fields added to the schema later are left out while they hold the value that reproduces
        the old behaviour (`ole.loop_policy.HASH_NEUTRAL_DEFAULTS`): a schema addition never
        changes the hash of a bundle already registered.
        """
        from ole.loop_policy import HASH_NEUTRAL_DEFAULTS
        policy = self.loop_policy.model_dump(mode="json")
        for path, neutral in HASH_NEUTRAL_DEFAULTS.items():
            comp, field = path.split(".")
            if policy[comp].get(field) == neutral:
                del policy[comp][field]
        applicability = self.applicability.model_dump(mode="json")
        for field, neutral in APPLICABILITY_NEUTRAL.items():
            if applicability.get(field) == neutral:
                del applicability[field]
        body = _no_negative_zero({"loop_policy": policy, "applicability": applicability})
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()




def bundle_from_data(data: object, *, source: str = "<data>") -> Bundle:
    """Validate a plain-value bundle (as parsed from YAML or built by a proposer)."""
    return validate_data(Bundle, data, source=source)


def load_bundle_yaml(text_or_path: str | Path) -> Bundle:
    """Load one bundle strictly from YAML text, or from a `Path` / a `*.yaml` path string.

    Unknown or duplicate keys, ambiguous YAML 1.1 scalars, tags, aliases and oversized or
    deep documents raise `ValidationError`; nothing is written anywhere.
    """
    is_path = isinstance(text_or_path, Path) or (
        "\n" not in text_or_path and text_or_path.strip().endswith((".yaml", ".yml")))
    if is_path:
        path = Path(text_or_path)
        return bundle_from_data(read_yaml_file(path), source=str(path))
    return bundle_from_data(load_yaml(str(text_or_path), source="<bundle>"), source="<bundle>")


def dump_bundle_yaml(bundle: Bundle) -> str:
    """The bundle as YAML; `load_bundle_yaml(dump_bundle_yaml(b)) == b`."""
    return dump_yaml(bundle.model_dump(mode="json"))


def parse_ref(ref: str) -> tuple[str, int | None]:
    """Split `NAME[@VERSION]` into (name, version or None); the one parser of references."""
    match = _REF.fullmatch(ref.strip()) if isinstance(ref, str) else None
    if match is None:
        raise ValidationError(f"bad bundle reference `{ref}`: expected NAME or NAME@VERSION",
                              hint="names are lower-case letters, digits, - and _; e.g. `coder@2`")
    version = match.group("version")
    return match.group("name"), int(version) if version else None


def check_hash(claimed: str, actual: str, *, what: str = "content hash") -> None:
    """Refuse unless `claimed` (a full sha256 or a prefix of at least `MIN_HASH_PREFIX` hex digits,
    e.g. the 12 that `ole bundle list` prints) is the start of `actual`; the error shows both in full."""
    text = claimed.strip().lower() if isinstance(claimed, str) else ""
    if not re.fullmatch(rf"[0-9a-f]{{{MIN_HASH_PREFIX},64}}", text):
        raise ValidationError(f"claimed {what} `{claimed}` is not a sha256 prefix",
                              hint=f"give {MIN_HASH_PREFIX} to 64 hex digits, e.g. the 12 `ole bundle list` prints")
    if not actual.startswith(text):
        raise ValidationError(f"claimed {what} {text} does not match the content, which hashes to {actual}",
                              hint="check you have the file you meant, or drop the claim")


def format_ref(name: str, version: int) -> str:
    """The canonical `NAME@VERSION` string."""
    return f"{name}@{version}"


class Change(BaseModel):
    """One field that differs between two bundles."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    component: str
    """Loop-policy component (`observation` ... `budget`) or `applicability`."""
    field: str
    """Field path inside the component."""
    old: object
    """Value in the first bundle."""
    new: object
    """Value in the second bundle."""


def diff_bundles(a: Bundle, b: Bundle) -> list[Change]:
    """Per-component field differences from `a` to `b` (policy and applicability only)."""
    changes = []
    parts: list[tuple[str, BaseModel, BaseModel]] = [(c, getattr(a.loop_policy, c), getattr(b.loop_policy, c))
                                                     for c in COMPONENTS]
    parts.append(("applicability", a.applicability, b.applicability))
    for component, left, right in parts:
        old, new = flatten(left.model_dump(mode="json")), flatten(right.model_dump(mode="json"))
        for field in sorted(set(old) | set(new)):
            if old.get(field) != new.get(field):
                changes.append(Change(component=component, field=field, old=old.get(field), new=new.get(field)))
    return changes


def _no_negative_zero(value):
    """`value` with every -0.0 made 0.0: the two compare equal and mean the same setting, so they
    must hash the same (`margin: -0.0` registered as a new version that `bundle diff` called the same)."""
    if isinstance(value, float) and value == 0.0:
        return 0.0
    if isinstance(value, dict):
        return {k: _no_negative_zero(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_no_negative_zero(v) for v in value]
    return value
