"""Applicability: where a bundle may work (hosts, envs or a feature region, budgets, models).

`TaskContext` describes one task, `Applicability.matches_task` says whether a bundle may work it,
`Applicability.scope_key` names the scope in one canonical string (parsed back only by
`parse_scope`), `Applicability.specificity` orders scopes (the registry routes a task to the most
specific matching champion) and `Applicability.within` says whether one scope is a subset of
another. `ole.bundle` re-exports every name here.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from pydantic import Field, model_validator

from ole.errors import ValidationError
from ole.records import Record as _Record
from ole.records import validate_data
from ole.vocab import HOSTS, HostKind

SPACE_KINDS: tuple[str, ...] = ("box", "image", "discrete", "multidiscrete", "multibinary", "tuple", "dict", "text",
                                "other")
"""`evogym.features.SPACE_KINDS`, spelled here so reading a bundle does not load the feature table (a
test checks the two agree)."""
APPLICABILITY_NEUTRAL: dict[str, object] = {"obs_kinds": [], "action_kinds": [], "min_action_dim": None,
                                             "max_action_dim": None, "min_horizon": None, "max_horizon": None}
"""Applicability fields added after the first schema (the feature region), each with the value a
bundle written before it had: left out of the content hash at that value, so a registered bundle
keeps its hash (as `ole.loop_policy.HASH_NEUTRAL_DEFAULTS` for policy fields)."""
GENERAL_SCOPE = "general"
"""Scope key of the applicability that admits every task (all hosts, envs, budgets, models)."""
_SCOPE_VALUE = re.compile(r"[A-Za-z0-9_./:+-]+")


class TaskContext(_Record):
    """The facts about one task that applicability is judged on, fixed at its task boundary."""

    host: HostKind
    """Host agent that will work the task: `builtin`, `llm` or `command`."""
    env: str = Field(min_length=1)
    """Env slug, e.g. `gym/acrobot` (`evogym.envs` grammar)."""
    family: str = Field(min_length=1)
    """Env family as the host defines it (`evogym.envs.resolve(env).family`, e.g. `minigrid`)."""
    budget: int = Field(ge=1)
    """Episode budget of the task."""
    model: str | None = None
    """Model string of an LLM host agent (`openai/gpt-4o-mini`); null for agents without one."""
    obs: str | None = None
    """Kind of the env's observation space (`evogym.features.SpaceKind`); null when not known, which
    no scope naming observation kinds admits."""
    act: str | None = None
    """Kind of the env's action space; null when not known."""
    action_dim: int | None = Field(None, ge=0)
    """Scalar components of one action (`evogym.features`); null when not known."""
    horizon: int | None = Field(None, ge=1)
    """Step cap of one episode; null when not known."""

    def describe(self) -> str:
        """`gym/acrobot (host builtin, family curated, budget 32, no model)` — for reasons and errors."""
        return (f"{self.env} (host {self.host}, family {self.family}, budget {self.budget}, "
                f"{'model ' + self.model if self.model else 'no model'})")

    def feature_text(self) -> str:
        """`family generic, obs box, act box, action dim 6, horizon 1000` (unknown features left out)."""
        parts = [f"family {self.family}"]
        parts += [f"{name} {value}" for name, value in (("obs", self.obs), ("act", self.act),
                                                         ("action dim", self.action_dim), ("horizon", self.horizon))
                  if value is not None]
        return ", ".join(parts)


