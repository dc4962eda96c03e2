"""An evolve you can name, replay and list: its settings, the resolved copy in its workdir, its outcome.

`EvolveSettings` holds every `ole evolve` flag under its flag's name (`--gate-pools` is
`gate_pools`), each None until given. The command line, a `--config FILE` (YAML with the same
keys; a flag given on the line wins over the file) and the Python API (`ole.evolve(**settings)`)
all produce one. `resolve` fills every setting the mode reads with its default, so the copy an
evolve writes into its workdir (`evolve.yaml`) names everything that determined it:
`ole evolve --config WORKDIR/evolve.yaml` resumes that evolve (same settings, same fingerprint:
stored evaluations are not spent again). At the end the evolve writes `outcome.json` beside it
(what `ole evolve --json` printed); `ole evolve ls` lists the workdirs of one registry root with
their outcome (`list_evolves`).
"""
from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict

from evogym.durable import atomic_write
from ole.errors import ValidationError
from ole.vocab import HostKind

if TYPE_CHECKING:
    from ole.cost import CostEstimate
    from ole.evolve.config import EvolveConfig
    from ole.gate import GateConfig

SETTINGS_FILE = "evolve.yaml"
"""The resolved settings an evolve writes into its workdir (`--config` reads it back)."""
OUTCOME_FILE = "outcome.json"
"""What a finished evolve wrote: its summary (`ole evolve --json`) and when it ended."""
OFFLINE_ONLY = ("population", "generations", "eta", "screen", "max_scopes", "ablate", "transfer_envs",
                "transfer_pools")
"""Search settings online mode never reads (its challengers are proposed one at a time, one scope each)."""
ONLINE_ONLY = ("tasks", "every_k", "gate_on")
"""Stream settings offline mode never reads."""
ONLINE_DEFAULTS: dict[str, Any] = {"tasks": 6, "every_k": 3, "recent": 6, "gate_on": "stream"}
"""The online stream's length, proposal period and proposer window when not given: the one place
(`OnlineConfig`, `ole evolve --mode online` and `ole agent work --online` read them here)."""
BUILTIN_PROPOSERS = ("builtin", "random", "tpe")
"""Proposer names that are not LLM model strings (`ole evolve --proposer`): they call no model."""
DRIVER_DEFAULTS: dict[str, Any] = {"proposer": "builtin", "executor": "local", "execution": "fast",
                                   "traces": "traces"}
"""Defaults of the settings that are not part of `EvolveConfig` (the workdir's: `runs/evolve-MODE`)."""


