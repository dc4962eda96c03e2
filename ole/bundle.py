"""Bundle = Loop Policy + applicability conditions + provenance (OLE §III-D, Eq. 7).

A bundle has a `name` ("coder"); registration assigns its `version` (1, 2, ... per
name), so a version is never written in the YAML. References have one grammar,
`NAME[@VERSION]`, parsed only by `parse_ref`. The content hash covers the loop policy and
the applicability conditions, never the provenance, so re-registering the same policy
under the same name dedupes to the existing version (reliability.md B6).

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
from typing import Literal

import pydantic
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ole.errors import ValidationError
from ole.loop_policy import COMPONENTS, LoopPolicy
from ole.yamlio import dump_yaml, load_yaml, read_yaml_file

SCHEMA_VERSION = "1"
HOSTS = ("builtin", "llm", "command")
Host = Literal["builtin", "llm", "command"]
Edge = Literal["online", "offline_mutation", "recombination", "manual"]
Mode = Literal["online", "offline", "manual"]
EDGE_MODE: dict[str, str] = {"online": "online", "offline_mutation": "offline",
                             "recombination": "offline", "manual": "manual"}
"""The evolution mode each lineage edge kind belongs to."""
NAME_PATTERN = r"[a-z][a-z0-9_-]{0,63}"
_NAME = re.compile(NAME_PATTERN)
_REF = re.compile(rf"(?P<name>{NAME_PATTERN})(@(?P<version>[1-9][0-9]{{0,8}}))?")


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)


class Applicability(_Record):
    """Where a bundle may be used (OLE's applicability conditions Z_v)."""

    hosts: tuple[Host, ...] = HOSTS
    """Host agents that may run this policy: `builtin`, `llm`, `command`."""
    env_families: tuple[str, ...] = ()
    """Env families (e.g. `classic_control`) it applies to; with `env_ids` empty too, every env."""
    env_ids: tuple[str, ...] = ()
    """Env slugs (e.g. `gym/acrobot`) it applies to in addition to `env_families`."""
    min_budget: int = Field(1, ge=1)
    """Smallest episode budget of a task it applies to."""
    max_budget: int | None = Field(None, ge=1)
    """Largest episode budget of a task it applies to; null = no upper bound."""
    model_families: tuple[str, ...] = ()
    """LLM families (name prefixes such as `gpt-4o`, `claude`); empty = any model or none."""

    @model_validator(mode="after")
    def _consistent(self) -> "Applicability":
        if not self.hosts:
            raise ValueError("hosts must name at least one host (builtin, llm, command)")
        if self.max_budget is not None and self.max_budget < self.min_budget:
            raise ValueError(f"max_budget {self.max_budget} is below min_budget {self.min_budget}")
        for field in ("hosts", "env_families", "env_ids", "model_families"):
            values = getattr(self, field)
            if len(set(values)) != len(values):
                raise ValueError(f"{field} lists a value twice: {list(values)}")
        return self

    def matches(self, host: str, env: str, family: str, budget: int, model: str | None) -> bool:
        """True when a task (host agent, env slug, env family, episode budget, LLM) is in scope.

        Env: in scope when both lists are empty, or the family is listed, or the slug is.
        Model: with `model_families` empty any model (or none) is in scope; otherwise the
        model's name, provider prefix removed, must start with a listed family.
        """
        if host not in self.hosts:
            return False
        if (self.env_families or self.env_ids) and family not in self.env_families and env not in self.env_ids:
            return False
        if budget < self.min_budget or (self.max_budget is not None and budget > self.max_budget):
            return False
        if not self.model_families:
            return True
        if model is None:
            return False
        base = model.lower().rsplit("/", 1)[-1]
        return any(base.startswith(f.lower()) for f in self.model_families)


class Provenance(_Record):
    """Where a version came from: its parents, the evidence behind it, and who proposed it."""

    parents: tuple[int, ...] = ()
    """Versions (of the same name) it was derived from: none for a seed, two for recombination."""
    edge: Edge | None = None
    """How it was derived: online, offline_mutation, recombination, manual; null for a seed."""
    mode: Mode = "manual"
    """Evolution mode that produced it; must agree with `edge` (online; offline; manual)."""
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
        if len(self.parents) != wanted:
            raise ValueError(f"edge {self.edge!r} needs {wanted} parent(s), got {list(self.parents)}")
        if len(set(self.parents)) != len(self.parents) or any(p < 1 for p in self.parents):
            raise ValueError(f"parents must be distinct versions >= 1, got {list(self.parents)}")
        if self.edge is not None and EDGE_MODE[self.edge] != self.mode:
            raise ValueError(f"edge {self.edge!r} belongs to mode {EDGE_MODE[self.edge]!r}, not {self.mode!r}")
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
        """sha256 (hex) of the canonical JSON of loop_policy + applicability (not provenance)."""
        body = {"loop_policy": self.loop_policy.model_dump(mode="json"),
                "applicability": self.applicability.model_dump(mode="json")}
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
        return hashlib.sha256(canonical.encode()).hexdigest()


def _describe(error: pydantic.ValidationError, source: str) -> ValidationError:
    items = error.errors()
    first = items[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    got = first.get("input")
    got_text = "" if first["type"] in ("missing", "extra_forbidden") or isinstance(got, dict) else f" (got {got!r})"
    more = f"; {len(items) - 1} more error(s)" if len(items) > 1 else ""
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown field"
    return ValidationError(f"{source}: {where}: {message}{got_text}{more}",
                           hint="see docs/loop-policy.md for every field and its range")


def validate_data(model: type[BaseModel], data: object, *, source: str = "<data>"):
    """Validate plain values (dicts, lists, scalars) against a strict record model."""
    try:
        text = json.dumps(data, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(f"{source}: not plain data: {exc}", hint="use strings, numbers, lists, maps") from None
    try:
        return model.model_validate_json(text)
    except pydantic.ValidationError as exc:
        raise _describe(exc, source) from None


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
    return bundle_from_data(load_yaml(text_or_path, source="<bundle>"), source="<bundle>")


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


def format_ref(name: str, version: int) -> str:
    """The canonical `NAME@VERSION` string."""
    return f"{name}@{version}"


def _flatten(prefix: str, value: object, out: dict[str, object]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else key, item, out)
    else:
        out[prefix] = value


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
    parts = [(c, getattr(a.loop_policy, c), getattr(b.loop_policy, c)) for c in COMPONENTS]
    parts.append(("applicability", a.applicability, b.applicability))
    for component, left, right in parts:
        old, new = {}, {}
        _flatten("", left.model_dump(mode="json"), old)
        _flatten("", right.model_dump(mode="json"), new)
        for field in sorted(set(old) | set(new)):
            if old.get(field) != new.get(field):
                changes.append(Change(component=component, field=field, old=old.get(field), new=new.get(field)))
    return changes
