"""The bundle registry: versioned bundles, their events, and champion pointers per channel and scope.

Layout under the root (`--root`, else `$OLE_ROOT`, else the project's `bundles/`, else the
per-user root; `ole.roots`): seed bundles `<root>/*.yaml` (`ole.registry.seeds`), and the
journal under `<root>/.registry` (`ole.registry.journal`: the SQLite event log, the index, the
content-addressed blobs).

Registration assigns the stable version and is not release (OLE §III-D). Statuses,
champions and lineage are views derived from the events (`ole.registry.state`,
`ole.registry.lineage`); nothing recorded is ever changed. A channel holds one champion per
scope (a bundle's applicability; `ole.registry.scopes`): releases, rollbacks and activations
carry the scope key in their payload (absent = `general`, so registries written before
scopes load unchanged), and `select` routes a task to the most specific matching champion.
Every write method is one journal transaction.
"""
from __future__ import annotations

import difflib
import re
import sqlite3
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from ole.bundle import (EDGE_MODE, EDGE_MODES, GENERAL_SCOPE, NAME_PATTERN, Bundle, Provenance, TaskContext,
                        bundle_from_data, check_hash, dump_bundle_yaml, format_ref, load_bundle_yaml, parse_ref,
                        parse_scope, validate_data)
from ole.coverage import bound_for_release, decision_event
from ole.errors import Conflict, IntegrityError, NotFound, StorageError, ValidationError
from ole.registry import fsck as fsck_check
from ole.registry import rollback
from ole.registry import scopes
from ole.registry.backend import JournalBackend
from ole.registry.journal import DB_FILE, Journal, now, sha256
from ole.registry.lease import Lease
from ole.registry.legacy import LegacyRelease, bounding_events, legacy_releases
from ole.registry.boundary import boundary_events
from ole.registry.records import (DEFAULT_CHANNEL, Event, FsckReport, IndexRow, Key, RegisteredBundle,
                                  ScopeChampion, Selection)
from ole.registry.seeds import edited_seed, seed_files
from ole.registry.state import State, derive_state
from ole.registry.widening import WideningKind, check_widening, widening_evidence
from ole.roots import REGISTRY_DIR, resolve
from ole.storage import open_journal, storage_url
from ole.trace import Archive
from ole.verdicts import verdict_of

Step = Literal["look", "promoted", "rolled_back"]


def default_root(explicit: str | Path | None = None) -> Path:
    """Resolve the registry root: `explicit`, else `$OLE_ROOT`, else the project's `bundles/`, else the
    per-user root, seeded on first use (`ole.roots`)."""
    return resolve(explicit)