class Applicability(_Record):
    """Where a bundle may be used (OLE's applicability conditions Z_v): its scope."""

    hosts: tuple[HostKind, ...] = HOSTS
    """Host agents that may run this policy: `builtin`, `llm`, `command`."""
    env_families: tuple[str, ...] = ()
    """Env families (`curated`, `generic`, `minigrid`, `highway`, `robotics`: `evogym.envs`) it
    applies to; with `env_ids` empty too, every env."""
    env_ids: tuple[str, ...] = ()
    """Env slugs (e.g. `gym/acrobot`) it applies to in addition to `env_families`."""
    min_budget: int = Field(1, ge=1)
    """Smallest episode budget of a task it applies to."""
    max_budget: int | None = Field(None, ge=1)
    """Largest episode budget of a task it applies to; null = no upper bound."""
    model_families: tuple[str, ...] = ()
    """LLM families (name prefixes such as `gpt-4o`, `claude`); empty = any model or none."""
    obs_kinds: tuple[str, ...] = ()
    """Region condition: kinds of the observation space (`evogym.features.SpaceKind`: `box`,
    `image`, `discrete`, `dict`, ...) of the envs it applies to; empty = any."""
    action_kinds: tuple[str, ...] = ()
    """Region condition: kinds of the action space; empty = any."""
    min_action_dim: int | None = Field(None, ge=0)
    """Region condition: smallest action dimension (`evogym.features`); null = no lower bound."""
    max_action_dim: int | None = Field(None, ge=0)
    """Region condition: largest action dimension; null = no upper bound."""
    min_horizon: int | None = Field(None, ge=1)
    """Region condition: smallest episode step cap; null = no lower bound."""
    max_horizon: int | None = Field(None, ge=1)
    """Region condition: largest episode step cap; null = no upper bound."""

    @model_validator(mode="after")
    def _consistent(self) -> "Applicability":
        if not self.hosts:
            raise ValueError("hosts must name at least one host (builtin, llm, command)")
        if self.max_budget is not None and self.max_budget < self.min_budget:
            raise ValueError(f"max_budget {self.max_budget} is below min_budget {self.min_budget}")
        for low, high in (("min_action_dim", "max_action_dim"), ("min_horizon", "max_horizon")):
            lo, hi = getattr(self, low), getattr(self, high)
            if lo is not None and hi is not None and hi < lo:
                raise ValueError(f"{high} {hi} is below {low} {lo}")
        for field in ("obs_kinds", "action_kinds"):
            bad = [v for v in getattr(self, field) if v not in SPACE_KINDS]
            if bad:
                raise ValueError(f"{field} value {bad[0]!r} is not a space kind ({', '.join(SPACE_KINDS)})")
        for field in ("hosts", "env_families", "env_ids", "model_families", "obs_kinds", "action_kinds"):
            values = getattr(self, field)
            if len(set(values)) != len(values):
                raise ValueError(f"{field} lists a value twice: {list(values)}")
            bad = [v for v in values if not _SCOPE_VALUE.fullmatch(v)]
            if bad:  # the scope key joins values with , ; = — they must never occur inside one
                raise ValueError(f"{field} value {bad[0]!r} is not a plain name "
                                 "(letters, digits and _ . / : + - only)")
        return self

    @property
    def region(self) -> bool:
        """True when a feature condition is set (families, space kinds, action dimension, horizon):
        the env selector is then `env_ids` **or** every env whose features meet all of them."""
        return bool(self.env_families or self.obs_kinds or self.action_kinds) or any(
            v is not None for v in (self.min_action_dim, self.max_action_dim, self.min_horizon, self.max_horizon))

    @property
    def env_selective(self) -> bool:
        """True when the scope admits only some envs (env ids or a region); False = every env."""
        return bool(self.env_ids) or self.region

    def region_admits(self, family: str | None, obs: str | None = None, act: str | None = None,
                      action_dim: int | None = None, horizon: int | None = None) -> bool:
        """True when an env with these features meets every region condition (an unknown feature
        meets no condition on it). False when no region is set."""
        if not self.region:
            return False
        if self.env_families and family not in self.env_families:
            return False
        if self.obs_kinds and obs not in self.obs_kinds:
            return False
        if self.action_kinds and act not in self.action_kinds:
            return False
        return _in_range(action_dim, self.min_action_dim, self.max_action_dim) and \
            _in_range(horizon, self.min_horizon, self.max_horizon)

    def admits_env(self, env: str, family: str | None, obs: str | None = None, act: str | None = None,
                   action_dim: int | None = None, horizon: int | None = None) -> bool:
        """The env selector: every env when neither ids nor a region is set; else a listed id, or
        an env whose features meet the region."""
        if not self.env_selective:
            return True
        return env in self.env_ids or self.region_admits(family, obs, act, action_dim, horizon)

    def matches(self, host: str, env: str, family: str, budget: int, model: str | None, *,
                obs: str | None = None, act: str | None = None, action_dim: int | None = None,
                horizon: int | None = None) -> bool:
        """True when a task (host agent, env slug, env family, episode budget, LLM, env features)
        is in scope.

        Env: `admits_env` (a listed id, or features meeting every region condition, or any env).
        Model: with `model_families` empty any model (or none) is in scope; otherwise the
        model's name, provider prefix removed, must start with a listed family.
        """
        if host not in self.hosts:
            return False
        if not self.admits_env(env, family, obs, act, action_dim, horizon):
            return False
        if budget < self.min_budget or (self.max_budget is not None and budget > self.max_budget):
            return False
        if not self.model_families:
            return True
        if model is None:
            return False
        base = model.lower().rsplit("/", 1)[-1]
        return any(base.startswith(f.lower()) for f in self.model_families)

    def matches_task(self, ctx: TaskContext) -> bool:
        """True when the task `ctx` is in scope (`matches` on its facts and features)."""
        return self.matches(ctx.host, ctx.env, ctx.family, ctx.budget, ctx.model, obs=ctx.obs, act=ctx.act,
                            action_dim=ctx.action_dim, horizon=ctx.horizon)

    def region_text(self) -> str:
        """The region's conditions in words (`act box, action dim 2-8, horizon 1000-`), or ``."""
        parts = [f"families [{', '.join(self.env_families)}]"] if self.env_families else []
        parts += [f"obs [{', '.join(self.obs_kinds)}]"] if self.obs_kinds else []
        parts += [f"act [{', '.join(self.action_kinds)}]"] if self.action_kinds else []
        if self.min_action_dim is not None or self.max_action_dim is not None:
            parts.append(f"action dim {_range_text(self.min_action_dim, self.max_action_dim)}")
        if self.min_horizon is not None or self.max_horizon is not None:
            parts.append(f"horizon {_range_text(self.min_horizon, self.max_horizon)}")
        return ", ".join(parts)

    def mismatch(self, ctx: TaskContext) -> str | None:
        """Why `ctx` is out of scope (the first failing condition), or None when it matches."""
        if self.matches_task(ctx):
            return None
        if ctx.host not in self.hosts:
            return f"host {ctx.host} is not in hosts [{', '.join(self.hosts)}]"
        if not self.admits_env(ctx.env, ctx.family, ctx.obs, ctx.act, ctx.action_dim, ctx.horizon):
            listed = [f"envs [{', '.join(self.env_ids)}]"] if self.env_ids else []
            listed += [self.region_text()] if self.region else []
            return f"env {ctx.env} ({ctx.feature_text()}) is not in {' or '.join(listed)}"
        if ctx.budget < self.min_budget or (self.max_budget is not None and ctx.budget > self.max_budget):
            return f"budget {ctx.budget} is outside {_budget_text(self.min_budget, self.max_budget)}"
        return (f"model {ctx.model or '(none)'} does not start with any of "
                f"[{', '.join(self.model_families)}]")

    @property
    def scope_key(self) -> str:
        """Canonical name of this scope; equal keys admit exactly the same tasks.

        `general` for the scope that admits every task; otherwise the narrowed conditions
        joined by `;` in the fixed order hosts, families, obs, act, adim, horizon, envs, budget,
        models, each as `field=v1,v2` with sorted values (models lower-cased, since model
        matching ignores case); budget, adim (action dimension) and horizon as `MIN-MAX`, `MIN-`
        or `-MAX`. Example: `hosts=builtin;act=box;adim=2-8;budget=32-128`. `parse_scope` reads it back.
        """
        parts = []
        if set(self.hosts) != set(HOSTS):
            parts.append("hosts=" + ",".join(sorted(self.hosts)))
        if self.env_families:
            parts.append("families=" + ",".join(sorted(self.env_families)))
        if self.obs_kinds:
            parts.append("obs=" + ",".join(sorted(self.obs_kinds)))
        if self.action_kinds:
            parts.append("act=" + ",".join(sorted(self.action_kinds)))
        if self.min_action_dim is not None or self.max_action_dim is not None:
            parts.append(f"adim={_range_key(self.min_action_dim, self.max_action_dim)}")
        if self.min_horizon is not None or self.max_horizon is not None:
            parts.append(f"horizon={_range_key(self.min_horizon, self.max_horizon)}")
        if self.env_ids:
            parts.append("envs=" + ",".join(sorted(self.env_ids)))
        if self.min_budget != 1 or self.max_budget is not None:
            parts.append(f"budget={self.min_budget}-{'' if self.max_budget is None else self.max_budget}")
        if self.model_families:
            parts.append("models=" + ",".join(sorted({m.lower() for m in self.model_families})))
        return ";".join(parts) or GENERAL_SCOPE

    def specificity(self) -> tuple:
        """Sort key of the specificity order: a smaller key is a more specific scope.

        Compared in this order, each step only breaking ties of the one before:
        1. env breadth: env ids only (0) < a region (feature conditions), with or without ids (1)
           < every env (2); in a region, more of its five conditions set (family, obs kind, action
           kind, action dimension, horizon); then fewer families, fewer obs and action kinds,
           narrower action-dimension and horizon ranges; then fewer env ids;
        2. fewer hosts;
        3. a narrower budget range (max - min + 1, unbounded = infinite), then a higher minimum;
        4. fewer model families (none listed = any model = infinite), then longer prefixes
           (`gpt-4o` is narrower than `gpt`);
        5. the scope key, alphabetically — so the order is total and never depends on
           release order.
        The general scope is the unique least specific one: every narrowing lowers a key.
        A scope strictly `within` another usually ranks before it; where listing redundant
        or many values breaks that, a `specialization` is refused at registration.
        """
        ids, families = len(self.env_ids), len(self.env_families)
        tier = 2 if not self.env_selective else (1 if self.region else 0)
        width = math.inf if self.max_budget is None else self.max_budget - self.min_budget + 1
        models = {m.lower() for m in self.model_families}
        adim = _width(self.min_action_dim, self.max_action_dim, 0)
        horizon = _width(self.min_horizon, self.max_horizon, 1)
        unset = (not families, not self.obs_kinds, not self.action_kinds,
                 self.min_action_dim is None and self.max_action_dim is None,
                 self.min_horizon is None and self.max_horizon is None)
        free = sum(unset) if tier == 1 else 0
        region = (families, len(self.obs_kinds) or math.inf, len(self.action_kinds) or math.inf, adim, horizon) \
            if tier == 1 else (families, 0, 0, 0, 0)
        return (tier, free, *region, ids, len(self.hosts), width, -self.min_budget, len(models) or math.inf,
                -sum(map(len, models)), self.scope_key)

    def within(self, other: "Applicability", *, family_of: Callable[[str], str | None] | None = None,
               features_of: Callable[[str], Any] | None = None) -> bool:
        """True when every task in this scope is also in `other`'s (subset, not necessarily strict).

        A region is within another region when each of the other's conditions is implied by this
        one's (its families, kinds and ranges inside the other's; families are opaque sets). An env
        id is within `other` if `other` lists it, or its features meet `other`'s region — which needs
        `features_of` (env slug -> an object with family, obs, act, action_dim, horizon, or None
        when unknown; `evogym.features.features_of`) or, for a family-only region, `family_of`;
        without either only a listed id counts. Model families nest by prefix (`gpt-4o-mini` is
        within `gpt-4o`).
        """
        if not set(self.hosts) <= set(other.hosts):
            return False
        if self.min_budget < other.min_budget or (
                other.max_budget is not None and (self.max_budget is None or self.max_budget > other.max_budget)):
            return False
        if other.model_families:
            if not self.model_families:
                return False
            if not all(any(m.lower().startswith(o.lower()) for o in other.model_families)
                       for m in self.model_families):
                return False
        if not other.env_selective:
            return True
        if not self.env_selective:
            return False
        if self.region and not (other.region and self._region_within(other)):
            return False
        return all(env in other.env_ids or other._admits_id(env, family_of, features_of) for env in self.env_ids)

    def _region_within(self, other: "Applicability") -> bool:
        """Every condition of `other`'s region is implied by this region's."""
        for mine, theirs in ((self.env_families, other.env_families), (self.obs_kinds, other.obs_kinds),
                             (self.action_kinds, other.action_kinds)):
            if theirs and not (mine and set(mine) <= set(theirs)):
                return False
        return _range_within(self.min_action_dim, self.max_action_dim, other.min_action_dim, other.max_action_dim) \
            and _range_within(self.min_horizon, self.max_horizon, other.min_horizon, other.max_horizon)

    def _admits_id(self, env: str, family_of: Callable[[str], str | None] | None,
                   features_of: Callable[[str], Any] | None) -> bool:
        """Whether this scope's region admits env id `env` (False when its features are unknown)."""
        if not self.region:
            return False
        found = features_of(env) if features_of is not None else None
        if found is not None:
            return self.region_admits(found.family, found.obs, found.act, found.action_dim, found.horizon)
        if family_of is None:
            return False
        return self.region_admits(family_of(env)) if not _beyond_family(self) else False

    def narrower_than(self, other: "Applicability", *, family_of: Callable[[str], str | None] | None = None,
                      features_of: Callable[[str], Any] | None = None) -> bool:
        """True when this scope is a strict subset of `other`'s (what a specialisation must be)."""
        return self.within(other, family_of=family_of, features_of=features_of) and \
            not other.within(self, family_of=family_of, features_of=features_of)


