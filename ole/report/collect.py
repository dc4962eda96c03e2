"""Everything the report shows, read from a registry and evolve workdirs (compute first, then present).

`collect(registry, workdirs)` returns a `ReportData` (`ole.report.records`): one `Version` per registered
version (its display status, scope, YAML and diff against each parent, evaluations, gate
decisions), one `Gate` per recorded `gate_decision` event (the per-pair table and every
check measured vs required), and one `RunCurve` per host run found in a workdir's
resume store (its SQLite file, or its schema where `OLE_STORAGE` names PostgreSQL). Nothing here
writes: the workdir's store is opened read-only, and a
damaged blob makes only its own version `damaged`.

Gate records are read as plain JSON with defaults, not through `GateDecision`, so a
report still renders decisions recorded by an older or newer gate schema.
"""
from __future__ import annotations

import difflib
import json
import sqlite3
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

from ole.bundle import Applicability, Bundle, Provenance, dump_bundle_yaml, diff_bundles, format_ref
from ole.errors import OleError
from ole.gate import criteria_of
from ole.registry.lineage import Lineage
from ole.registry.records import Event
from ole.report.records import (Check, CriterionView, EnvAnchors, Evaluation, Gate, GatePair, Interval, ParentDiff,
                                ReportData, RunCurve, Version)
from ole.verdicts import verdict_of

# ----- scope ---------------------------------------------------------------------------------