class Registry:
    """Versioned bundles, their events, and champion pointers per channel and scope.

    One instance holds one SQLite connection: share a Registry between processes by
    opening it in each, not between threads.
    """

    def __init__(self, root: str | Path | None = None, *, seed: bool = True, storage: str | None = None) -> None:
        self.root = default_root(root)
        self.storage = storage_url(storage)
        """The PostgreSQL URL the journal lives in (`--storage`, else `$OLE_STORAGE`); None: SQLite files."""
        self.journal: JournalBackend = open_journal(self.root / REGISTRY_DIR, self.storage)
        self.home, self.blobs = self.journal.home, self.journal.blobs
        self.read_only = self.journal.read_only
        """True when the file system refused writes and the registry was opened for reading only."""
        self.warnings: list[str] = []
        """Root files skipped or ignored while seeding, or why nothing can be written (the CLI shows them)."""
        self.bounded_on_open: list[str] = []
        """What `_bound_legacy_releases` recorded while opening (the CLI prints it)."""
        if self.read_only:  # nothing may be written: seeds stay unregistered, legacy releases unbounded
            self._warn_read_only()
            return
        if seed:
            self._register_seeds()
        self._bound_legacy_releases()

    def _warn_read_only(self) -> None:
        self.warnings.append(f"the registry at {self.home} is read-only here: reads work, every write "
                             "is refused (hint: pass --root to a writable copy to release, register or import)")
        legacy = self._legacy_releases()
        if legacy:
            self.warnings.append(f"{len(legacy)} release(s) recorded before releases were bounded "
                                 "by evidence reach further than their gate decisions here (read-only: not bounded; "
                                 "hint: open the registry writable once to bound them, as events)")

    def close(self) -> None:
        """Close the database connection."""
        self.journal.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def _db(self) -> sqlite3.Connection:
        """The journal's connection, for inspection (the registry's tests run `PRAGMA integrity_check`)."""
        return self.journal.connection

    def lease(self, name: str, holder: str, **kwargs: Any) -> Lease:
        """The lease `name` in this registry's storage (`ole.registry.lease`), for `holder`."""
        return Lease(self.storage or self.home / DB_FILE, name, holder, **kwargs)

    def blob_path(self, blob_hash: str) -> Path:
        """Where the blob with this sha256 lives (SQLite files; PostgreSQL keeps blobs as rows)."""
        if not isinstance(self.journal, Journal):
            raise StorageError(f"blobs of the registry in {self.journal.where} are rows of the database, not files",
                               hint="read a version with `ole bundle show REF`")
        return self.journal.blob_path(blob_hash)

    # ----- registration -----------------------------------------------------------------

    def register(self, bundle: Bundle, *, parents: Sequence[int] = (), edge: str | None = None,
                 evidence_ids: Sequence[str] = (), note: str = "",
                 expected_hash: str | None = None) -> RegisteredBundle:
        """Register a bundle and assign the next version of its name (registration is not release).

        `parents`/`edge`/`evidence_ids` stamp the provenance (a bundle whose file already
        names different parents is a `Conflict`); parents given without an edge mean
        `manual` (one parent) or `recombination` (two). Identical content under the same
        name returns the existing version (dedupe). `expected_hash`, when given, must equal
        the content hash or start with it (`ole.bundle.check_hash`).
        """
        # a bundle built with model_copy skips validation: check it as if read from a file, so a
        # schema-breaking value is refused here instead of being stored and failing on every read
        bundle = bundle_from_data(bundle.model_dump(mode="json"), source=f"bundle {bundle.name!r}")
        if expected_hash is not None:  # a full hash or a unique prefix (`bundle list` prints 12 digits)
            check_hash(expected_hash, bundle.content_hash)
        stamped = _stamp(bundle, parents, edge, evidence_ids)
        return self._register(stamped, note=note, seed=False)

    def _register(self, bundle: Bundle, *, note: str, seed: bool) -> RegisteredBundle:
        data = dump_bundle_yaml(bundle).encode()
        # the stored form must read back as every later read does (its size cap, its parser): a
        # bundle whose file fits could dump larger (block style), and a committed blob that no read
        # accepts broke every listing of the registry
        try:
            load_bundle_yaml(data.decode())
        except ValidationError as exc:
            raise ValidationError(f"bundle {bundle.name!r} cannot be stored, nothing was registered: {exc}",
                                  hint="make it smaller (fewer evidence ids, a shorter description)") from None
        blob_hash = sha256(data)
        with self.journal.write("register"):
            found = self.journal.find_content(bundle.name, bundle.content_hash)
            latest = self.journal.latest(bundle.name)
            if found is None and not (seed and latest):
                self._check_parents(bundle, latest)
                if bundle.provenance.edge == "specialization" and bundle.provenance.parents:  # else external
                    parent = format_ref(bundle.name, bundle.provenance.parents[0])
                    scopes.check_specialization(bundle, self.get(parent).bundle)
                self.journal.write_blob(data, blob_hash)
                version = latest + 1
                seq = self.journal.append("registration", bundle.name, version, {
                    "content_hash": bundle.content_hash, "blob_hash": blob_hash,
                    "parents": list(bundle.provenance.parents), "edge": bundle.provenance.edge,
                    "evidence_ids": list(bundle.provenance.evidence_ids), "note": note, "seed": seed,
                    "scope": bundle.applicability.scope_key})
                self.journal.index(bundle.name, version, bundle.content_hash, blob_hash, seq)
            else:
                version = found if found is not None else 1
        return self.get(format_ref(bundle.name, version))

    def _check_parents(self, bundle: Bundle, latest: int) -> None:
        for parent in bundle.provenance.parents:
            if not 1 <= parent <= latest:
                known = f"versions: 1–{latest}" if latest else "no versions yet"
                raise NotFound(f"parent {format_ref(bundle.name, parent)} is not registered ({known})",
                               hint="parents are earlier versions of the same bundle name; to move a bundle "
                                    "between registries use `ole bundle export` and `ole bundle import`")

    def _register_seeds(self) -> None:
        good, self.warnings = seed_files(self.root)
        known = set(self.names())
        for path, bundle in good:
            if path.stem not in known:
                self._register(_stamp(bundle, (), None, ()), note=f"seed {path.name}", seed=True)
            elif self.journal.find_content(bundle.name, bundle.content_hash) is None:
                self.warnings.append(edited_seed(path, bundle.name))

    def seed_problems(self) -> list[str]:
        """Root `*.yaml` files that are skipped (unloadable, misnamed, with parents) or were
        edited after their name was registered (the registry never re-reads a registered seed)."""
        good, problems = seed_files(self.root)
        known = set(self.names())
        return problems + [edited_seed(path, bundle.name) for path, bundle in good
                           if path.stem in known and self.journal.find_content(bundle.name, bundle.content_hash)
                           is None]

    # ----- reads --------------------------------------------------------------------------

    def events(self, *, name: str | None = None, version: int | None = None, channel: str | None = None,
               kind: str | None = None, since: int = 0) -> list[Event]:
        """Recorded events in seq order, optionally filtered; `since` = only seq > since."""
        return self.journal.events(name=name, version=version, channel=channel, kind=kind, since=since)

    def state(self) -> State:
        """Statuses and channel pointers derived from all events (evaluation payloads unread:
        `Journal.pointer_events`)."""
        return derive_state(self.journal.pointer_events(), DEFAULT_CHANNEL)

    def names(self) -> list[str]:
        """Registered bundle names, sorted."""
        return self.journal.names()

    def _row(self, name: str, version: int | None) -> IndexRow:
        rows = self.journal.rows(name)
        if not rows:
            close = difflib.get_close_matches(name, self.names(), n=2)
            raise NotFound(f"no bundle named `{name}` in {self.root}", suggestions=close,
                           hint="" if close else "see `ole bundle list`")
        if version is None:
            return rows[-1]
        for row in rows:
            if row.version == version:
                return row
        raise NotFound(f"no version {version} of bundle `{name}`; versions: 1–{rows[-1].version}",
                       hint=f"e.g. `{format_ref(name, rows[-1].version)}`")

    def get(self, ref: str, *, state: State | None = None) -> RegisteredBundle:
        """The bundle `NAME@VERSION` (or the latest version of `NAME`), hash-checked."""
        name, version = parse_ref(ref)
        row = self._row(name, version)
        bundle = load_bundle_yaml(self.journal.read_blob(row).decode())
        state = state or self.state()
        return RegisteredBundle(name=name, version=row.version, content_hash=row.content_hash,
                                blob_hash=row.blob_hash, status=state.status_of(name, row.version),
                                registered_at=self.journal.committed_at(row.registered_seq), bundle=bundle)

    def versions(self, name: str, *, skip_damaged: bool = False) -> list[RegisteredBundle]:
        """All versions of `name`, oldest first; `skip_damaged` leaves out those `damaged()` names."""
        state = self.state()
        latest = self._row(name, None).version
        out = []
        for v in range(1, latest + 1):
            try:
                out.append(self.get(format_ref(name, v), state=state))
            except IntegrityError:
                if not skip_damaged:
                    raise
        return out

    def damaged(self) -> dict[str, str]:
        """`NAME@VERSION` -> why, for every version whose blob is missing or fails its hash check.

        A damaged version degrades only itself: listing, lineage, events and every other
        version keep working; reading its YAML raises `IntegrityError`.
        """
        found = {format_ref(r.name, r.version): self.journal.blob_damage(r.blob_hash)
                 for r in sorted(self.journal.rows())}
        return {ref: why for ref, why in found.items() if why is not None}

    def restore_blob(self, path: str | Path) -> str:
        """Put back the blob of a damaged version from a copy of its exact bytes (a backup).

        The copy's sha256 must be the blob hash the index recorded, so nothing but the
        original bytes can be restored. Returns the version's `NAME@VERSION`.
        """
        data = fsck_check.read_backup(Path(path))
        blob_hash = sha256(data)
        key = self.journal.find_blob(blob_hash)
        if key is None:
            raise NotFound(f"{path} is not the stored YAML of any registered version (sha256 {blob_hash[:12]}…)",
                           hint="restore needs a byte-exact copy of .registry/blobs/…/<sha256>.yaml")
        with self.journal.write("restore"):
            self.journal.write_blob(data, blob_hash)
        return format_ref(*key)

    def find_content(self, name: str, content_hash: str) -> RegisteredBundle | None:
        """The version of `name` with this content hash, if registered."""
        version = self.journal.find_content(name, content_hash)
        return self.get(format_ref(name, version)) if version is not None else None

    def champion(self, channel: str = DEFAULT_CHANNEL) -> RegisteredBundle:
        """The ACTIVE bundle of `channel` (see `ole.registry.state.State.champion` for defaults)."""
        key = self.state().champion(channel)
        if key is None:
            raise NotFound(f"no bundle is registered in {self.root}",
                           hint="add a seed bundles/*.yaml or run `ole bundle register FILE`")
        return self.get(format_ref(*key))

    # ----- evaluation, gate, release, rollback ----------------------------------------------

    def _existing(self, ref: str) -> Key:
        name, version = parse_ref(ref)
        if version is None:
            latest = self._row(name, None).version
            raise ValidationError(f"`{ref}` needs an explicit version", hint=f"e.g. `{format_ref(name, latest)}`")
        return name, self._row(name, version).version

    def record_evaluation(self, ref: str, payload: dict[str, Any], *, key: str | None = None) -> int:
        """Append an evaluation result (any JSON object) for a version; returns the event seq.

        `key` (on every write method) is an idempotency key: an event already appended under it
        is returned instead of appending another, so a writer that crashed after the commit can
        simply repeat the call.
        """
        name, version = self._existing(ref)
        with self.journal.write("evaluation"):
            done = self.journal.replayed(key)
            return done.seq if done else self.journal.append("evaluation", name, version, dict(payload), key=key)

    def record_gate_decision(self, ref: str, decision: dict[str, Any], *, key: str | None = None) -> int:
        """Append a release-gate decision; returns the event seq.

        `decision` must state a verdict (`ole.verdicts`: its `verdict`, or in older words
        `accepted: true|false` or `decision: "accept"|"reject"`); it is stored as `verdict`. A
        `release` makes the status `gated` (passed the gate), any other verdict `rejected`.
        """
        verdict = verdict_of(decision)
        if verdict is None:
            raise ValidationError("gate decision states no verdict (verdict: release|reject|indecisive, or in older "
                                  f"words accepted: true/false), got keys {sorted(decision)}",
                                  hint='pass {"verdict": "release"|"reject"|"indecisive", ...}')
        name, version = self._existing(ref)
        with self.journal.write("gate_decision"):
            done = self.journal.replayed(key)
            return done.seq if done else self.journal.append("gate_decision", name, version,
                                                             {**decision, "verdict": verdict}, key=key)

    def release(self, ref: str, *, channel: str = DEFAULT_CHANNEL, reason: str,
                force: bool = False, key: str | None = None, exposure: float | None = None,
                analysis: str | None = None) -> RegisteredBundle:
        """Release a version on a channel; it becomes active at the next `activate_pending` / `select`.

        The release's scope is the version's applicability **narrowed to what its last gate
        decision's pairs covered** (`ole.coverage.bound_for_release`: hosts, env ids with an
        effect, the budget band), so a release never reaches tasks its evidence did not; the
        event records the decision it was bounded by. A version never gated keeps its own
        applicability, and the event says that no evidence bounds it.

        With `exposure` the release is **staged**: the next task boundary starts it as a canary
        (a `stage` event) instead of activating it; it takes that share of the in-scope task
        boundaries of an online stream, each paired with the control, until `stage()` records
        its promotion or rollback (`analysis`: the hash of the analysis that will judge it).
        """
        if exposure is not None and not 0.0 < exposure <= 1.0:
            raise ValidationError(f"exposure must be in (0, 1], got {exposure}", hint="e.g. 0.5: every second task")
        this = self._existing(ref)
        _need_reason(reason, "release")
        _check_channel(channel)
        own = self.get(format_ref(*this)).bundle.applicability  # also refuses a damaged version first
        with self.journal.write("release"):
            if self.journal.replayed(key) is not None:
                return self.get(format_ref(*this))
            events = self.events(name=this[0], version=this[1])
            applied, evidence = bound_for_release(own, decision_event(events, *this), scopes.features_of)
            scope = applied.scope_key
            state = self.state()
            if state.status_of(*this) == "rejected" and not force:
                raise Conflict(f"{format_ref(*this)} was rejected by the gate",
                               hint="release another version, or pass --force to override the gate")
            untouched = state.target_event(channel, scope) is None and (channel, scope) not in state.pointers
            seed_champion = untouched and channel == DEFAULT_CHANNEL and state.champion(channel, scope) == this
            if state.pinned(channel, scope) == this or seed_champion:
                raise Conflict(f"{format_ref(*this)} is already the release of {_where(channel, scope)}",
                               hint="see `ole champion show`")
            current = state.champion(channel, scope)
            staged = {} if exposure is None else {"exposure": exposure, "analysis": analysis}
            self.journal.append("release", *this, {"reason": reason, "forced": force, "scope": scope,
                                                   "active": format_ref(*current) if current else None,
                                                   "evidence": evidence, **staged}, channel, key=key)
        return self.get(format_ref(*this))

    def widen(self, ref: str, scope: str, *, kind: WideningKind, decision_seq: int, reason: str,
              channel: str = DEFAULT_CHANNEL, key: str | None = None, exposure: float | None = None,
              analysis: str | None = None) -> RegisteredBundle:
        """Release a released version into one more scope, `scope`, on evidence beyond its gate's pairs
        (`ole.registry.widening`: a region its transfer sample claimed, or one env of a region its
        transfer evidence gained in, tried as a canary: `exposure`). The scopes it serves already are
        untouched; a rollback of this scope restores the narrower reach."""
        this = self._existing(ref)
        _need_reason(reason, "widening")
        _check_channel(channel)
        scope = parse_scope(scope).scope_key
        own = self.get(format_ref(*this)).bundle.applicability
        with self.journal.write("release"):
            if self.journal.replayed(key) is not None:
                return self.get(format_ref(*this))
            state = self.state()
            if state.status_of(*this) not in ("active", "released", "canary"):
                raise Conflict(f"{format_ref(*this)} is not released: a widening extends a release",
                               hint="release it first (its gate decision bounds where)")
            check_widening(state.pinned(channel, scope), this, scope, _where(channel, scope))
            evidence = widening_evidence(self.events(name=this[0], version=this[1]), this, scope, kind,
                                         decision_seq, own, scopes.features_of)
            current = state.champion(channel, scope)
            staged = {} if exposure is None else {"exposure": exposure, "analysis": analysis}
            self.journal.append("release", *this, {"reason": reason, "forced": False, "scope": scope,
                                                   "active": format_ref(*current) if current else None,
                                                   "evidence": evidence, "widening": kind, **staged}, channel, key=key)
        return self.get(format_ref(*this))

    def rollback(self, channel: str = DEFAULT_CHANNEL, *, scope: str = GENERAL_SCOPE, to: str | None = None,
                 to_parent: bool = False, force: bool = False, reason: str, key: str | None = None,
                 monitor: dict[str, Any] | None = None) -> RegisteredBundle:
        """Roll one scope of a channel back (`ole.registry.rollback`): by default to what served it before
        the current champion's release (none: the scope's pointer is removed, its tasks fall back to the
        next matching champion); `to` or `to_parent` (the lineage parent) when asked. An unvetted
        target (never released nor gated) needs `force`. A canary running in the scope is ended instead
        (the control keeps serving); a release still pending is cancelled. Other scopes are untouched.
        Recorded now; takes effect at the next task boundary. `monitor`: the monitor look that fired.
        Returns the target, or the version removed or ended."""
        _need_reason(reason, "rollback")
        _check_channel(channel)
        scope = parse_scope(scope).scope_key
        with self.journal.write("rollback"):
            done = self.journal.replayed(key)
            if done is not None:
                return self.get(done.ref)
            state = self.state()
            if to is None and not to_parent and state.canary(channel, scope) is not None:
                return self.get(self._end_canary(channel, scope, "rolled_back", reason, monitor, key).ref)
            event = rollback.plan(state, self.events(), channel, scope, DEFAULT_CHANNEL,
                                  explicit=self._existing(to) if to is not None else None, to_parent=to_parent,
                                  parent_of=self._parent, force=force,
                                  own_scope=lambda k: self.get(format_ref(*k), state=state).bundle.applicability)
            payload = {**event, "reason": reason, "scope": scope, **({"monitor": monitor} if monitor else {})}
            target: Key = payload.pop("target")
            self.get(format_ref(*target), state=state)  # the target must be readable: refuse before recording
            self.journal.append("rollback", target[0], target[1], payload, channel, key=key)
        return self.get(format_ref(*target))

    def _parent(self, key: Key) -> Key:
        """The first lineage parent of a version, from its registration event (readable when its blob is damaged)."""
        row = self.journal.row(key)
        assert row is not None, f"{format_ref(*key)} was checked to be registered"
        parents = list(self.journal.event(row.registered_seq).payload.get("parents") or [])
        if not parents:
            raise Conflict(f"{format_ref(*key)} has no parent to roll back to", hint="pass --to NAME@VERSION")
        return key[0], parents[0]

    # ----- task boundary: activations and canary stages ------------------------------------

    def activate_pending(self, channel: str = DEFAULT_CHANNEL) -> RegisteredBundle | None:
        """Task boundary: in every scope of `channel`, make the latest released-or-rolled-back-to
        version active, or remove the pointer a scope rollback removed (each one event).

        Returns the general champion of the channel, or None when nothing is registered.
        """
        state = self._boundary(channel)
        current = state.champion(channel)
        return self.get(format_ref(*current), state=state) if current else None

    def _boundary(self, channel: str) -> State:
        """Record the activations of `channel`'s task boundary; the state right after it."""
        _check_channel(channel)
        state = self.state()
        if not boundary_events(state, channel):  # nothing pending: no write (a read-only registry routes)
            return state
        with self.journal.write("activation"):
            state = self.state()
            planned = boundary_events(state, channel)
            for event in planned:
                self.journal.append(event.kind, *event.key, event.payload, channel)
            return self.state() if planned else state

    def stage(self, channel: str, scope: str, step: Step, *, reason: str,
              monitor: dict[str, Any] | None = None, key: str | None = None) -> Event:
        """Record a step of the canary running in (channel, scope): a monitor `look` that holds, its
        promotion (it becomes the scope's champion at once: it has been serving tasks) or its
        rollback (the canary ends; the control never stopped being the champion)."""
        _need_reason(reason, f"stage {step}")
        scope = parse_scope(scope).scope_key
        with self.journal.write("stage"):
            done = self.journal.replayed(key)
            if done is not None:
                return done
            return self._end_canary(channel, scope, step, reason, monitor, key)

    def _end_canary(self, channel: str, scope: str, step: Step, reason: str, monitor: dict[str, Any] | None,
                    key: str | None) -> Event:
        """Append a `stage` step of the canary running in (channel, scope) (inside a write transaction)."""
        canary = self.state().canary(channel, scope)
        if canary is None:
            raise Conflict(f"no canary is running in scope `{scope}` of channel `{channel}`",
                           hint="a staged release starts as a canary at the next task boundary")
        seq = self.journal.append("stage", *canary.key, {
            "stage": step, "scope": scope, "release_seq": canary.payload.get("release_seq"),
            "canary_seq": canary.seq, "reason": reason, "monitor": monitor or {},
            "analysis": canary.payload.get("analysis")}, channel, key=key)
        return self.journal.event(seq)

    def canaries(self, channel: str = DEFAULT_CHANNEL) -> dict[str, Event]:
        """Scope key -> the `stage` event of each canary running on `channel`."""
        state = self.state()
        return {s: e for s in state.scopes(channel) if (e := state.canary(channel, s)) is not None}

    # ----- releases recorded before evidence bounded them (`ole.registry.legacy`) -----------

    def _legacy_releases(self) -> list[LegacyRelease]:
        return legacy_releases(self.events(), lambda ref: self.get(ref).bundle.applicability)

    def _bound_legacy_releases(self) -> None:
        """Bound the releases recorded before releases were bounded by evidence, as events (once)."""
        if not self._legacy_releases():
            return
        with self.journal.write("bound"):
            state = self.state()
            for item in self._legacy_releases():
                planned, line = bounding_events(item, state)
                for event in planned:
                    self.journal.append(event.kind, *event.key, event.payload, item.release.channel)
                self.bounded_on_open.append(line)

    # ----- scoped routing (`ole.registry.scopes`) ---------------------------------------------

    def select(self, channel: str, ctx: TaskContext, *, activate: bool = True) -> Selection:
        """Task boundary: the bundle a task `ctx` gets on `channel`, and why.

        With `activate` (the runner's call), first activates the pending changes of every scope
        of the channel (recorded), then returns the most specific active scope champion whose
        applicability matches the task, else the channel's general champion. With
        `activate=False` nothing is written: the answer is what the next task boundary *would*
        give (pending changes of this channel applied in memory), for `ole champion show`.
        An unknown channel is a `NotFound` with close names.
        """
        self.require_channel(channel)
        state = self._boundary(channel) if activate else self.state()
        found = scopes.route(channel, ctx, state.champions(channel, pending=not activate))
        pending = state.target_event(channel, found.scope) \
            if not activate and state.is_pending(channel, found.scope) else None
        return scopes.selection(channel, ctx, found, self.get(format_ref(*found.key), state=state),
                                pending_event=pending)

    def scope_champions(self, channel: str = DEFAULT_CHANNEL) -> list[ScopeChampion]:
        """Every scope of `channel` (general first, then most specific first) with its champion,
        any pending change and its canary stage."""
        _check_channel(channel)
        state = self.state()
        ordered = [GENERAL_SCOPE] + scopes.rank(s for s in state.scopes(channel) if s != GENERAL_SCOPE)
        stages = self.events(kind="stage", channel=channel)
        out = []
        for scope in ordered:
            canary = state.canary(channel, scope)
            looks = self.events(kind="evaluation", name=canary.name, version=canary.version) if canary else []
            found = scopes.scope_champion(state, channel, scope, stages, looks)
            if found is not None:
                out.append(found)
        return out

    def require_channel(self, channel: str, *, state: State | None = None) -> None:
        """Raise `NotFound` (with close names) unless `channel` is `default` or named by an event."""
        _check_channel(channel)
        known = (state or self.state()).channels()
        if channel not in known:
            close = difflib.get_close_matches(channel, known, n=2)
            raise NotFound(f"no channel `{channel}`; channels: {', '.join(known)}", suggestions=close,
                           hint="" if close else "a channel starts with `ole release REF --channel NAME`")

    def fsck(self, *, repair: bool = True, traces: Sequence[str | Path | Archive] = ()) -> FsckReport:
        """Check hashes, lineage DAG and pointers; sweep orphans and quarantine corrupt blobs. With `traces`
        (trace archives, or folders: in this registry's storage), every trace id an event names must be in one."""
        seeds, url = self.seed_problems, self.storage
        if self.read_only and not repair:  # nothing can write here: no lock needed to look
            return fsck_check.check(self.journal, repair=False, traces=traces, seed_problems=seeds(), storage=url)
        with self.journal.write("fsck"):
            return fsck_check.check(self.journal, repair=repair, traces=traces, seed_problems=seeds(), storage=url)


