"""The trace archive on both backends (`ole.storage.traces`): one contract for files and PostgreSQL
(a real server, tests/ole/pg_fixtures.py), append-only enforced by the database, damage found and
quarantined by fsck, processes on folders of one name sharing an archive, and `ole storage migrate
--traces` both ways, byte for byte."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ole.cli import main
from ole.errors import IntegrityError, NotFound, StorageError, ValidationError
from ole.registry import Registry
from ole.registry.fsck import check_traces
from ole.storage import STORAGE_ENV, postgres
from ole.storage.migrate import copy_traces
from ole.storage.traces import PgTraceArchive, open_archive
from ole.trace import DamagedTrace, TraceArchive, TraceExists, trace_text
from tests.ole.pg_fixtures import pg_server, pg_url  # noqa: F401 - fixtures
from tests.ole.synthetic import make_trace
from tests.ole.test_registry import root  # noqa: F401 - the registry suite's fixture

PROJECT = Path(__file__).resolve().parents[2]
BACKENDS = ["files", "postgresql"]


@pytest.fixture(params=BACKENDS)
def storage(request) -> str:
    """`sqlite` (the file archive) or the URL of a new database on the session's server."""
    return "sqlite" if request.param == "files" else request.getfixturevalue("pg_url")


def _traces():
    a = make_trace("t-acrobot-1", [1.0, 2.0])
    b = make_trace("t-grid-1", [0.5], env="gymnasium/MiniGrid-FourRooms-v0").model_copy(update={"bundle_hash": "h2"})
    return a, b


def _damage(archive, trace) -> str:
    """A trace whose stored text is cut short: a file truncated in place, or a row inserted by hand (the
    database refuses to change a stored one). Returns its id."""
    text = trace_text(trace)[:200]
    if isinstance(archive, TraceArchive):
        (archive.root / f"{trace.trace_id}.json").write_text(text)
    else:
        archive._db.execute("INSERT INTO traces VALUES (%s, %s, %s, %s)",
                            (trace.trace_id, trace.task.env, trace.bundle_hash, text))
    return trace.trace_id


def test_the_archive_contract_on_both_backends(storage, tmp_path):
    a, b = _traces()
    with open_archive(tmp_path / "work" / "traces", storage) as archive:
        assert isinstance(archive, TraceArchive if storage == "sqlite" else PgTraceArchive)
        assert archive.ids() == [] and list(archive) == [] and archive.damaged() == []
        assert archive.append(b).stem == b.trace_id and archive.append(a).stem == a.trace_id
        assert archive.ids() == [a.trace_id, b.trace_id] and a.trace_id in archive and "t-none" not in archive
        assert archive.get(a.trace_id) == a and [t.trace_id for t in archive] == [a.trace_id, b.trace_id]
        assert archive.select(env="gym/acrobot") == [a] and archive.select(bundle_hash="h2") == [b]
        assert archive.select(env="gym/acrobot", bundle_hash="h2") == [] and archive.skipped == []
        changed = a.model_copy(update={"run_dir": "runs/elsewhere"})
        with pytest.raises(TraceExists, match="already archived"):  # never overwritten
            archive.append(changed)
        assert archive.get(a.trace_id) == a
        with pytest.raises(ValidationError, match="host recorded"):
            archive.append(make_trace("t-unscored", [1.0], verified=False))
        failed = make_trace("t-failed", [None], verified=False, status="error")  # a failure the host wrote
        archive.append(failed)
        assert archive.get("t-failed") == failed
        with pytest.raises(NotFound, match="no trace 't-acrobot-2'") as info:
            archive.get("t-acrobot-2")
        assert "t-acrobot-1" in info.value.hint
        for bad in ("../secret/leak", "/etc/passwd", ".hidden", ""):
            with pytest.raises(NotFound):
                archive.get(bad)
        # the text stored is the file archive's, byte for byte
        assert archive.dump() == {t.trace_id: trace_text(t).encode() for t in (a, b, failed)}
        assert archive.integrity_check() == "ok" and archive.exists()


def test_a_damaged_trace_degrades_only_itself_and_fsck_quarantines_it(storage, tmp_path):
    a, b = _traces()
    with open_archive(tmp_path / "traces", storage) as archive:
        archive.append(a)
        bad = _damage(archive, b)
        with pytest.raises(DamagedTrace, match=f"{bad}.json is damaged") as info:
            archive.get(bad)
        assert [t.trace_id for t in archive] == [a.trace_id] and [p.stem for p, _ in archive.skipped] == [bad]
        assert archive.select(env=b.task.env) == [] and [p.stem for p, _ in archive.skipped] == [bad]
        assert [p for p, _ in archive.damaged()] == [info.value.path]
        problems, moved, count = check_traces(archive, repair=False)
        assert len(problems) == 1 and bad in problems[0] and moved == [] and count == 2
        problems, moved, count = check_traces(archive, repair=True)
        assert "quarantined to" in problems[0] and len(moved) == 1 and count == 2
        assert archive.ids() == [a.trace_id] and archive.damaged() == [] and check_traces(archive, repair=True)[0] == []
        if isinstance(archive, PgTraceArchive):  # the row is kept, byte for byte, in trace_quarantine
            assert moved[0].startswith(f"{archive.schema}/trace_quarantine/")
            kept = archive._db.execute("SELECT trace_id, payload FROM trace_quarantine").fetchall()
            assert kept == [(bad, trace_text(b)[:200])]
        else:
            assert Path(moved[0]).read_text() == trace_text(b)[:200]
        archive.append(b)  # the id is free again, as a quarantined file's is
        assert archive.get(bad) == b


