"""PostgreSQL storage on a real server: append-only enforced by the database, fsck finds and repairs
damage there, leases and stream counters across processes, what `Registry` refuses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from ole.bundle import bundle_from_data
from ole.errors import IntegrityError, StorageError
from ole.evolve.store import EvaluationStore
from ole.registry import Registry
from ole.registry.lease import Lease
from ole.storage import postgres
from tests.ole.pg_fixtures import pg_env, pg_server, pg_url  # noqa: F401 - fixtures
from tests.ole.test_registry import root  # noqa: F401 - the registry suite's fixture

PROJECT = Path(__file__).resolve().parents[2]


def child(step: float):
    return bundle_from_data({"name": "coder", "loop_policy": {"action": {"step_size": step}}})


def _bypass(url: str):
    """A superuser connection with triggers off (`session_replication_role = replica`): how damage is
    made by hand, the way a raw file edit damages the SQLite registry."""
    db = postgres.connect(url)
    db.execute("SET session_replication_role = replica")
    return db


@pytest.mark.parametrize("sql", ["UPDATE events SET kind = 'x'", "DELETE FROM events", "TRUNCATE events",
                                 "UPDATE bundles SET content_hash = 'x'", "DELETE FROM event_keys",
                                 "UPDATE blobs SET data = 'x'", "DELETE FROM blobs"])
def test_the_database_refuses_to_change_what_was_recorded(root, pg_url, sql):  # noqa: F811
    with Registry(root, storage=pg_url) as reg:
        reg.record_evaluation("coder@1", {"r": 1}, key="k")
        before = reg.journal.dump()
        with pytest.raises(Exception, match="append-only|immutable"):
            reg.journal.connection.execute(sql)
        assert reg.journal.dump() == before


def test_fsck_quarantines_a_damaged_blob_row_and_restore_brings_it_back(root, pg_url, tmp_path):  # noqa: F811
    with Registry(root, storage=pg_url) as reg:
        entry = reg.register(child(0.5), parents=[1])
        good = reg.journal.read_blob(reg.journal.row(("coder", 2)))
        db = _bypass(pg_url)
        db.execute("UPDATE blobs SET data = %s WHERE hash = %s", (good.replace(b"0.5", b"0.9"), entry.blob_hash))
        db.execute("INSERT INTO blobs VALUES (%s, 'orphan')", ("f" * 64,))
        db.close()
        with pytest.raises(IntegrityError, match="fails its hash check"):
            reg.get("coder@2")
        assert reg.damaged() == {"coder@2": "blob fails its hash check"}
        report = reg.fsck()
        assert not report.ok and report.problems[0].startswith("coder@2: blob") and "quarantined" in report.problems[0]
        assert len(report.quarantined) == 1 and report.swept == ("blobs/" + "f" * 64,)
        with pytest.raises(IntegrityError, match="missing"):
            reg.get("coder@2")
        assert reg.get("coder@1").ref == "coder@1"  # only the damaged version is degraded
        backup = tmp_path / "backup.yaml"
        backup.write_bytes(good)
        assert reg.restore_blob(backup) == "coder@2"
        assert reg.get("coder@2").bundle.content_hash == entry.content_hash
        assert reg.fsck().ok


def test_fsck_reports_a_seq_gap_and_a_dropped_trigger(root, pg_url):  # noqa: F811
    with Registry(root, storage=pg_url) as reg:
        assert reg.fsck().ok
        db = _bypass(pg_url)
        db.execute("INSERT INTO events VALUES (9, '2026-01-01T00:00:00+00:00', 'evaluation', 'coder', 1, NULL, '{}')")
        db.execute("DROP TRIGGER ole_events_append_only ON events")
        db.close()
        problems = reg.fsck().problems
        assert any("seq not dense (after 2)" in p for p in problems), problems
        assert any("ole_events_append_only" in p for p in problems), problems


def test_another_schema_version_is_refused(root, pg_url):  # noqa: F811
    Registry(root, storage=pg_url).close()
    db = _bypass(pg_url)
    db.execute("UPDATE ole_meta SET value = '99' WHERE key = 'registry_schema'")
    db.close()
    with pytest.raises(StorageError, match="schema version 99"):
        Registry(root, storage=pg_url)


def test_an_unreachable_server_is_a_storage_error_with_the_next_step(root, tmp_path):  # noqa: F811
    with pytest.raises(StorageError, match="cannot reach the PostgreSQL storage") as info:
        Registry(root, storage=f"postgresql://ole:secret@/none?host={tmp_path}")
    assert "secret" not in str(info.value) and "--storage" in info.value.hint


def test_a_lease_has_one_holder_expires_and_is_renewed(pg_url):  # noqa: F811
    ttl = 2.0  # the heartbeat renews every ttl/4, on a connection of its own (a loaded machine needs slack)
    first = Lease(pg_url, "round:default", "host-a:1:x", ttl_s=ttl)
    second = Lease(pg_url, "round:default", "host-b:2:y", ttl_s=ttl, wait_s=0)
    assert first.hold()
    time.sleep(ttl * 1.25)  # longer than the TTL: only the heartbeat keeps it
    assert second.try_acquire() == "host-a:1:x" and not second.hold()
    first._stop.set()  # the holder dies: no more renewals
    first._beat.join()
    time.sleep(ttl * 1.25)
    assert second.hold()  # expired: taken over, and now renewed by its own heartbeat
    first.release()  # no longer ours: frees nothing
    time.sleep(ttl * 0.75)
    assert Lease(pg_url, "round:default", "host-c:3:z").try_acquire() == "host-b:2:y"
    second.release()
    assert Lease(pg_url, "round:default", "host-c:3:z").try_acquire() is None


DRAWER = """
    import sys
    from ole.evolve.store import EvaluationStore
    store = EvaluationStore(sys.argv[1])
    for i in range(25):
        print(store.draw("boundary"), flush=True)
        store.add_task(f"{sys.argv[2]}-{i}", {"i": i})
