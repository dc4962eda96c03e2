"""`ole storage migrate`: SQLite -> PostgreSQL -> SQLite keeps every event, key, index row, blob and
store row, verified by digest and sequence; a damaged source or a non-empty destination is refused."""
from __future__ import annotations

import os

from ole.bundle import bundle_from_data
from ole.cli import main
from ole.evolve.store import EvaluationStore, fingerprint, step
from ole.paired import RunResult
from ole.registry import Registry
from ole.storage.migrate import STORE_FILE
from tests.ole.pg_fixtures import pg_server, pg_url  # noqa: F401 - fixtures
from tests.ole.test_registry import root  # noqa: F401 - the registry suite's fixture


def child(step_size: float):
    return bundle_from_data({"name": "coder", "loop_policy": {"action": {"step_size": step_size}}})


def _history(root) -> None:  # noqa: F811
    with Registry(root) as reg:
        reg.register(child(0.5), parents=[1])
        reg.register(child(0.6), parents=[2])
        reg.record_evaluation("coder@2", {"pairs": 4, "mean_r": 0.1, "nested": {"b": 1, "a": [1.5, None]}}, key="e1")
        reg.record_gate_decision("coder@2", {"verdict": "release", "why": "better"}, key="g1")
        reg.release("coder@2", reason="gate passed", key="r1")
        reg.activate_pending()
        reg.rollback(reason="regressed", key="rb1")
        reg.activate_pending()


def _store(workdir) -> None:
    store = EvaluationStore(workdir / STORE_FILE, fingerprint=fingerprint({"a": 1}))
    result = RunResult(trace_id="t-1", bundle_hash="h", q=0.5, q_source="normalized", status="completed",
                       verified=True, episodes=4, wall_s=1.0)
    store.put("k1", "gym/acrobot|0", "classic", result)
    store.mark(step("gate", "offline", "coder@2"), {"verdict": "release"})
    for t in ("t-1", "t-2", "t-3"):
        store.add_task(t, {"trace": t})
    assert [store.draw("boundary") for _ in range(2)] == [0, 1]
    store.close()


def _events(reg):
    return [(e.seq, e.ts, e.kind, e.ref, e.channel, e.payload) for e in reg.events()]


def test_a_registry_and_its_store_go_to_postgresql_and_back_unchanged(root, pg_url, tmp_path, capsys):  # noqa: F811
    _history(root)
    work = tmp_path / "run1"
    work.mkdir()
    _store(work)
    with Registry(root) as reg:
        before = _events(reg)
    assert main(["storage", "migrate", str(root), pg_url, "--workdir", str(work)]) == 0
    out = capsys.readouterr().out
    assert f"copied {len(before)} events (seq 1–{len(before)}, dense)" in out and "rows copied and compared" in out
    assert main(["--root", str(root), "--storage", pg_url, "fsck"]) == 0  # `ole fsck` on PostgreSQL
    assert "clean: 4 versions" in capsys.readouterr().out and "OLE_STORAGE" not in os.environ  # restored after
    with Registry(root, storage=pg_url) as reg:
        assert _events(reg) == before and reg.fsck().ok
        assert reg.champion().ref == "coder@1" and reg.get("coder@3").bundle == child(0.6).model_copy(
            update={"provenance": reg.get("coder@3").bundle.provenance})
        evaluation = next(e[0] for e in before if e[2] == "evaluation")
        assert reg.record_evaluation("coder@2", {"again": True}, key="e1") == evaluation  # the keys came along
    pg_store = EvaluationStore(work / STORE_FILE, fingerprint=fingerprint({"a": 1}), storage=pg_url)
    assert pg_store.get("k1")[0].q == 0.5
    assert pg_store.step(step("gate", "offline", "coder@2")) == {"verdict": "release"}
    assert [p["trace"] for _, p in pg_store.tasks()] == ["t-1", "t-2", "t-3"]
    assert pg_store.add_task("t-4", {"trace": "t-4"}) == 4 and pg_store.draw("boundary") == 2  # counters go on
    pg_store.close()

    back, work_back = tmp_path / "back", tmp_path / "back-work" / "run1"
    back.mkdir()
    work_back.mkdir(parents=True)
    assert main(["storage", "migrate", pg_url, str(back), "--workdir", str(work_back)]) == 0  # same name: run1
    back_store = EvaluationStore(work_back / STORE_FILE, fingerprint=fingerprint({"a": 1}))
    assert [p["trace"] for _, p in back_store.tasks()] == ["t-1", "t-2", "t-3", "t-4"] and back_store.count() == 1
    assert back_store.draw("boundary") == 3
    back_store.close()
    with Registry(back) as reg:
        assert _events(reg) == before and reg.fsck().ok
    with Registry(root) as a, Registry(back) as b:  # byte for byte: the same rows and blobs
        assert a.journal.dump() == b.journal.dump()
    assert main(["storage", "migrate", pg_url, str(back)]) == 1  # a destination with events is refused
    assert "already holds events" in capsys.readouterr().err


def test_a_damaged_source_is_refused_and_nothing_is_copied(root, pg_url, capsys):  # noqa: F811
    _history(root)
    with Registry(root) as reg:
        blob = reg.blob_path(reg.get("coder@2").blob_hash)
    os.chmod(blob, 0o644)
    blob.write_text(blob.read_text().replace("0.5", "0.7"))
    assert main(["storage", "migrate", str(root), pg_url]) == 1
    assert "is damaged, nothing was copied" in capsys.readouterr().err
    from ole.storage import postgres
    db = postgres.connect(pg_url)
    tables = {r[0] for r in db.execute("SELECT table_name FROM information_schema.tables WHERE table_name = 'events'")}
    assert not tables or db.execute("SELECT COUNT(*) FROM events").fetchone()[0] == 0
    db.close()