def _beyond_family(a: Applicability) -> bool:
    """True when a region has conditions other than families (a family lookup cannot decide it)."""
    return bool(a.obs_kinds or a.action_kinds) or any(
        v is not None for v in (a.min_action_dim, a.max_action_dim, a.min_horizon, a.max_horizon))


def _in_range(value: int | None, low: int | None, high: int | None) -> bool:
    """`value` within [low, high] (None bounds are open); an unknown value is in no bounded range."""
    if low is None and high is None:
        return True
    if value is None:
        return False
    return (low is None or value >= low) and (high is None or value <= high)


def _range_within(low: int | None, high: int | None, other_low: int | None, other_high: int | None) -> bool:
    """[low, high] inside [other_low, other_high] (None = open)."""
    if other_low is not None and (low is None or low < other_low):
        return False
    return other_high is None or (high is not None and high <= other_high)


def _width(low: int | None, high: int | None, floor: int) -> float:
    """Width of a condition range for the specificity order: high - low + 1; unbounded or unset =
    infinite (an unset condition is also counted as free by `specificity`)."""
    if high is None:
        return math.inf
    return high - (floor if low is None else low) + 1


def _range_key(low: int | None, high: int | None) -> str:
    return f"{'' if low is None else low}-{'' if high is None else high}"