"""


def test_stream_counters_are_unique_across_processes(pg_env, tmp_path):  # noqa: F811
    path = tmp_path / "work" / "evaluations.sqlite3"
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(DRAWER), str(path), f"w{w}"], cwd=PROJECT,
                              env={**os.environ, "PYTHONPATH": str(PROJECT)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in range(4)]
    drawn = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        drawn += [int(x) for x in out.split()]
    assert sorted(drawn) == list(range(100))
    store = EvaluationStore(path)
    tasks = store.tasks()
    assert [n for n, _ in tasks] == list(range(1, 101)) and len({p["i"] for _, p in tasks}) == 25
    again = store.add_task("w0-3", {"i": 3})  # recorded once: its finish number again, no new row
    assert 1 <= again <= 100 and store.add_task("w0-3", {"i": 3}) == again and len(store.tasks()) == 100
    assert not path.exists()  # the store is in the database, not a file


@pytest.mark.heavy  # a pytest in a subprocess: seconds
def test_without_the_server_binaries_the_tier_fails_with_the_install_line(tmp_path):
    """Never a quiet skip: a machine without PostgreSQL reports the PostgreSQL tests as failed, saying how
    to install it."""
    (tmp_path / "test_one.py").write_text("from tests.ole.pg_fixtures import pg_server, pg_url  # noqa: F401\n"
                                          "def test_needs_it(pg_url):\n    pass\n")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
                           str(tmp_path / "test_one.py"), "--rootdir", str(PROJECT)], cwd=PROJECT,
                          env={**os.environ, "PYTHONPATH": str(PROJECT), "OLE_PG_BINDIR": str(tmp_path)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "1 error" in done.stdout and "skipped" not in done.stdout, done.stdout[-2000:]
    assert "apt-get install -y postgresql" in done.stdout


def test_the_report_reads_a_workspace_store_in_postgresql_and_creates_nothing(pg_env, tmp_path):  # noqa: F811
    """`ole report` with `OLE_STORAGE` reads the workspace's rows from its schema (not a file that is not
    there), and a workspace that never stored anything there gets no schema made by reading it."""
    from ole.paired import RunResult
    from ole.report.collect import _store_rows
    work = tmp_path / "evolve-a"
    store = EvaluationStore(work / "evaluations.sqlite3")
    result = RunResult(trace_id="t1", bundle_hash="h" * 64, q=1.5, q_source="raw", score=1.5, status="completed",
                       verified=True, episodes=4, wall_s=2.0)
    store.put("k1", "gym/acrobot|pool101|seed0", "generic", result)
    store.close()
    rows = _store_rows(work)
    assert [(i, f, r["trace_id"], r["score"]) for i, f, r in rows] == [("gym/acrobot|pool101|seed0", "generic",
                                                                          "t1", 1.5)]
    assert not (work / "evaluations.sqlite3").exists()
    assert _store_rows(tmp_path / "never-used") == []
    db = postgres.connect(pg_env)
    schemas = {r[0] for r in db.execute("SELECT schema_name FROM information_schema.schemata")}
    db.close()
    assert postgres.store_schema("evolve-a_evaluations") in schemas
    assert postgres.store_schema("never-used_evaluations") not in schemas


def test_a_workspace_fingerprint_names_the_database_not_a_machines_folders(pg_url, tmp_path):  # noqa: F811
    """Two machines with their own folders (same workspace names) bind one shared store: on PostgreSQL the
    fingerprint holds the database and the trace archive's schema, never the full paths, which differ."""
    from ole.evolve.engine import places
    for folder in ("m0/bundles", "m1/bundles", "m0/files", "m1/files"):
        (tmp_path / folder).mkdir(parents=True)
    with Registry(tmp_path / "m0" / "bundles", storage=pg_url) as a, \
            Registry(tmp_path / "m1" / "bundles", storage=pg_url) as b:
        assert places(a, tmp_path / "m0" / "stream" / "traces") == places(b, tmp_path / "m1" / "stream" / "traces")
        assert str(tmp_path) not in json.dumps(places(a, tmp_path / "m0" / "stream" / "traces"))
        assert places(a, tmp_path / "m0" / "stream" / "traces") != places(a, tmp_path / "m0" / "other" / "traces")
    with Registry(tmp_path / "m0" / "files", storage="sqlite") as c, \
            Registry(tmp_path / "m1" / "files", storage="sqlite") as d:
        assert places(c, tmp_path / "t") != places(d, tmp_path / "t")  # files: the folders are the identity
