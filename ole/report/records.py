"""What a report shows, as frozen records: built by `ole.report.collect`, drawn by the renderers.

Nothing here reads a registry or a workdir: collecting fills these records once, and the
charts, the lineage SVG and the pages only present them (compute first, then present).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import ClassVar

from ole.registry.records import Tenure
from ole.verdicts import Verdict, is_release

STATUSES = ("seed", "registered", "evaluated", "gated", "rejected", "released", "canary", "active", "rolled_back",
            "retired", "damaged")
"""Display statuses, in legend order: the registry's statuses plus `seed` (a seed nothing has
happened to yet) and `damaged` (its blob is missing or fails its hash check)."""
STATUS_TEXT = {"rolled_back": "rolled back", "canary": "canary (staged)"}
"""Statuses whose display words differ from their key."""


@dataclass(frozen=True)
class Interval:
    """A mean relative change with its interval, as recorded."""

    mean_r: float
    """Mean relative change r of the pairs."""
    low: float | None
    """Lower end of the interval (None: the record gives none)."""
    high: float | None
    """Upper end of the interval (None: the record gives none)."""
    level: float | None
    """Two-sided coverage of [low, high], e.g. 0.8; None when the record gives no interval."""
    n: int
    """Pairs behind it."""
    source: str
    """Where it comes from: `gate` (a decision record) or the evaluation stage name."""


class _Paged:
    """A report item with a page of its own, named from its fields by the class's `PAGE` pattern."""

    PAGE: ClassVar[str]

    @property
    def page(self) -> str:
        """The file name of its page in the report folder."""
        return self.PAGE.format_map(vars(self))


@dataclass(frozen=True)
class Evaluation:
    """One `evaluation` event of a version: its pair statistics as recorded (`ole.paired.PairStats`)."""

    seq: int
    """Event seq."""
    ts: datetime
    """When it was recorded."""
    stage: str
    """Driver stage (`search-g1-r0`, `offline-look1`, `monitor`, ...)."""
    champion: str
    """The version the pairs compared against."""
    n: int
    """Pairs."""
    mean_r: float | None
    """Mean r of the pairs."""
    cvar: float | None
    """CVaR of r (the gate's tail share)."""
    cost: float | None
    """Episode cost ratio, challenger over champion."""
    r: tuple[float, ...]
    """Per-pair r, in pair order."""
    instances: tuple[str, ...]
    """Instance keys of the pairs."""


@dataclass(frozen=True)
class ParentDiff:
    """The YAML of a version against one parent: unified diff lines and the field changes."""

    parent: str
    """The parent's ref."""
    lines: tuple[str, ...]
    """Unified diff of the two YAML documents."""
    changes: tuple[tuple[str, str, str, str], ...]
    """(component, field, old, new) per changed field of loop policy and applicability."""


@dataclass(frozen=True)
class Version(_Paged):
    """One registered version as the report shows it."""

    PAGE: ClassVar[str] = "version-{name}-{version}.html"

    ref: str
    """`NAME@VERSION`."""
    name: str
    """Bundle name."""
    version: int
    """Version number."""
    status: str
    """Display status (see `STATUSES`)."""
    registry_status: str
    """The registry's own status of the version."""
    seed: bool
    """Registered from a seed file."""
    parents: tuple[str, ...]
    """Parent refs (provenance)."""
    edge: str | None
    """Lineage edge it was made by (None for a seed)."""
    generation: int
    """Proposal generation."""
    proposer: str
    """Who proposed it."""
    note: str
    """What was changed and why."""
    registered_at: datetime
    """Registration time."""
    content_hash: str
    """Content hash of the bundle."""
    scope: str
    """The scope key (`Applicability.scope_key`): `general` when unrestricted."""
    scope_fields: tuple[tuple[str, str], ...]
    """(field, value) of every applicability field that narrows the scope."""
    yaml: str | None
    """The bundle YAML (None when its blob is damaged)."""
    damage: str | None
    """Why the blob is damaged (None when it is not)."""
    diffs: tuple[ParentDiff, ...]
    """Against each loadable parent."""
    evaluations: tuple[Evaluation, ...]
    """Its evaluation events, in order."""
    gate_seqs: tuple[int, ...]
    """Seqs of the gate decisions that judged it."""
    interval: Interval | None
    """The paired mean r shown on the lineage: from the last gate decision, else the last evaluation."""


@dataclass(frozen=True)
class Check:
    """One check of a gate criterion: what was measured, what was required, whether it held."""

    what: str
    """The measured quantity."""
    measured: str
    """Its value, formatted."""
    required: str
    """The bound it had to meet, formatted."""
    passed: bool
    """Whether it held (as the gate recorded)."""