class EvolveSettings(BaseModel):
    """Every setting of one evolve, named as its `ole evolve` flag; None = not given (its default).
    Strict, as bundles: `budget: '8'` in a config file is refused, not coerced."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)
    mode: Literal["offline", "online"] | None = None
    """offline (archive search over generations) or online (a task stream with ask/tell)."""
    root: str | None = None
    """Registry root (default: the root search of `ole.roots`)."""
    envs: tuple[str, ...] | None = None
    """Env slugs of the suite (default: `ole.evolve.DEFAULT_SUITE`)."""
    profile: str | None = None
    """Host run profile."""
    budget: int | None = None
    """Episode budget of a search run."""
    search_pools: tuple[int, ...] | None = None
    """Pool seeds the proposer sees."""
    gate_pools: tuple[int, ...] | None = None
    """Pool seeds of the gate's first look."""
    gate_budgets: tuple[int, ...] | None = None
    """Episode budgets of every gate instance."""
    transfer_envs: tuple[str, ...] | None = None
    """Envs held out from the search on which a released change is paired with the champion, so its
    release may widen (offline; default `ole.evolve.DEFAULT_TRANSFER` less the search envs; empty: none)."""
    transfer_pools: tuple[int, ...] | None = None
    """Pool seeds of the transfer sample (offline)."""
    agent_seeds: tuple[int, ...] | None = None
    """Agent seeds crossed with every pool."""
    host: HostKind | None = None
    """Host agent of every run."""
    model: str | None = None
    """Model string of the LLM agent."""
    command: tuple[str, ...] | None = None
    """The command agent's command line (host `command`)."""
    population: int | None = None
    """Candidates per generation (offline)."""
    generations: int | None = None
    """Generations (offline)."""
    seed: int | None = None
    """Proposer seed."""
    eta: int | None = None
    """Staged evaluation: keep the best 1/eta per rung (offline)."""
    screen: int | None = None
    """Search instances of the first rung (offline)."""
    max_scopes: int | None = None
    """Most env scopes gated per run (offline)."""
    ablate: bool | None = None
    """Cut each candidate to the changes that carry its gain before gating (offline; `--no-ablation`: false)."""
    proposer: str | None = None
    """builtin, random, tpe, or an LLM model string."""
    gate_config: str | None = None
    """Gate YAML (default: the packaged `ole/gate.yaml`)."""
    channel: str | None = None
    """Release channel."""
    tasks: int | None = None
    """Stream length (online)."""
    every_k: int | None = None
    """A challenger every k tasks (online)."""
    gate_on: Literal["stream", "pools"] | None = None
    """Where an online round's challenger is gated (`ole.evolve.online.OnlineConfig.gate_on`): on the
    stream's next tasks, the stream's run the champion side (`stream`), or on the gate pools."""
    executor: Literal["local", "ray"] | None = None
    """Where runs execute."""
    address: str | None = None
    """Ray cluster address."""
    workers: int | None = None
    """Parallel runs."""
    execution: Literal["fast", "baseline"] | None = None
    """How runs execute (`ole.jobs.EXECUTIONS`), never what they compute."""
    workdir: str | None = None
    """Resume store and host runs (default: `runs/evolve-MODE`)."""
    traces: str | None = None
    """Trace archive."""
    max_episodes: int | None = None
    """Cap on charged episodes."""
    max_wall_s: float | None = None
    """Cap on wall seconds."""
    max_tokens: int | None = None
    """Cap on LLM tokens."""
    max_usd: float | None = None
    """Cap on LLM dollars."""
    track: Literal["mlflow"] | None = None
    """Log the evolve as one MLflow run (the `mlflow` extra)."""
    track_uri: str | None = None
    """MLflow tracking URI."""

    def over(self, base: "EvolveSettings") -> "EvolveSettings":
        """These settings where given, `base`'s elsewhere (a flag on the line wins over its file)."""
        return base.model_copy(update=self.model_dump(exclude_none=True))

    def check_mode(self) -> Literal["offline", "online"]:
        """The mode; a setting the mode never reads is refused, never silently ignored."""
        if self.mode is None:
            raise ValidationError("an evolve needs a mode", hint="pass --mode offline or --mode online "
                                  "(or `mode:` in the --config file)")
        unused = OFFLINE_ONLY if self.mode == "online" else ONLINE_ONLY
        given = [f"--{n.replace('_', '-')}" if n != "ablate" else "--no-ablation"
                 for n in unused if getattr(self, n) is not None]
        if given:
            other = "offline" if self.mode == "online" else "online"
            them = "them" if len(given) > 1 else "it"
            raise ValidationError(f"{', '.join(given)} only appl{'y' if len(given) > 1 else 'ies'} to --mode {other}; "
                                  f"--mode {self.mode} would ignore {them}", hint=f"drop {' '.join(given)}")
        return self.mode

    def workdir_path(self) -> Path:
        """The workdir: as given, else `runs/evolve-MODE`."""
        return Path(self.workdir or f"runs/evolve-{self.check_mode()}")

    def evolve_config(self) -> "EvolveConfig":
        """The engine's `EvolveConfig` from these settings; a setting not given keeps its default.

        An empty env list and a repeated env are refused: `envs: []` would otherwise run the whole
        default suite, and a repeated env doubles every run of it.
        """
        import pydantic

        from ole.cost import CostCaps
        from ole.evolve.config import EvolveConfig, Suite
        self._check_envs()
        given = {k: v for k, v in self.model_dump().items() if v is not None}
        suite = {k: given[k] for k in ("envs", "profile", "budget", "host", "model", "command") if k in given}
        top = {k: given[k] for k in ("search_pools", "gate_pools", "agent_seeds", "population", "generations", "seed",
                                     "channel", "workers", "eta", "screen", "gate_budgets", "max_scopes", "ablate",
                                     "transfer_envs", "transfer_pools")
               if k in given}
        if self.mode == "offline" and "transfer_envs" not in top:
            from ole.evolve.config import DEFAULT_TRANSFER
            searched = set(suite.get("envs") or Suite.model_fields["envs"].default)
            top["transfer_envs"] = tuple(e for e in DEFAULT_TRANSFER if e not in searched)
        try:
            caps = CostCaps(episodes=self.max_episodes, wall_s=self.max_wall_s, tokens=self.max_tokens,
                            usd=self.max_usd)
            return EvolveConfig(suite=Suite(**suite), caps=caps, **top)
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "config"
            raise ValidationError(f"bad evolve flags: {where}: {first['msg'].removeprefix('Value error, ')}",
                                  hint="see `ole evolve --help`") from None

    def _check_envs(self) -> None:
        if self.envs is not None:
            check_envs(self.envs)

    def resolve(self, root: Path) -> "EvolveSettings":
        """Every setting the mode reads, filled with its default; paths absolute (`root`: the registry
        root the evolve opened). What an evolve writes into its workdir."""
        mode = self.check_mode()
        cfg = self.evolve_config()
        s, caps = cfg.suite, cfg.caps
        filled: dict[str, Any] = {
            "mode": mode, "root": str(Path(root).resolve()), "envs": s.envs, "profile": s.profile, "budget": s.budget,
            "search_pools": cfg.search_pools, "gate_pools": cfg.gate_pools, "gate_budgets": cfg.gate_budgets,
            "agent_seeds": cfg.agent_seeds, "host": s.host, "model": s.model, "command": s.command, "seed": cfg.seed,
            "channel": cfg.channel, "workers": cfg.workers, "max_episodes": caps.episodes, "max_wall_s": caps.wall_s,
            "max_tokens": caps.tokens, "max_usd": caps.usd,
            "workdir": str(self.workdir_path().resolve()),
            "traces": str(Path(self.traces or DRIVER_DEFAULTS["traces"]).resolve()),
            "gate_config": str(Path(self.gate_config).resolve()) if self.gate_config else None,
            **{k: getattr(self, k) or v for k, v in DRIVER_DEFAULTS.items() if k != "traces"}}
        if mode == "offline":
            filled.update(population=cfg.population, generations=cfg.generations, eta=cfg.eta, screen=cfg.screen,
                          max_scopes=cfg.max_scopes, ablate=cfg.ablate, transfer_envs=cfg.transfer_envs,
                          transfer_pools=cfg.transfer_pools)
        else:
            filled.update({k: getattr(self, k) if getattr(self, k) is not None else ONLINE_DEFAULTS[k]
                           for k in ONLINE_ONLY})
        keep = {"address": self.address, "track": self.track, "track_uri": self.track_uri}
        return EvolveSettings.model_validate({**filled, **keep})

    def dump_yaml(self) -> str:
        """The settings as the YAML `--config` reads (settings left at None omitted)."""
        from ole.yamlio import dump_yaml
        return dump_yaml(self.model_dump(mode="json", exclude_none=True))


