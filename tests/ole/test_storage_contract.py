"""One contract, two backends: the registry's and the evaluation store's own tests, run again with
`$OLE_STORAGE` naming a fresh database on a real PostgreSQL server (tests/ole/pg_fixtures.py).

Each case is the SQLite suite's test function, unchanged; the SQLite run is the suite itself. A
test left out here checks something only files have (a blob file damaged by hand, `PRAGMA
user_version`, a full file system, SQLite's lock), and PostgreSQL's counterpart is tested in
tests/ole/test_storage_postgres.py.
"""
from __future__ import annotations

import inspect

import pytest

from ole.registry import CRASH_POINTS
from tests.ole import test_registry, test_resume, test_store_steps
from tests.ole.pg_fixtures import pg_env, pg_server, pg_url  # noqa: F401 - fixtures
from tests.ole.test_registry import root  # noqa: F401 - the suite's fixture

CASES = [
    test_registry.test_seeds_register_once_with_coder_first,
    test_registry.test_registration_assigns_versions_and_is_not_release,
    test_registry.test_provenance_in_the_file_and_arguments_must_agree,
    test_registry.test_lookup_errors_suggest_the_fix,
    test_registry.test_status_lifecycle_release_activate_rollback,
    test_registry.test_channels_inherit_default_until_their_own_release,
    test_registry.test_gate_decision_needs_an_explicit_verdict,
    test_registry.test_a_misnamed_seed_is_skipped_and_reported,
    test_registry.test_crash_points_are_ignored_outside_test_mode,
    test_registry.test_concurrent_releases_on_one_channel_serialize,
    test_registry.test_a_bundle_built_with_model_copy_is_validated_before_it_is_stored,
    test_resume.test_steps_made_unbound_are_refused_once_bound,
    test_resume.test_registry_writes_with_a_key_are_idempotent,
    test_store_steps.test_commit_writes_under_the_steps_key_then_marks_and_a_failed_write_marks_nothing,
]
"""Suite tests that run unchanged on PostgreSQL (left out: see the module docstring)."""
HEAVY = [test_resume.test_processes_opening_one_fresh_store_at_once_all_open_it]
"""Suite tests of the heavy tier, run there on PostgreSQL too."""


def _params(tests: list, marks: tuple = ()) -> list:
    out = []
    for test in tests:
        grid = [m for m in getattr(test, "pytestmark", []) if m.name == "parametrize"]
        if not grid:
            out.append(pytest.param(test, {}, id=test.__name__, marks=marks))
            continue
        names = [n.strip() for n in grid[0].args[0].split(",")]
        for i, values in enumerate(grid[0].args[1]):
            values = values if len(names) > 1 else (values,)
            out.append(pytest.param(test, dict(zip(names, values)), id=f"{test.__name__}[{i}]", marks=marks))
    return out


def _call(test, given: dict, request) -> None:
    """Run the suite's test, then check that it ran on PostgreSQL: its tables hold rows there, and no
    SQLite file was made (a backend that silently fell back to files would otherwise pass)."""
    kwargs = {name: given[name] if name in given else request.getfixturevalue(name)
              for name in inspect.signature(test).parameters}
    test(**kwargs)
    from ole.storage import postgres
    db = postgres.connect(request.getfixturevalue("pg_env"))
    try:
        tables = {r[0] for r in db.execute("SELECT table_name FROM information_schema.tables")}
    finally:
        db.close()
    assert tables & {"events", "evaluations"}, f"nothing was stored in PostgreSQL: {sorted(tables)}"
    tmp = request.getfixturevalue("tmp_path")
    assert not list(tmp.rglob("*.sqlite3")), "a SQLite file was written: the test did not run on PostgreSQL"


@pytest.mark.parametrize("test, given", _params(CASES))
def test_the_suite_on_postgresql(test, given, pg_env, request):  # noqa: F811 - pg_env is the fixture
    _call(test, given, request)


@pytest.mark.parametrize("test, given", _params(HEAVY, (pytest.mark.heavy,)))
def test_the_heavy_suite_on_postgresql(test, given, pg_env, request):  # noqa: F811
    _call(test, given, request)


@pytest.mark.heavy
@pytest.mark.parametrize("step", [s for s in CRASH_POINTS if not s.startswith("blob")])  # blob files: SQLite only
def test_kill_at_each_write_step_on_postgresql(step, pg_env, root):  # noqa: F811
    test_registry.test_kill_at_each_write_step_leaves_a_consistent_registry(root, step)
