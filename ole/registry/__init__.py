"""The bundle registry: versioned bundles, their append-only events, and the views derived from them.

Modules, each importing only those listed before it (no circle, no arrow back up):

    records   frozen records and vocabularies (Event, RegisteredBundle, Selection, FsckReport, ...)
    journal   the SQLite event log, the version index and the content-addressed blobs
    state     statuses and champion pointers folded from the events (a pure view)
    scopes    routing a task to the most specific matching scope champion (pure), task contexts
    boundary  the events a task boundary records: activations, canary starts (planned from the state)
    seeds     the root's seed files
    legacy    bounding releases recorded before evidence bounded them (planned from events)
    fsck      check and repair, through the journal's public API
    lease     one holder at a time across processes (a table in the journal's database)
    api       `Registry`: the handle that writes through the journal and answers from the views
    lineage   the version graph and champion history (a networkx view over the events)

The names below are the registry's public surface: `from ole.registry import Registry`.
"""
from ole.registry.api import Registry, default_root
from ole.registry.journal import CRASH_EXIT, CRASH_POINTS, DB_FILE, crash_point
from ole.registry.records import (DEFAULT_CHANNEL, Event, EventKind, FsckReport, RegisteredBundle, ScopeChampion,
                                  Selection, Status)
from ole.registry.seeds import DEFAULT_BUNDLE

__all__ = ["CRASH_EXIT", "CRASH_POINTS", "DB_FILE", "DEFAULT_BUNDLE", "DEFAULT_CHANNEL", "Event", "EventKind",
           "FsckReport", "RegisteredBundle", "Registry", "ScopeChampion", "Selection", "Status", "crash_point",
           "default_root"]