@pytest.mark.parametrize("sql", ["UPDATE traces SET payload = '{}'", "UPDATE traces SET env = 'x'",
                                 "DELETE FROM traces", "TRUNCATE traces"])
def test_the_database_refuses_to_change_an_archived_trace(pg_url, tmp_path, sql):  # noqa: F811
    a, _ = _traces()
    with open_archive(tmp_path / "traces", pg_url) as archive:
        archive.append(a)
        with pytest.raises(Exception, match="traces are append-only"):
            archive._db.execute(sql)
        assert archive.dump() == {a.trace_id: trace_text(a).encode()}
        archive._db.execute("DROP TRIGGER ole_traces_no_truncate ON traces")
        assert "ole_traces_no_truncate" in archive.integrity_check()
        assert any("ole_traces_no_truncate" in p for p in check_traces(archive, repair=False)[0])


def test_the_cli_reads_and_checks_a_database_archive(root, pg_url, tmp_path, capsys):  # noqa: F811
    """`ole trace ls/show` and `ole fsck --traces-dir` with --storage: the folder is only a name (it need not
    exist here), the decisions' trace ids resolve in the database, damage is quarantined there."""
    a, b = _traces()
    folder = tmp_path / "not-here" / "traces"
    with open_archive(folder, pg_url) as archive:
        archive.append(a)
        bad = _damage(archive, b)
    with Registry(root, storage=pg_url) as reg:
        reg.record_evaluation("coder@1", {"trace_ids": [a.trace_id, bad]}, key="e1")
    common = ["--root", str(root), "--storage", pg_url]
    assert main([*common, "trace", "ls", "--traces-dir", str(folder)]) == 0
    out = capsys.readouterr().out
    assert a.trace_id in out and "DAMAGED" in out and bad in out
    assert main([*common, "trace", "show", a.trace_id, "--traces-dir", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["trace_id"] == a.trace_id
    assert main([*common, "fsck", "--traces-dir", str(folder), "--no-repair"]) == 1
    assert f"problem: trace {postgres.trace_schema(folder)}/{bad}.json is damaged" in capsys.readouterr().out
    assert main([*common, "fsck", "--traces-dir", str(folder)]) == 1  # quarantined now; the decision names it
    out = capsys.readouterr().out
    assert "quarantined: " in out and f"{postgres.trace_schema(folder)}/trace_quarantine/" in out
    assert main([*common, "fsck", "--traces-dir", str(folder)]) == 1
    assert f"names 1 trace(s) not in {postgres.trace_schema(folder)}" in capsys.readouterr().out
    assert main([*common, "fsck", "--traces-dir", str(tmp_path / "typo")]) == 2
    assert "no trace archive ole_traces_" in capsys.readouterr().err
    assert not folder.parent.exists() and not (tmp_path / "typo").exists()  # nothing was written to files


SHARER = """
    import sys, time
    from ole.storage.traces import open_archive
    from tests.ole.synthetic import make_trace
    folder, mine, theirs = sys.argv[1:]
    with open_archive(folder) as archive:  # the database $OLE_STORAGE names
        archive.append(make_trace(mine, [1.0]))
        deadline = time.monotonic() + 60
        while theirs not in archive and time.monotonic() < deadline:
            time.sleep(0.05)
        print(" ".join(archive.ids()), archive.get(theirs).trace_id)
"""


def test_processes_with_folders_of_one_name_share_the_archive(pg_url, tmp_path):  # noqa: F811
    """Two machines' processes, each with its own `<x>/work/traces` folder: each reads the other's trace."""
    env = {**os.environ, "PYTHONPATH": str(PROJECT), STORAGE_ENV: pg_url}
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(SHARER), str(tmp_path / machine / "work" / "traces"),
                               mine, theirs], cwd=PROJECT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
             for machine, mine, theirs in (("a", "t-from-a", "t-from-b"), ("b", "t-from-b", "t-from-a"))]
    outs = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        outs.append(out.split())
    assert outs == [["t-from-a", "t-from-b", "t-from-b"], ["t-from-a", "t-from-b", "t-from-a"]]
    with open_archive(Path("elsewhere") / "work" / "traces", pg_url) as same, \
            open_archive(tmp_path / "a" / "other" / "traces", pg_url) as other:
        assert same.ids() == ["t-from-a", "t-from-b"] and other.ids() == []
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_migrate_copies_an_archive_to_postgresql_and_back_byte_for_byte(root, pg_url, tmp_path, capsys):  # noqa: F811
    a, b = _traces()
    folder = tmp_path / "work" / "traces"
    with open_archive(folder, "sqlite") as files:
        files.append(a)
    compact = json.dumps(b.model_dump(mode="json"))  # written by another OLE: not the text `append` writes now
    (folder / f"{b.trace_id}.json").write_text(compact)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    Registry(root).close()
    assert main(["storage", "migrate", str(root), pg_url, "--traces", str(folder)]) == 0
    assert f"traces of {folder}: 2 copied and compared by sha256" in capsys.readouterr().out
    with open_archive(tmp_path / "machine-b" / "work" / "traces", pg_url) as db:
        assert db.dump() == {p.removesuffix(".json"): data for p, data in before.items()}
        assert db.get(b.trace_id) == b and db.select(env=b.task.env) == [b]
    back_root, back = tmp_path / "back", tmp_path / "machine-c" / "work" / "traces"
    back_root.mkdir()
    assert main(["storage", "migrate", pg_url, str(back_root), "--traces", str(back)]) == 0
    assert {p.name: p.read_bytes() for p in back.iterdir()} == before
    with pytest.raises(StorageError, match="destination trace archive .* is not empty"):
        copy_traces(folder, str(root), pg_url)
    with pytest.raises(StorageError, match="not empty"):
        copy_traces(back, pg_url, str(back_root))