def check_envs(envs: Sequence[str], flag: str = "--envs") -> None:
    """An env list names each env once: an empty list would otherwise mean the whole default suite,
    and a repeated env doubles every run of it."""
    if not envs or any(not e.strip() for e in envs):
        raise ValidationError(f"{flag} names no env (an empty list would run the whole default suite)",
                              hint=f"name env slugs, e.g. {flag} gym/acrobot, or leave {flag} out for the default")
    twice = sorted({e for e in envs if list(envs).count(e) > 1})
    if twice:
        raise ValidationError(f"{flag} names {', '.join(twice)} more than once (every run of it would be made twice)",
                              hint="name each env once")


def load_settings(path: str | Path) -> EvolveSettings:
    """Read a `--config` file strictly: unknown keys, wrong types and a missing file are errors."""
    from ole.bundle import validate_data
    from ole.yamlio import read_yaml_file
    target = Path(path)
    if not target.is_file():
        raise ValidationError(f"--config {target}: no such file", hint="name a YAML file of `ole evolve` settings "
                              "(an evolve's workdir holds one: WORKDIR/evolve.yaml)")
    return validate_data(EvolveSettings, read_yaml_file(target), source=str(target))


def gate_reach(cfg: "EvolveConfig", gate: "GateConfig", envs: int) -> int:
    """The most pairs a gate of `envs` envs of this config can judge: the first look, then each
    adaptive look while the total stays within the gate's `max_pairs` (`Engine.decide_gate`)."""
    looks = [len(look) // max(1, len(cfg.suite.envs)) * envs for look in cfg.gate_looks()]
    reach = looks[0]
    if gate.max_pairs is None:
        return reach
    for n in looks[1:]:
        if reach + n > gate.max_pairs:
            break
        reach += n
    return reach


def check_gate_reach(cfg: "EvolveConfig", gate: "GateConfig", mode: str, pools_flag: str = "--gate-pools") -> str | None:
    """Refuse settings whose gate can never release (too few pairs for `min_pairs`); return a warning
    line when only a scope of several envs could (offline scopes of one env stay below it)."""
    widest = gate_reach(cfg, gate, len(cfg.suite.envs))
    if widest < gate.min_pairs:
        raise ValidationError(
            f"the gate could judge at most {widest} pairs ({len(cfg.gate_pools)} gate pools x "
            f"{len(cfg.gate_budgets)} budgets x {len(cfg.agent_seeds)} agent seeds x {len(cfg.suite.envs)} envs, plus "
            f"its adaptive looks), below the gate config's min_pairs {gate.min_pairs}: every verdict would be "
            "indecisive and nothing could be released",
            hint=f"add pools ({pools_flag} 201 202 203 204), budgets or agent seeds, or lower min_pairs in a "
                 "--gate-config")
    single = gate_reach(cfg, gate, 1)
    if mode == "offline" and len(cfg.suite.envs) > 1 and single < gate.min_pairs:
        return (f"warning: a scope of one env gets at most {single} gate pairs < min_pairs {gate.min_pairs}: "
                "only a gain shared by several envs can be released")
    return None


def planned_runs(cfg: "EvolveConfig", mode: str, tasks: int, every_k: int, monitor: int,
                 max_pairs: int | None = None) -> list[tuple[str, int | None]]:
    """One (env slug, budget) per planned run (no cache hits assumed beyond the champion's).

    Offline: the champion on every search instance; per generation, each rung's surviving
    candidates on that rung's new instances; the gate's champion on every gate instance the
    adaptive sample may add (up to `max_pairs`, at every gate budget) and each of up to
    `max_scopes` gated candidates on its share (one env each when the search splits by env).
    Ablation is not counted (it depends on how many fields a candidate moved). An estimate, not a bound.
    """
    def runs_of(instances) -> list[tuple[str, int | None]]:
        return [(t.env, t.budget) for t, _ in instances]
    search = runs_of(cfg.suite.instances(cfg.search_pools, cfg.agent_seeds))
    looks = cfg.gate_looks()
    first = runs_of(looks[0])
    gate = (first + runs_of([i for look in looks[1:] for i in look]))[: max(max_pairs or 0, len(first))]
    if mode == "offline":
        runs, alive, prev = list(search), cfg.population, 0
        for n in cfg.rungs():
            runs += search[prev:n] * alive * cfg.generations
            alive, prev = max(1, -(-alive // cfg.eta)), n
        scopes = min(cfg.max_scopes, len(cfg.suite.envs))
        transfer = runs_of(cfg.transfer_instances()) * 2 * scopes  # champion and change, per released scope
        return runs + gate + gate[: -(-len(gate) * scopes // len(cfg.suite.envs))] + transfer
    stream = [(cfg.suite.envs[i % len(cfg.suite.envs)], cfg.suite.budget) for i in range(tasks)]
    return stream + gate * (1 + tasks // every_k) + stream[:monitor]


def estimate_of(settings: EvolveSettings, cfg: "EvolveConfig", gate: "GateConfig") -> "CostEstimate":
    """The cost estimate printed before an evolve runs (`ole.cost.estimate` over `planned_runs`).

    Tokens are counted for an LLM agent and for an LLM proposer only: `builtin`, `random` and
    `tpe` call no model.
    """
    from ole.cost import estimate
    mode = settings.check_mode()
    tasks = ONLINE_DEFAULTS["tasks"] if settings.tasks is None else settings.tasks
    every_k = ONLINE_DEFAULTS["every_k"] if settings.every_k is None else max(1, settings.every_k)
    monitored = -(-tasks * int(gate.analysis.exposure * 1000) // 1000)  # the canary's share of the stream
    runs = planned_runs(cfg, mode, tasks, every_k, monitored, gate.max_pairs)
    return estimate(runs, budget=cfg.suite.budget or 32, workers=cfg.workers, llm_agent=cfg.suite.host == "llm",
                    proposals=cfg.population * cfg.generations,
                    llm_proposer=uses_llm(settings.proposer or DRIVER_DEFAULTS["proposer"]))


def uses_llm(proposer: str) -> bool:
    """True for a proposer that calls a model (anything but `BUILTIN_PROPOSERS`)."""
    return proposer not in BUILTIN_PROPOSERS


# ----- the workdir's record ---------------------------------------------------------------------

def write_settings(workdir: Path, resolved: EvolveSettings) -> Path:
    """Write the resolved settings into the workdir (atomically) and drop a previous outcome: the
    evolve is running again, and `ole evolve ls` must not show the last run's outcome as this one's."""
    path = workdir / SETTINGS_FILE
    header = ("# The resolved settings of this evolve (`ole evolve`). Resume it, or run it again, with:\n"
              f"#   ole evolve --config {path}\n")
    atomic_write(path, header + resolved.dump_yaml(), mode=0o644)
    (workdir / OUTCOME_FILE).unlink(missing_ok=True)
    return path


GATE_FILE = "gate.yaml"
"""The gate config an evolve used, written beside its settings (which name it)."""


def write_gate(workdir: Path, gate: "GateConfig") -> Path:
    """Write the gate config in use into the workdir (the settings then name this copy)."""
    from ole.yamlio import dump_yaml
    path = workdir / GATE_FILE
    atomic_write(path, "# The gate config of this evolve (its settings name this file).\n"
                 + dump_yaml(gate.model_dump(mode="json")), mode=0o644)
    return path


def write_outcome(workdir: Path, summary: dict[str, Any]) -> Path:
    """Record how the evolve ended (its JSON summary and the time) beside its settings."""
    path = workdir / OUTCOME_FILE
    doc = {"finished_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "summary": summary}
    atomic_write(path, json.dumps(doc, indent=2, default=str) + "\n", mode=0o644)
    return path


class EvolveEntry(BaseModel):
    """One past evolve of a registry root, as `ole evolve ls` lists it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    workdir: str
    """Its workdir (where `evolve.yaml` and the resume store are)."""
    mode: str
    """offline or online."""
    envs: tuple[str, ...]
    """The suite's envs."""
    started_at: str
    """When its settings were last written (UTC): its last start or resume."""
    status: Literal["finished", "stopped", "unfinished"]
    """finished; stopped before crossing a cost cap; unfinished (running, interrupted or failed)."""
    finished_at: str | None
    """When it ended (None: unfinished)."""
    released: tuple[str, ...]
    """Versions it released."""
    verdicts: tuple[str, ...]
    """`VERSION: verdict` of each gate decision it made."""
    stopped: str
    """Why it stopped early (a cost cap), empty otherwise."""


def _entry(workdir: Path, settings: EvolveSettings) -> EvolveEntry:
    started = datetime.fromtimestamp((workdir / SETTINGS_FILE).stat().st_mtime, timezone.utc)
    outcome: dict[str, Any] = {}
    try:
        outcome = json.loads((workdir / OUTCOME_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no outcome yet (running or interrupted), or a damaged one: unfinished
        pass
    summary = outcome.get("summary") or {}
    gates = summary.get("gates") or summary.get("decisions") or []
    verdicts = tuple(f"{g.get('final') or g.get('challenger')}: {g.get('verdict')}" for g in gates)
    stopped = str(summary.get("stopped") or "")
    status: Literal["finished", "stopped", "unfinished"] = \
        "unfinished" if not outcome else ("stopped" if stopped else "finished")
    return EvolveEntry(workdir=str(workdir), mode=settings.mode or "?", envs=settings.envs or (),
                       started_at=started.isoformat(timespec="seconds"), status=status,
                       finished_at=outcome.get("finished_at"), released=tuple(summary.get("released") or ()),
                       verdicts=verdicts, stopped=stopped)


def list_evolves(root: Path, search: Sequence[Path]) -> tuple[list[EvolveEntry], list[str]]:
    """The evolves of registry `root` whose workdir is one of `search` or directly inside one, oldest
    first; and one line per workdir skipped (another root's, or an unreadable `evolve.yaml`)."""
    found: list[tuple[Path, EvolveSettings]] = []
    skipped: list[str] = []
    want = Path(root).resolve()
    for folder in search:
        candidates = [folder] if (folder / SETTINGS_FILE).is_file() else sorted(
            p for p in folder.glob("*") if (p / SETTINGS_FILE).is_file())
        for workdir in candidates:
            try:
                settings = load_settings(workdir / SETTINGS_FILE)
            except ValidationError as exc:
                skipped.append(f"{workdir}: unreadable {SETTINGS_FILE}: {exc.message}")
                continue
            if settings.root is None or Path(settings.root).resolve() != want:
                skipped.append(f"{workdir}: an evolve of another registry ({settings.root})")
                continue
            found.append((workdir, settings))
    entries = [_entry(w, s) for w, s in found]
    return sorted(entries, key=lambda e: e.started_at), skipped