@dataclass(frozen=True)
class CriterionView:
    """One gate criterion of a decision, with its checks."""

    name: str
    """benefit, evidence, tail or cost."""
    passed: bool
    """Whether the criterion held."""
    checks: tuple[Check, ...]
    """Its checks, measured vs required."""
    reasons: tuple[str, ...]
    """The failed checks as the gate worded them."""


@dataclass(frozen=True)
class GatePair:
    """One row of a gate page's per-pair table."""

    instance: str
    """Env, pool seed, agent seed and budget, in words."""
    env: str
    """Env slug."""
    pool_seed: int | None
    """Pool seed of the task."""
    agent_seed: int | None
    """Agent seed of the run condition."""
    family: str
    """Env family."""
    q_champion: float | None
    """Champion's value score (None: it failed)."""
    q_challenger: float | None
    """Challenger's value score (None: it failed)."""
    q_source: str
    """How both q were computed (normalized or raw)."""
    delta: float | None
    """q_challenger − q_champion."""
    r: float
    """Relative change."""
    failure: str
    """Which side failed to score."""
    champion_trace: str
    """Trace id of the champion's run."""
    challenger_trace: str
    """Trace id of the challenger's run."""


@dataclass(frozen=True)
class Gate(_Paged):
    """One recorded gate decision."""

    PAGE: ClassVar[str] = "gate-{seq}.html"
    seq: int
    """Event seq of the decision."""
    ts: datetime
    """When it was recorded."""
    champion: str
    """Champion ref."""
    challenger: str
    """Challenger ref."""
    verdict: Verdict
    """The gate's verdict (`ole.verdicts`; records that said it otherwise are read by `verdict_of`)."""
    reasons: tuple[str, ...]
    """Why: the failed checks, or `all criteria hold`."""
    interval: Interval
    """Mean r and its interval."""
    win_rate: float | None
    """Share of pairs with r > 0 (ties half)."""
    p_value: float | None
    """The benefit test's one-sided p-value."""
    test: str
    """Benefit test (wilcoxon or bootstrap)."""
    alpha: float | None
    """The benefit test's level that decided: the adaptive look's share, else the config's alpha."""
    pairs: tuple[GatePair, ...]
    """Every pair judged."""
    criteria: tuple[CriterionView, ...]
    """The four criteria."""
    config: dict
    """The gate config applied, as recorded."""
    looks: tuple[dict, ...] = ()
    """Every look of an adaptive gate sample (n_pairs, alpha, p_value, mean_r, verdict, extend), as recorded."""
    cells: tuple[dict, ...] = ()
    """What the pairs covered per (env, budget): pairs, ties, mean r, verdict (`ole.coverage`)."""
    bound: str | None = None
    """Scope key of the widest scope the pairs support (a release on this decision is never wider)."""
    ablation: dict | None = None
    """The recorded ablation of the challenger (what was cut before gating), if any."""

    @property
    def released(self) -> bool:
        """True when the verdict lets the challenger be released."""
        return is_release(self.verdict)


@dataclass(frozen=True)
class RunCurve:
    """Best-so-far validation score of one host run against cumulative train episodes."""

    run_id: str
    """Host run id (the trace id)."""
    env: str
    """Env slug."""
    bundle: str
    """Ref of the bundle that ran ("?" when unknown)."""
    pool_seed: int | None
    """Pool seed of the task."""
    xs: tuple[int, ...]
    """Cumulative train episodes."""
    ys: tuple[float, ...]
    """Best validation score so far."""
    final_score: float | None
    """Held-out score of the run."""


@dataclass(frozen=True)
class EnvAnchors:
    """The reference scores of one env the curves are drawn against."""

    env: str
    """Env slug."""
    random: float | None
    """Random-policy baseline (None outside Core16)."""
    paper_best: float | None
    """Best agent score in the paper's table."""
    paper_best_agent: str | None
    """The agent that scored it."""


@dataclass(frozen=True)
class ReportData:
    """What one report shows."""

    root: str
    """Registry root."""
    workdirs: tuple[str, ...]
    """Evolve workdirs whose runs were read."""
    generated_at: datetime
    """When the report was collected."""
    versions: tuple[Version, ...]
    """Every registered version."""
    gates: tuple[Gate, ...]
    """Every gate decision."""
    curves: tuple[RunCurve, ...]
    """Every host run still in a workdir."""
    anchors: tuple[EnvAnchors, ...]
    """Reference scores of the curves' envs."""
    champions: dict[str, str]
    """Channel -> its general champion ref."""
    history: dict[str, tuple[Tenure, ...]]
    """Channel -> who was champion when."""
    warnings: tuple[str, ...] = field(default=())
    """What could not be read."""

    def version(self, ref: str) -> Version | None:
        """The version `ref`, if registered."""
        return next((v for v in self.versions if v.ref == ref), None)