def test_migrate_refuses_a_damaged_source_archive_and_copies_nothing(storage, pg_url, tmp_path):  # noqa: F811
    """Files -> PostgreSQL, and PostgreSQL -> files: the same folder names both sides."""
    a, b = _traces()
    folder = tmp_path / "work" / "traces"
    other = pg_url if storage == "sqlite" else "sqlite"
    with open_archive(folder, storage) as archive:
        archive.append(a)
        _damage(archive, b)
    with pytest.raises(IntegrityError, match="is damaged, nothing was copied") as info:
        copy_traces(folder, storage, other)
    assert "ole fsck --traces-dir" in info.value.hint
    with open_archive(folder, other) as target:
        assert not target.exists() and target.ids() == []


def test_the_factory_follows_the_storage_setting_and_ole_never_imports_psycopg(pg_url, tmp_path,  # noqa: F811
                                                                                 monkeypatch):
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert isinstance(open_archive(tmp_path / "traces"), TraceArchive)
    monkeypatch.setenv(STORAGE_ENV, pg_url)
    monkeypatch.chdir(tmp_path)
    with open_archive("traces") as archive:  # `ole run`'s default folder: named as given, `traces`
        assert isinstance(archive, PgTraceArchive) and archive.schema == "ole_traces_traces"
        assert not archive.exists() and archive.ids() == []  # reading creates nothing
    assert isinstance(open_archive(tmp_path / "traces", "sqlite"), TraceArchive)
    code = ("import sys, ole, ole.trace, ole.storage, ole.storage.traces, ole.registry.fsck, ole.cli; "
            "assert not [m for m in sys.modules if m.startswith('psycopg')]")
    done = subprocess.run([sys.executable, "-c", code], cwd=PROJECT, env={**os.environ, "PYTHONPATH": str(PROJECT)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_driver_archives_its_runs_in_the_database_the_storage_names(pg_url, tmp_path, monkeypatch):  # noqa: F811
    """`PairedEvaluation` (every evolve, gate and stream driver) opens its archive through the factory: with
    `$OLE_STORAGE` its runs land in the database, and a second driver elsewhere keeps each one once."""
    from ole.bundle import Bundle
    from ole.chosen import ChosenVersion
    from ole.executors import LocalExecutor
    from ole.loop_policy import LoopPolicy
    from ole.paired import MemoryStore, PairedEvaluation
    from ole.trace import RunCondition, TaskSpec
    from tests.ole.synthetic import fake_evaluate
    monkeypatch.setenv(STORAGE_ENV, pg_url)

    def driver(machine: str) -> PairedEvaluation:
        return PairedEvaluation(LocalExecutor(1), MemoryStore(), fake_evaluate, runs_root=str(tmp_path / "runs"),
                                traces_root=str(tmp_path / machine / "work" / "traces"))
    first = driver("a")
    instances = [(TaskSpec(env="gym/acrobot", budget=8, pool_seed=p), RunCondition(host="builtin")) for p in (1, 2)]
    first.run([ChosenVersion(ref="coder@1", bundle=Bundle(name="coder", loop_policy=LoopPolicy()))], instances)
    assert isinstance(first.archive, PgTraceArchive) and first.archive.ids() == sorted(first.traces) and \
        len(first.traces) == 2
    second = driver("b")
    for trace in first.traces.values():  # the same runs returned again (a resumed batch on another machine)
        second._keep(trace)
    assert second.archive.ids() == sorted(first.traces)
    assert second.archive.get(sorted(first.traces)[0]) == first.traces[sorted(first.traces)[0]]
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