def _stamp(bundle: Bundle, parents: Sequence[int], edge: str | None, evidence_ids: Sequence[str]) -> Bundle:
    """`bundle` with its provenance stamped: parents, edge (and the mode it implies), evidence, time."""
    prov = bundle.provenance.model_dump(mode="json")
    parents = [int(p) for p in parents]
    if parents or edge:
        edge = edge or prov["edge"] or ("recombination" if len(parents) == 2 else "manual")
        for key, value in (("parents", parents), ("edge", edge)):
            if prov[key] not in ([], None, value):
                raise Conflict(f"the bundle's provenance says {key}={prov[key]!r} but {value!r} was given",
                               hint="drop the flag or fix the file's provenance")
        if not prov["parents"]:  # derived here, so the file's timestamp is the parent's
            prov["created_at"] = None
        mode = prov["mode"] if prov["mode"] in EDGE_MODES.get(edge, ()) else EDGE_MODE.get(edge, prov["mode"])
        prov.update(parents=parents, edge=edge, mode=mode)
    prov["evidence_ids"] = list(dict.fromkeys([*prov["evidence_ids"], *evidence_ids]))
    if prov["created_at"] is None:
        prov["created_at"] = now().isoformat()
    provenance = validate_data(Provenance, prov, source=f"{bundle.name} provenance")
    return bundle.model_copy(update={"provenance": provenance})


def _need_reason(reason: str, what: str) -> None:
    if not isinstance(reason, str) or not reason.strip():
        raise ValidationError(f"a {what} needs a reason", hint='pass --reason "why"')


def _where(channel: str, scope: str) -> str:
    return f"channel `{channel}`" + ("" if scope == GENERAL_SCOPE else f" scope `{scope}`")


def _check_channel(channel: str) -> None:
    if not isinstance(channel, str) or not re.fullmatch(NAME_PATTERN, channel):
        raise ValidationError(f"bad channel name `{channel}`",
                              hint="lower-case letters, digits, - and _, e.g. `default` or `classic_control`")