def _range_text(low: int | None, high: int | None) -> str:
    if low is not None and low == high:
        return str(low)
    return f"{'' if low is None else low}–{'∞' if high is None else high}"


def _budget_text(low: int, high: int | None) -> str:
    return f"{low}–{'∞' if high is None else high}"


_SCOPE_FIELDS = {"hosts": "hosts", "families": "env_families", "obs": "obs_kinds", "act": "action_kinds",
                 "envs": "env_ids", "models": "model_families"}
_SCOPE_RANGES = {"adim": ("min_action_dim", "max_action_dim"), "horizon": ("min_horizon", "max_horizon")}
_SCOPE_ORDER = ("hosts", "families", "obs", "act", "adim", "horizon", "envs", "budget", "models")


def parse_scope(text: str) -> Applicability:
    """The applicability a scope key names (`general`, or e.g. `families=minigrid;budget=1-64`).

    The one parser of scope keys; `parse_scope(a.scope_key).scope_key == a.scope_key`.
    """
    hint = ("`general`, or fields hosts=, families=, obs=, act=, adim=[MIN]-[MAX], horizon=[MIN]-[MAX], envs=, "
            "budget=MIN-[MAX], models= joined by `;`, e.g. `families=minigrid` or `act=box;adim=2-8` "
            "— see `ole champion show`")
    if not isinstance(text, str) or not text.strip():
        raise ValidationError("empty scope", hint=hint)
    text = text.strip()
    if text == GENERAL_SCOPE:
        return Applicability()
    data: dict[str, object] = {}
    seen: list[str] = []
    for part in text.split(";"):
        field, sep, value = part.partition("=")
        if not sep or not value:
            raise ValidationError(f"bad scope `{text}`: `{part}` is not FIELD=VALUE", hint=hint)
        if field not in _SCOPE_ORDER:
            raise ValidationError(f"bad scope `{text}`: unknown field `{field}`", hint=hint)
        if field in seen:
            raise ValidationError(f"bad scope `{text}`: `{field}` given twice", hint=hint)
        seen.append(field)
        if field == "budget":
            match = re.fullmatch(r"([1-9][0-9]*)-([1-9][0-9]*)?", value)
            if match is None:
                raise ValidationError(f"bad scope `{text}`: budget `{value}` is not MIN-MAX or MIN-", hint=hint)
            data["min_budget"] = int(match.group(1))
            data["max_budget"] = int(match.group(2)) if match.group(2) else None
        elif field in _SCOPE_RANGES:
            match = re.fullmatch(r"([0-9]+)?-([0-9]+)?", value)
            if match is None or not (match.group(1) or match.group(2)):
                raise ValidationError(f"bad scope `{text}`: {field} `{value}` is not MIN-MAX, MIN- or -MAX", hint=hint)
            low, high = _SCOPE_RANGES[field]
            data[low] = int(match.group(1)) if match.group(1) else None
            data[high] = int(match.group(2)) if match.group(2) else None
        else:
            data[_SCOPE_FIELDS[field]] = value.split(",")
    if seen != sorted(seen, key=_SCOPE_ORDER.index):
        raise ValidationError(f"bad scope `{text}`: fields must come in the order {', '.join(_SCOPE_ORDER)}",
                              hint=hint)
    return validate_data(Applicability, data, source=f"scope `{text}`")
