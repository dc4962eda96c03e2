"""Registry check and repair (`ole fsck`): hashes, lineage DAG, pointers, scopes, orphans.

Runs inside the journal's write lock, so every temp file or unreferenced blob it sees
belongs to a writer that died before its commit (a live writer holds that lock from its
first blob byte to its commit) and is swept. A blob whose bytes no longer hash to its name
is moved to `quarantine/` and reported, never served again (a damaged file is kept for
inspection, not deleted); only that version is degraded, and `Registry.restore_blob`
(`ole fsck --restore FILE`) puts back a byte-exact copy. Root `*.yaml` files that were
skipped or edited after registration are problems too. The trace archive is checked beside
the registry (`check_traces`): a trace file (or, with PostgreSQL, a trace row) that does not
load is a problem, and is moved to `<archive>/quarantine/` (the `trace_quarantine` table) on
repair; a trace table whose append-only triggers are gone is a problem. Everything else is
reported, not changed.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path

from ole.bundle import GENERAL_SCOPE, Bundle, format_ref, load_bundle_yaml, parse_scope
from ole.errors import OleError, ValidationError
from ole.registry.backend import JournalBackend
from ole.registry.records import DEFAULT_CHANNEL, EVENT_KINDS, POINTER_KINDS, Event, FsckReport, IndexRow, Key
from ole.registry.scopes import check_specialization, features_of
from ole.registry.state import State, derive_state
from ole.trace import Archive

RECOVERY = ("only this version is affected; restore its blob from a backup with `ole fsck --restore FILE`, "
            "or release/roll back to another version (docs/registry.md, A damaged blob)")


def check(journal: JournalBackend, *, repair: bool, traces: Sequence[str | Path | Archive] = (),
          seed_problems: Sequence[str] = (), storage: str | None = None) -> FsckReport:
    """Check `journal` (called with its write lock held, or read-only without `repair`); with
    `traces` (trace archives, or their folders: opened in `storage`, the registry's PostgreSQL URL,
    else as files), the trace ids events name. `seed_problems` (the root's skipped or edited seed
    files, which only the registry knows) are reported with the rest."""
    problems: list[str] = []
    quarantined: list[str] = []
    verdict = journal.integrity_check()
    if verdict != "ok":
        problems.append(f"database integrity check: {verdict}")
    rows = journal.rows()
    for row in rows:
        problems.extend(_check_blob(journal, row, quarantined, repair))
    events = journal.events()
    problems.extend(_check_events(events, rows))
    problems.extend(_check_lineage(events))
    state = derive_state(events, DEFAULT_CHANNEL)
    channels = {}
    known = {(r.name, r.version) for r in rows}
    for channel in state.channels():
        key = state.champion(channel)
        if key is not None:
            channels[channel] = format_ref(*key)
            if key not in known:
                problems.append(f"channel `{channel}` points at unregistered {format_ref(*key)}")
    scoped, scope_problems = _check_scopes(journal, events, state, known)
    problems.extend(scope_problems)
    problems.extend(seed_problems)
    if traces:
        problems.extend(_check_trace_ids(events, traces, storage))
    swept = journal.sweep({r.blob_hash for r in rows}, repair)
    return FsckReport(ok=not problems, problems=tuple(problems), swept=tuple(swept),
                      quarantined=tuple(quarantined), bundles=len(rows), events=len(events), channels=channels,
                      scopes=scoped)


def _check_scopes(journal: JournalBackend, events: list[Event], state: State,
                  known: set[Key]) -> tuple[dict[str, dict[str, str]], list[str]]:
    """Scope keys of events are canonical; every specialisation is strictly narrower than its parent;
    every scope pointer and pending target names a registered version whose applicability admits
    that scope (a release bounded by its evidence is narrower than the bundle's own applicability).
    Returns the scope champions per channel and the problems."""
    scope_of: dict[Key, str | None] = {}

    def bundle(key: Key) -> Bundle | None:
        row = journal.row(key)
        try:
            return load_bundle_yaml(journal.read_blob(row).decode()) if row else None
        except OleError:  # a missing or corrupt blob is reported by the blob check
            return None

    def version_scope(key: Key) -> str | None:
        if key not in scope_of:
            found = bundle(key)
            scope_of[key] = found.applicability.scope_key if found else None
        return scope_of[key]

    problems = [p for e in events for p in _check_scope_event(e, known, bundle, version_scope)]
    # a release bounded by its evidence puts a version in a scope narrower than its own applicability
    placed = {(e.key, e.scope) for e in events if e.kind in ("release", "rollback") and not e.payload.get("clear")}
    scoped: dict[str, dict[str, str]] = {}
    for channel, scope in sorted({*state.pointers, *state.pending}):
        if scope == GENERAL_SCOPE:
            continue  # checked above; releases written before scopes may hold a narrow bundle there
        for what, key in (("points at", state.pointers.get((channel, scope))),
                          ("has a pending release of", state.target(channel, scope))):
            where = f"channel `{channel}` scope `{scope}`"
            own = version_scope(key) if key is not None else None
            if key is not None and key not in known:
                problems.append(f"{where} {what} unregistered {format_ref(*key)}")
            elif key is not None and own is not None and own != scope:
                if (key, scope) not in placed:  # nothing recorded put it in this scope
                    problems.append(f"{where} {what} {format_ref(*key)}, whose scope is `{own}`")
                elif not _admits(own, scope):  # a bounded release must lie inside its own scope
                    problems.append(f"{where} {what} {format_ref(*key)}, whose scope `{own}` does not admit it")
        active = state.champion(channel, scope)
        if active is not None:
            scoped.setdefault(channel, {})[scope] = format_ref(*active)
    return scoped, problems


def _admits(own: str, scope: str) -> bool:
    """Whether a version whose applicability is `own` may serve `scope` (a malformed key is reported
    by the event check, not here)."""
    try:
        return parse_scope(scope).within(parse_scope(own), features_of=features_of)
    except OleError:
        return True


def _check_scope_event(event: Event, known: set[Key], bundle: Callable[[Key], Bundle | None],
                       version_scope: Callable[[Key], str | None]) -> list[str]:
    if event.kind in POINTER_KINDS and "scope" in event.payload:
        scope = event.payload["scope"]
        try:
            canonical = parse_scope(scope).scope_key if isinstance(scope, str) else None
        except OleError:
            canonical = None
        return [] if canonical == scope else [f"event {event.seq} ({event.kind}) names a malformed scope {scope!r}"]
    key = event.key
    if event.kind != "registration" or key not in known:
        return []
    recorded, problems = event.payload.get("scope"), []
    if recorded is not None and version_scope(key) not in (None, recorded):
        problems.append(f"{event.ref}: registration records scope {recorded!r} but the blob's is "
                        f"`{version_scope(key)}`")
    if event.payload.get("edge") == "specialization" and event.payload.get("parents"):
        child, parent = bundle(key), bundle((event.name, event.payload["parents"][0]))
        if child is not None and parent is not None:
            try:
                check_specialization(child, parent)
            except OleError as exc:
                problems.append(f"{event.ref}: specialization edge, but {exc.message}")
    return problems


def named_trace_ids(event: Event) -> list[str]:
    """Trace ids an event names as its evidence: both runs of every gate pair, an evaluation's
    challenger runs, a monitor pair's run and control run."""
    p = event.payload
    out: list[object] = []
    if event.kind == "gate_decision":
        for pair in p.get("pairs") or ():
            out += [(pair.get(side) or {}).get("trace_id") for side in ("champion", "challenger")]
    elif event.kind == "evaluation":
        out += list(p.get("trace_ids") or ()) + list(p.get("control_trace_ids") or ())
        out += [p.get("trace_id"), p.get("control_trace_id")]
    return [t for t in out if isinstance(t, str) and t]


def _check_trace_ids(events: list[Event], roots: Sequence[str | Path | Archive], storage: str | None) -> list[str]:
    """Every trace id an event names exists in one of the trace archives `roots` (damaged ones count:
    they are reported by `check_traces`)."""
    from ole.storage.traces import open_archive
    present: set[str] = set()
    for root in roots:
        if isinstance(root, (str, Path)):
            with open_archive(root, storage or "sqlite") as archive:
                present.update(archive.ids())
        else:
            present.update(root.ids())
    problems = []
    for e in events:
        missing = sorted({t for t in named_trace_ids(e) if t not in present})
        if missing:
            problems.append(f"event {e.seq} ({e.kind} of {e.ref}) names {len(missing)} trace(s) not in "
                            f"{', '.join(_where(r) for r in roots)}: {', '.join(missing[:3])}"
                            + (" ..." if len(missing) > 3 else ""))
    return problems


def _check_blob(journal: JournalBackend, row: IndexRow, quarantined: list[str], repair: bool) -> list[str]:
    name, version, content_hash, blob_hash, _ = row
    ref = format_ref(name, version)
    data = journal.blob_bytes(blob_hash)
    if data is None:
        return [f"{ref}: blob {blob_hash[:12]}… is missing; {RECOVERY}"]
    if hashlib.sha256(data).hexdigest() != blob_hash:
        if repair:
            quarantined.append(journal.quarantine_blob(blob_hash))
        return [f"{ref}: blob {blob_hash[:12]}… fails its hash check" + (" (quarantined)" if repair else "")
                + f"; {RECOVERY}"]
    try:
        bundle = load_bundle_yaml(data.decode())
    except (OleError, UnicodeDecodeError) as exc:
        return [f"{ref}: blob does not load: {exc}"]
    if bundle.name != name or bundle.content_hash != content_hash:
        return [f"{ref}: blob content does not match its index row"]
    return []


def _check_events(events: list[Event], rows: list[IndexRow]) -> list[str]:
    problems = []
    registrations = {e.seq: e for e in events if e.kind == "registration"}
    known = {(r.name, r.version) for r in rows}
    if len(registrations) != len(rows):
        problems.append(f"{len(registrations)} registration events for {len(rows)} registered versions")
    for name, version, content_hash, _, seq in rows:
        event = registrations.get(seq)
        if event is None or (event.name, event.version) != (name, version) \
                or event.payload.get("content_hash") != content_hash:
            problems.append(f"{format_ref(name, version)}: registration event {seq} does not match")
    last = 0
    for event in events:
        if event.seq <= last:
            problems.append(f"event {event.seq}: seq not increasing")
        elif event.seq != last + 1:  # a writer holds the one write lock to its commit: no seq is skipped
            problems.append(f"event {event.seq}: seq not dense (after {last})")
        last = event.seq
        if event.kind not in EVENT_KINDS:
            problems.append(f"event {event.seq}: unknown kind {event.kind!r}")
        if (event.name, event.version) not in known:
            problems.append(f"event {event.seq} ({event.kind}) names unregistered {event.ref}")
        if event.kind in POINTER_KINDS and not event.channel:
            problems.append(f"event {event.seq} ({event.kind}) has no channel")
        json.dumps(event.payload)
    return problems


def _check_lineage(events: list[Event]) -> list[str]:
    import networkx as nx  # here, not at the top: `ole` commands that never check a lineage start without it

    graph = nx.DiGraph()
    problems = []
    for event in events:
        if event.kind != "registration":
            continue
        graph.add_node(event.ref)
        for parent in event.payload.get("parents", []):
            if parent >= event.version:
                problems.append(f"{event.ref}: parent version {parent} is not earlier")
            graph.add_edge(format_ref(event.name, parent), event.ref)
    missing = [n for n in graph if not any(e.kind == "registration" and e.ref == n for e in events)]
    problems.extend(f"lineage names unregistered parent {n}" for n in missing)
    if not nx.is_directed_acyclic_graph(graph):
        problems.append("lineage has a cycle")
    return problems


def _where(root: str | Path | Archive) -> str:
    return str(root) if isinstance(root, (str, Path)) else root.where


def check_traces(archive: Archive, *, repair: bool) -> tuple[list[str], list[str], int]:
    """Traces of `archive` (`ole.trace.Archive`: files, or rows with PostgreSQL) that do not load: the
    problems, where they were moved (on repair), and how many traces were checked; and a database
    archive whose append-only triggers are gone."""
    problems, quarantined = [], []
    verdict = archive.integrity_check()
    if verdict != "ok":
        problems.append(f"trace archive {archive.where}: {verdict}")
    for path, why in archive.damaged():
        moved = archive.quarantine(path) if repair else None
        problems.append(f"trace {path} is damaged: {why}" + (f" (quarantined to {moved})" if moved else ""))
        if moved is not None:
            quarantined.append(str(moved))
    return problems, quarantined, len(archive.ids()) + len(quarantined)


def with_traces(report: FsckReport, archive: Archive, *, repair: bool) -> FsckReport:
    """`report` with the trace archive's problems and quarantined files added."""
    problems, quarantined, count = check_traces(archive, repair=repair)
    return report.model_copy(update={"ok": report.ok and not problems, "problems": report.problems + tuple(problems),
                                     "quarantined": report.quarantined + tuple(quarantined), "traces": count})


def read_backup(path: Path) -> bytes:
    """The bytes of a backup copy of a blob: a regular file of at most the YAML cap (every stored
    blob reads back under it), read no further than that (`/dev/zero` is refused, not read forever)."""
    from ole.yamlio import MAX_BYTES
    try:
        if not path.is_file():
            raise ValidationError(f"{path} is {'not a regular file' if path.exists() else 'missing'}",
                                  hint="pass a byte-exact copy of .registry/blobs/…/<sha256>.yaml")
        with open(path, "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ValidationError(f"cannot read {path}: {exc.strerror or exc}", hint="check the path and its permissions") \
            from None
    if len(data) > MAX_BYTES:
        raise ValidationError(f"{path} is over {MAX_BYTES} bytes: no stored blob is that large",
                              hint="pass a byte-exact copy of .registry/blobs/…/<sha256>.yaml")
    return data