def scope_of(applicability: Applicability) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The scope's canonical key (`general`, or e.g. `families=minigrid;budget=1-64`, as `ole
    champion show` prints it) and every applicability field that narrows it."""
    default = Applicability().model_dump(mode="json")
    fields = []
    for key, value in applicability.model_dump(mode="json").items():
        if value != default.get(key):
            shown = ", ".join(map(str, value)) if isinstance(value, list) else str(value)
            fields.append((key, shown))
    return applicability.scope_key, tuple(fields)


# ----- gate records --------------------------------------------------------------------------

def ci_level(stats: dict, config: dict) -> float | None:
    """Two-sided coverage of the recorded [ci_low, ci_high].

    A record that states its level (`ci_level` in the stats or the config) is believed.
    Otherwise the interval is the one `ole.gate` computed when it stated none: the α and
    1 − α quantiles of the bootstrap means, i.e. a 1 − 2α interval.
    """
    for source in (stats, config):
        if isinstance(source.get("ci_level"), (int, float)):
            return float(source["ci_level"])
    alpha = config.get("alpha")
    return 1.0 - 2.0 * float(alpha) if isinstance(alpha, (int, float)) else None


def _pair(p: dict) -> GatePair:
    task, cond = p.get("task") or {}, p.get("condition") or {}
    champ, chall = p.get("champion") or {}, p.get("challenger") or {}
    env = task.get("env", "?")
    budget = f" budget {task['budget']}" if task.get("budget") is not None else ""
    return GatePair(instance=f"{env} pool {task.get('pool_seed')} seed {cond.get('seed')}{budget}", env=env,
                    pool_seed=task.get("pool_seed"), agent_seed=cond.get("seed"), family=p.get("family", "?"),
                    q_champion=champ.get("q"), q_challenger=chall.get("q"), q_source=p.get("q_source", "?"),
                    delta=p.get("delta"), r=float(p.get("r", 0.0)), failure=p.get("failure", "none"),
                    champion_trace=champ.get("trace_id", ""), challenger_trace=chall.get("trace_id", ""))


def gate_from_event(event) -> Gate:
    """A `Gate` from one `gate_decision` event (its payload is the decision record)."""
    d = event.payload
    stats, config = d.get("stats") or {}, d.get("config") or {}
    criteria = []
    alpha = d.get("alpha_applied") if isinstance(d.get("alpha_applied"), (int, float)) else config.get("alpha")
    for crit in criteria_of(d):  # the gate's own checks (rebuilt by the gate for records older than them)
        checks = tuple(Check(what=k.what, measured=k.measured, required=k.required, passed=k.passed) for k in crit.checks)
        criteria.append(CriterionView(name=crit.name, passed=crit.passed, checks=checks, reasons=crit.reasons))
    pairs = tuple(_pair(p) for p in d.get("pairs") or [])
    interval = Interval(mean_r=float(stats.get("mean_r", 0.0)), low=stats.get("ci_low"), high=stats.get("ci_high"),
                        level=ci_level(stats, config), n=int(stats.get("n_pairs", len(pairs))), source="gate")
    return Gate(seq=event.seq, ts=event.ts, champion=d.get("champion", "?"), challenger=event.ref,
                verdict=verdict_of(d) or "reject", reasons=tuple(d.get("reasons") or ()), interval=interval,
                win_rate=stats.get("win_rate"), p_value=stats.get("p_value"), test=str(config.get("test", "?")),
                alpha=alpha, pairs=pairs, criteria=tuple(criteria), config=config,
                looks=tuple(d.get("looks") or ()), **_evidence(d))


def _evidence(d: dict) -> dict:
    """Coverage cells and bound of a decision payload, as the gate recorded them
    (`ole.coverage.decision_evidence`: derived from its pairs only for older records)."""
    from ole.coverage import decision_evidence
    try:
        cov, bound = decision_evidence(d)
    except (OleError, ValueError, TypeError):  # a pair without a known budget, or a condition without its
        return {"ablation": d.get("ablation")}  # host (a record written through the public API): no coverage
    if cov is None:
        return {"ablation": d.get("ablation")}
    cells = tuple({**c.model_dump(), "verdict": c.verdict} for c in cov.cells)
    return {"cells": cells, "bound": bound.scope_key if bound is not None else None, "ablation": d.get("ablation")}


# ----- versions ------------------------------------------------------------------------------

def _evaluation(event) -> Evaluation:
    """An evaluation event's pair statistics; events written before they were a `PairStats` said
    `n` for `n_pairs` and `cost` for the episode cost ratio."""
    p = event.payload
    r = tuple(float(x) for x in p.get("r") or ())
    cost = (p.get("cost_ratio") or {}).get("episodes", p.get("cost"))
    return Evaluation(seq=event.seq, ts=event.ts, stage=str(p.get("stage", "?")), champion=str(p.get("champion", "?")),
                      n=int(p.get("n_pairs", p.get("n", len(r)))), mean_r=p.get("mean_r"), cvar=p.get("cvar"),
                      cost=cost, r=r, instances=tuple(p.get("instances") or ()))


def _diff(child, parent_ref: str, parent) -> ParentDiff:
    old, new = dump_bundle_yaml(parent).splitlines(), dump_bundle_yaml(child).splitlines()
    lines = tuple(difflib.unified_diff(old, new, fromfile=parent_ref, tofile="this version", lineterm="", n=2))
    changes = tuple((c.component, c.field, json.dumps(c.old), json.dumps(c.new)) for c in diff_bundles(parent, child))
    return ParentDiff(parent=parent_ref, lines=lines, changes=changes)


def _display_status(status: str, seed: bool, damaged: bool) -> str:
    if damaged:
        return "damaged"
    return "seed" if seed and status == "registered" else status


def _note(registration: Event, prov: Provenance | None) -> str:
    """The note given with `bundle register --note` (the event's), else the YAML's `provenance.note`; a
    seed's event note (`seed NAME.yaml`) only when its YAML has none."""
    given = "" if registration.payload.get("seed") else str(registration.payload.get("note") or "")
    return given or (prov.note if prov and prov.note else str(registration.payload.get("note") or ""))


def _versions(registry, events, gates: Sequence[Gate]) -> list[Version]:
    state = registry.state()
    loaded: dict[str, Bundle] = {}
    damage: dict[str, str] = {}
    registrations = [e for e in events if e.kind == "registration"]
    for e in registrations:
        try:
            loaded[e.ref] = registry.get(e.ref, state=state).bundle
        except OleError as exc:  # a damaged blob degrades only its own version
            damage[e.ref] = str(exc)
    out = []
    for e in registrations:
        bundle = loaded.get(e.ref)
        parents = tuple(format_ref(e.name, p) for p in e.payload.get("parents", []))
        evaluations = tuple(_evaluation(x) for x in events if x.kind == "evaluation" and x.ref == e.ref)
        own_gates = [g for g in gates if g.challenger == e.ref]
        interval = own_gates[-1].interval if own_gates else None
        if interval is None and evaluations and evaluations[-1].mean_r is not None:
            last = evaluations[-1]
            interval = Interval(mean_r=float(last.mean_r or 0.0), low=None, high=None, level=None, n=last.n,
                                source=last.stage)
        scope, scope_fields = scope_of(bundle.applicability) if bundle is not None else ("unknown (damaged)", ())
        prov = bundle.provenance if bundle is not None else None
        diffs = tuple(_diff(bundle, p, loaded[p]) for p in parents if bundle is not None and p in loaded)
        status = state.status_of(e.name, e.version)
        out.append(Version(
            ref=e.ref, name=e.name, version=e.version,
            status=_display_status(status, bool(e.payload.get("seed")), e.ref in damage), registry_status=status,
            seed=bool(e.payload.get("seed")), parents=parents, edge=e.payload.get("edge"),
            generation=prov.generation if prov else 0, proposer=prov.proposer if prov else "?",
            note=_note(e, prov), registered_at=e.ts,
            content_hash=e.payload.get("content_hash", ""), scope=scope, scope_fields=scope_fields,
            yaml=dump_bundle_yaml(bundle) if bundle is not None else None, damage=damage.get(e.ref), diffs=diffs,
            evaluations=evaluations, gate_seqs=tuple(g.seq for g in own_gates), interval=interval))
    return out


# ----- runs in workdirs ------------------------------------------------------------------------

def _store_rows(workdir: Path, storage: str | None = None) -> list[tuple[str, str, dict]]:
    """(instance, family, RunResult JSON) of every stored evaluation; read-only, never creates the file
    (nor, with PostgreSQL storage, the workspace's schema: `storage`, else `OLE_STORAGE`)."""
    from ole.storage.url import storage_url
    url = storage_url(storage)
    if url is not None:
        return _pg_store_rows(workdir, url)
    path = workdir / "evaluations.sqlite3"
    if not path.is_file():
        return []
    try:
        db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
        try:
            rows = db.execute("SELECT instance, family, result FROM evaluations ORDER BY created_at").fetchall()
        finally:
            db.close()
    except sqlite3.Error:
        return []
    return [(r[0], r[1], json.loads(r[2])) for r in rows]


def _pg_store_rows(workdir: Path, url: str) -> list[tuple[str, str, dict]]:
    """The rows of the workspace's store schema in PostgreSQL (`EvaluationStore`'s naming), or none when
    that workspace never stored anything there; nothing is created."""
    from ole.storage import postgres
    schema = postgres.store_schema(f"{workdir.name}_evaluations")
    conn = postgres.connect(url)
    try:
        if conn.execute("SELECT to_regclass(%s)", (f'"{schema}".evaluations',)).fetchone()[0] is None:
            return []
        rows = conn.execute(f'SELECT instance, family, result FROM "{schema}".evaluations '
                            "ORDER BY created_at, key").fetchall()
    finally:
        conn.close()
    return [(r[0], r[1], json.loads(r[2])) for r in rows]


def _curve(run_dir: Path) -> tuple[list[int], list[float]]:
    from evogym.leaderboard import validation_curve
    try:
        return validation_curve(run_dir)
    except (OSError, ValueError, KeyError):  # an unfinished or foreign run folder has no curve
        return [], []


def run_curves(workdirs: Sequence[Path], ref_of_hash: dict[str, str]) -> list[RunCurve]:
    """One curve per stored run whose host folder is still in the workdir."""
    curves, seen = [], set()
    for workdir in workdirs:
        for instance, _family, result in _store_rows(workdir):
            run_id = result.get("trace_id", "")
            host = workdir / "runs" / run_id / "host"
            if run_id in seen or not (host / "run.json").is_file():
                continue
            seen.add(run_id)
            xs, ys = _curve(host)
            env, _, rest = instance.partition("|")
            pool = rest.partition("|")[0].removeprefix("pool")
            curves.append(RunCurve(run_id=run_id, env=env, bundle=ref_of_hash.get(result.get("bundle_hash", ""), "?"),
                                   pool_seed=int(pool) if pool.isdigit() else None, xs=tuple(xs), ys=tuple(ys),
                                   final_score=result.get("score")))
    return curves


def env_anchors(envs: Sequence[str]) -> list[EnvAnchors]:
    """Random and best-paper anchors of each env (None outside Core16)."""
    from evogym.anchors import AGENTS, PAPER_ROWS, random_baseline
    out = []
    for env in sorted(set(envs)):
        row = PAPER_ROWS.get(env)
        best = max(AGENTS, key=lambda a: row[a]) if row else None
        out.append(EnvAnchors(env=env, random=random_baseline(env), paper_best=row[best] if row and best else None,
                              paper_best_agent=best))
    return out


def collect(registry, workdirs: Sequence[Path | str] = (), *, now: datetime | None = None,
            warnings: Sequence[str] = ()) -> ReportData:
    """Read everything the report shows; never writes."""
    events = registry.events()
    gates = [gate_from_event(e) for e in events if e.kind == "gate_decision"]
    versions = _versions(registry, events, gates)
    ref_of_hash = {v.content_hash: v.ref for v in versions}
    dirs = [Path(w) for w in workdirs]
    curves = run_curves(dirs, ref_of_hash)
    lineage = Lineage(events, default_channel=registry.state().default_channel)
    state = registry.state()
    channels = {c: format_ref(*state.champion(c)) for c in state.channels() if state.champion(c)}
    return ReportData(root=str(registry.root), workdirs=tuple(str(d) for d in dirs),
                      generated_at=now or datetime.now(timezone.utc),
                      versions=tuple(versions), gates=tuple(gates), curves=tuple(curves),
                      anchors=tuple(env_anchors([c.env for c in curves])), champions=channels,
                      history={c: tuple(lineage.champion_history(c)) for c in channels},
                      warnings=tuple(warnings))
