"""Registry: registration vs release, statuses, channels, fsck; crash and concurrency with real processes."""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from ole.bundle import bundle_from_data, load_bundle_yaml
from ole.errors import Conflict, IntegrityError, NotFound, StorageError, ValidationError
from ole.registry import CRASH_EXIT, CRASH_POINTS, Registry, default_root

PROJECT = Path(__file__).resolve().parents[2]
SEEDS = sorted((PROJECT / "bundles").glob("*.yaml"))


@pytest.fixture
def root(tmp_path) -> Path:
    target = tmp_path / "bundles"
    target.mkdir()
    for seed in SEEDS:
        shutil.copy(seed, target / seed.name)
    return target


def child(step: float = 0.5, name: str = "coder", **provenance):
    return bundle_from_data({"name": name, "loop_policy": {"action": {"step_size": step}},
                             "provenance": provenance})


def test_seeds_register_once_with_coder_first(root):
    with Registry(root) as reg:
        events = reg.events()
        assert [(e.kind, e.ref) for e in events] == [("registration", "coder@1"), ("registration", "coder-llm@1")]
        assert reg.champion().ref == "coder@1"
        assert reg.get("coder@1").bundle == load_bundle_yaml(root / "coder.yaml").model_copy()
    with Registry(root) as reg:
        assert len(reg.events()) == 2


def test_registration_assigns_versions_and_is_not_release(root):
    with Registry(root) as reg:
        entry = reg.register(child(0.5), parents=[1], note="bigger steps", evidence_ids=["ev-1"])
        assert (entry.ref, entry.status) == ("coder@2", "registered")
        prov = entry.bundle.provenance
        assert (prov.parents, prov.edge, prov.mode, prov.evidence_ids) == ((1,), "manual", "manual", ("ev-1",))
        assert prov.created_at is not None
        assert reg.champion().ref == "coder@1"
        event = reg.events(kind="registration")[-1]
        assert event.payload["note"] == "bigger steps" and event.payload["parents"] == [1]


def test_identical_content_dedupes_and_versions_are_immutable(root):
    with Registry(root) as reg:
        first = reg.register(child(0.5), parents=[1])
        again = reg.register(child(0.5, proposer="someone-else"), parents=[1])
        assert again.ref == first.ref and len(reg.events()) == 3
        assert reg.register(child(0.5, name="other")).ref == "other@1"
        db = sqlite3.connect(root / ".registry" / "registry.sqlite3")
        for sql in ("UPDATE bundles SET content_hash = 'x'", "DELETE FROM events", "UPDATE events SET kind = 'x'"):
            with pytest.raises(sqlite3.DatabaseError, match="append-only|immutable"):
                db.execute(sql)
        db.close()


@pytest.mark.parametrize("kwargs, error, message", [
    ({"parents": [7]}, NotFound, "parent coder@7 is not registered (versions: 1–1)"),
    ({"parents": [1], "expected_hash": "0" * 64}, ValidationError, "does not match the content"),
])
def test_bad_registrations_change_nothing(root, kwargs, error, message):
    with Registry(root) as reg:
        before = reg.events()
        with pytest.raises(error) as info:
            reg.register(child(0.5), **kwargs)
        assert message in info.value.message
        assert reg.events() == before and reg.fsck().ok


def test_provenance_in_the_file_and_arguments_must_agree(root):
    with Registry(root) as reg:
        reg.register(child(0.5), parents=[1])
        stamped = child(0.7, parents=[2], edge="offline_mutation", mode="offline")
        assert reg.register(stamped).bundle.provenance.edge == "offline_mutation"
        assert reg.register(child(0.8, parents=[2], edge="offline_mutation", mode="offline"),
                            parents=[2]).bundle.provenance.edge == "offline_mutation"
        with pytest.raises(Conflict, match="provenance says parents"):
            reg.register(child(0.9, parents=[2], edge="manual"), parents=[1])


def test_lookup_errors_suggest_the_fix(root):
    with Registry(root) as reg:
        reg.register(child(0.5), parents=[1])
        with pytest.raises(NotFound, match=r"no version 9 of bundle `coder`; versions: 1–2"):
            reg.get("coder@9")
        with pytest.raises(NotFound) as info:
            reg.get("codr@1")
        assert "did you mean `coder`" in str(info.value)
        with pytest.raises(ValidationError, match="needs an explicit version"):
            reg.release("coder", reason="x")
        assert reg.get("coder").ref == "coder@2"


def test_status_lifecycle_release_activate_rollback(root):
    with Registry(root) as reg:
        reg.register(child(0.5), parents=[1])
        reg.register(child(0.6), parents=[2])
        reg.record_evaluation("coder@2", {"pairs": 4, "mean_r": 0.1})
        assert reg.get("coder@2").status == "evaluated"
        reg.record_gate_decision("coder@3", {"decision": "reject", "why": "tail risk"})
        assert reg.get("coder@3").status == "rejected"
        with pytest.raises(Conflict, match="rejected by the gate"):
            reg.release("coder@3", reason="try")
        reg.record_gate_decision("coder@2", {"accepted": True})
        assert reg.get("coder@2").status == "gated"  # passed the gate; `evaluated` only says it has an evaluation
        reg.release("coder@2", reason="gate passed")
        assert reg.get("coder@2").status == "released" and reg.champion().ref == "coder@1"
        with pytest.raises(Conflict, match="already the release"):
            reg.release("coder@2", reason="again")
        assert reg.activate_pending().ref == "coder@2"
        assert (reg.get("coder@1").status, reg.get("coder@2").status) == ("retired", "active")
        assert reg.activate_pending().ref == "coder@2" and len(reg.events(kind="activation")) == 1
        assert reg.rollback(reason="regressed").ref == "coder@1"
        assert reg.champion().ref == "coder@2"  # takes effect at the next task boundary
        assert reg.activate_pending().ref == "coder@1"
        assert (reg.get("coder@1").status, reg.get("coder@2").status) == ("active", "rolled_back")
        with pytest.raises(Conflict, match="nothing served channel `default` before coder@1"):
            reg.rollback(reason="again")
        with pytest.raises(Conflict, match="has no parent"):
            reg.rollback(reason="again", to_parent=True)
        reg.release("coder@3", reason="override", force=True)
        assert reg.events()[-1].payload["forced"] is True


def test_channels_inherit_default_until_their_own_release(root):
    with Registry(root) as reg:
        reg.register(child(0.5), parents=[1])
        reg.release("coder@2", channel="box2d", reason="box2d only")
        reg.activate_pending("box2d")
        assert reg.champion("box2d").ref == "coder@2"
        assert reg.champion().ref == "coder@1" and reg.champion("classic_control").ref == "coder@1"
        assert reg.get("coder@1").status == "active"
        reg.release("coder@1", channel="classic_control", reason="pin before default moves")
        assert reg.activate_pending("classic_control").ref == "coder@1"
        reg.release("coder@2", reason="default moves on")
        reg.activate_pending()
        assert reg.champion("classic_control").ref == "coder@1" and reg.champion("minigrid").ref == "coder@2"
        with pytest.raises(ValidationError, match="bad channel"):
            reg.release("coder@2", channel="Bad Channel", reason="x")
        with pytest.raises(ValidationError, match="needs a reason"):
            reg.rollback("box2d", reason=" ")


def test_gate_decision_needs_an_explicit_verdict(root):
    with Registry(root) as reg:
        with pytest.raises(ValidationError, match="accepted: true/false"):
            reg.record_gate_decision("coder@1", {"score": 1})


def test_fsck_quarantines_corrupt_blobs_and_sweeps_orphans(root):
    with Registry(root) as reg:
        entry = reg.register(child(0.5), parents=[1])
        blob = reg.blob_path(entry.blob_hash)
        os.chmod(blob, 0o644)
        blob.write_text(blob.read_text().replace("0.5", "0.9"))
        (blob.parent / ".tmp-deadbeef-x").write_text("partial")
        (reg.blobs / "ff").mkdir(exist_ok=True)  # a real blob's hash may start with ff too (1 in 256)
        (reg.blobs / "ff" / ("f" * 64 + ".yaml")).write_text("orphan")
        with pytest.raises(IntegrityError, match="fails its hash check"):
            reg.get("coder@2")
        report = reg.fsck()
        assert not report.ok and "coder@2: blob" in report.problems[0]
        assert len(report.quarantined) == 1 and len(report.swept) == 2
        with pytest.raises(IntegrityError, match="missing"):
            reg.get("coder@2")
        assert not (blob.parent / ".tmp-deadbeef-x").exists()


def test_root_resolution(tmp_path, monkeypatch, root):
    monkeypatch.setenv("OLE_ROOT", str(root))
    assert default_root() == root
    assert default_root(tmp_path) == tmp_path
    with pytest.raises(NotFound, match="from --root"):
        default_root(tmp_path / "missing")
    monkeypatch.setenv("OLE_ROOT", str(tmp_path / "gone"))
    with pytest.raises(NotFound, match="from OLE_ROOT"):
        default_root()


def test_a_misnamed_seed_is_skipped_and_reported(root):
    (root / "other.yaml").write_text((root / "coder.yaml").read_text())
    with Registry(root) as reg:
        assert reg.names() == ["coder", "coder-llm"]
        assert len(reg.warnings) == 1 and "other.yaml skipped: it declares name `coder`" in reg.warnings[0]
        report = reg.fsck()
    assert not report.ok and any("other.yaml" in p for p in report.problems)


# ----- real processes: crash points, full disk, concurrency ---------------------------------

def _python(code: str, *args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "PYTHONPATH": str(PROJECT), **(env or {})}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], env=full_env, capture_output=True,
                          text=True, timeout=120, **kw)


OPERATIONS = {
    "register": "reg.register(bundle_from_data({'name': 'coder', 'loop_policy': {'action': {'step_size': 0.9}}}),"
                " parents=[2])",
    "evaluation": "reg.record_evaluation('coder@2', {'mean_r': 0.2})",
    "gate_decision": "reg.record_gate_decision('coder@2', {'accepted': True})",
    "release": "reg.release('coder@2', reason='crash test')",
    "rollback": "reg.rollback(reason='crash test')",
    "activation": "reg.activate_pending()",
}


def _operation_for(step: str) -> str:
    return "register" if step.startswith(("blob", "register")) else step.rsplit("_before_commit", 1)[0]


def _prepare(root: Path, op: str) -> None:
    with Registry(root) as reg:
        reg.register(child(0.5), parents=[1])
        if op in ("rollback", "activation"):
            reg.release("coder@2", reason="setup")
        if op == "rollback":
            reg.activate_pending()


@pytest.mark.heavy
@pytest.mark.parametrize("step", CRASH_POINTS)
def test_kill_at_each_write_step_leaves_a_consistent_registry(root, step):
    op = _operation_for(step)
    _prepare(root, op)
    with Registry(root) as reg:
        before = reg.events()
    code = f"""
        import sys
        from ole.bundle import bundle_from_data
        from ole.registry import Registry
        reg = Registry(sys.argv[1])
        {OPERATIONS[op]}
        print("survived")
    """
    result = _python(code, str(root), env={"OLE_TEST_MODE": "1", "OLE_CRASH_AT": step})
    assert result.returncode == CRASH_EXIT, result.stderr
    with Registry(root) as reg:
        after = reg.events()
        committed = step.endswith("after_commit")
        assert after[:len(before)] == before and len(after) == len(before) + committed
        report = reg.fsck()
        assert report.ok, report.problems
        assert reg.fsck().swept == ()
        for name in reg.names():
            for entry in reg.versions(name):
                assert entry.bundle.content_hash == entry.content_hash
        assert reg.champion().ref in ("coder@1", "coder@2")
    rerun = _python(code, str(root))
    assert rerun.returncode == 0 and "survived" in rerun.stdout, rerun.stderr


def test_crash_points_are_ignored_outside_test_mode(root):
    result = _python("import sys; from ole.registry import Registry; Registry(sys.argv[1])", str(root),
                     env={"OLE_CRASH_AT": "register_before_commit", "OLE_TEST_MODE": "0"})
    assert result.returncode == 0, result.stderr


def test_file_size_limit_during_register_is_a_clean_error(root):
    Registry(root).close()
    code = """
        import resource, signal, sys
        from ole.bundle import bundle_from_data
        from ole.errors import StorageError
        from ole.registry import Registry
        reg = Registry(sys.argv[1])
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (512, 512))
        try:
            reg.register(bundle_from_data({'name': 'coder', 'loop_policy': {'action': {'step_size': 0.9}}}),
                         parents=[1])
        except StorageError as exc:
            print("StorageError", exc)
    """
    result = _python(code, str(root))
    assert result.returncode == 0 and result.stdout.startswith("StorageError"), result.stdout + result.stderr
    with Registry(root) as reg:
        assert [e.ref for e in reg.events()] == ["coder@1", "coder-llm@1"]
        report = reg.fsck()
        assert report.ok, report.problems


WORKER = """
    import sys
    from ole.bundle import bundle_from_data
    from ole.registry import Registry
    root, wid, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    reg = Registry(root)
    for i in range(n):
        step = round(0.01 + wid * 0.05 + i * 0.001, 6)
        entry = reg.register(bundle_from_data({'name': 'coder', 'loop_policy': {'action': {'step_size': step}}}),
                             parents=[1])
        print("ack", reg.events(kind="registration", name="coder", version=entry.version)[0].seq, flush=True)
        print("ack", reg.record_evaluation(entry.ref, {"worker": wid, "i": i}), flush=True)
"""


@pytest.mark.heavy
def test_eight_concurrent_writers_lose_nothing(root):
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(WORKER), str(root), str(w), "4"],
                              env={**os.environ, "PYTHONPATH": str(PROJECT)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in range(8)]
    acked = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        acked += [int(line.split()[1]) for line in out.splitlines()]
    with Registry(root) as reg:
        events = reg.events()
        assert len(events) == 2 + len(acked) == 2 + 64
        assert sorted(acked) == [e.seq for e in events[2:]]
        assert [e.version for e in reg.versions("coder")] == list(range(1, 34))
        assert reg._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert reg.fsck().ok


@pytest.mark.heavy
def test_concurrent_first_use_registers_each_seed_once(tmp_path):
    root = tmp_path / "fresh"
    root.mkdir()
    for seed in SEEDS:
        shutil.copy(seed, root / seed.name)
    code = "import sys; from ole.registry import Registry; print(Registry(sys.argv[1]).champion().ref)"
    procs = [subprocess.Popen([sys.executable, "-c", code, str(root)], env={**os.environ, "PYTHONPATH": str(PROJECT)},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(8)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    assert {o[0].strip() for o in outs} == {"coder@1"}
    with Registry(root) as reg:
        assert [e.ref for e in reg.events()] == ["coder@1", "coder-llm@1"]


@pytest.mark.slow  # ~10 s on 2 cores: 8 interpreters start at once
def test_writers_killed_mid_run_leave_no_partial_records(root):
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(WORKER), str(root), str(w), "10"],
                              env={**os.environ, "PYTHONPATH": str(PROJECT)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in range(8)]
    acked: list[int] = []
    started = threading.Barrier(4)

    def collect(proc, kill: bool) -> None:
        for n, line in enumerate(proc.stdout):
            acked.append(int(line.split()[1]))
            if kill and n == 3:
                started.wait(timeout=120)
                proc.kill()
        proc.wait()

    threads = [threading.Thread(target=collect, args=(p, i < 3)) for i, p in enumerate(procs)]
    for t in threads:
        t.start()
    started.wait(timeout=120)
    for t in threads:
        t.join(timeout=180)
    assert sum(p.returncode == 0 for p in procs) == 5
    with Registry(root) as reg:
        seqs = {e.seq for e in reg.events()}
        assert set(acked) <= seqs and len(seqs) - 2 - len(set(acked)) <= 3
        assert reg._db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        report = reg.fsck()
        assert report.ok, report.problems
        for entry in reg.versions("coder"):
            assert entry.bundle.content_hash == entry.content_hash


RELEASER = """
    import sys
    from ole.errors import Conflict
    from ole.registry import Registry
    reg = Registry(sys.argv[1])
    for _ in range(4):
        try:
            print("released", reg.release(sys.argv[2], reason="race").ref, flush=True)
        except Conflict as exc:
            print("conflict", exc, flush=True)
        print("active", reg.activate_pending().ref, flush=True)
"""


def test_concurrent_releases_on_one_channel_serialize(root):
    with Registry(root) as reg:
        reg.register(child(0.5), parents=[1])
        reg.register(child(0.6), parents=[1])
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(RELEASER), str(root), ref],
                              env={**os.environ, "PYTHONPATH": str(PROJECT)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for ref in ("coder@2", "coder@3")]
    released = 0
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        released += out.count("released ")
    with Registry(root) as reg:
        moves = reg.events(channel="default")
        assert [e.seq for e in moves] == sorted({e.seq for e in moves})
        assert sum(e.kind == "release" for e in moves) == released >= 2
        target = None
        for event in moves:  # every activation applies the release recorded just before it
            if event.kind == "release":
                assert event.ref != target
                target = event.ref
            else:
                assert event.ref == target
        assert reg.champion().ref == target
        assert reg.fsck().ok


# ----- property-based: the registry against an in-memory model ---------------------------

from hypothesis import settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule  # noqa: E402


class RegistryMachine(RuleBasedStateMachine):
    """register / evaluate / release / rollback / activate vs. a dict model of the default channel."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile
        self.tmp = tempfile.TemporaryDirectory()
        root = Path(self.tmp.name)
        shutil.copy(PROJECT / "bundles" / "coder.yaml", root / "coder.yaml")
        self.reg = Registry(root)
        self.parents = {1: []}
        self.steps = {1: 0.3}
        self.active, self.target = 1, None
        self.kind: str | None = None  # what the pending target came from: a release or a rollback
        self.served = [1]  # what served the channel, oldest first (the rollback stack)
        self.pointed = False  # the seed serves without a pointer until the first activation

    def teardown(self) -> None:
        self.reg.close()
        self.tmp.cleanup()

    @rule(step=st.integers(1, 40), data=st.data())
    def register(self, step, data):
        parent = data.draw(st.sampled_from(sorted(self.parents)))
        value = step / 10
        entry = self.reg.register(child(value), parents=[parent])
        if value in self.steps.values():
            assert self.steps[entry.version] == value
        else:
            assert entry.version == max(self.parents) + 1
            self.parents[entry.version], self.steps[entry.version] = [parent], value

    @rule(data=st.data())
    def release(self, data):
        version = data.draw(st.sampled_from(sorted(self.parents)))
        pinned = self.target or self.active
        if version == pinned:
            with pytest.raises(Conflict):
                self.reg.release(f"coder@{version}", reason="model")
        else:
            self.reg.release(f"coder@{version}", reason="model")
            self.target, self.kind = version, "release"

    def _pending(self) -> bool:
        return self.target is not None and (self.target != self.active or not self.pointed)

    @rule()
    def rollback(self):
        """Back to what served before the current champion's release (never its lineage parent); a
        pending release is cancelled instead."""
        if self.kind == "release" and self._pending():
            assert self.reg.rollback(reason="model").version == self.active
            self.target, self.kind = self.active, "rollback"
            return
        served = list(self.served)
        while served and served[-1] == self.active:
            served.pop()
        if not served:
            with pytest.raises(Conflict):
                self.reg.rollback(reason="model")
            return
        assert self.reg.rollback(reason="model").version == served[-1]
        self.target, self.kind = served[-1], "rollback"

    @rule()
    def activate(self):
        if self.target is not None:
            if self.kind == "rollback" and self.target in self.served:
                del self.served[self.served.index(self.target) + 1:]
            elif self.served[-1] != self.target:
                self.served.append(self.target)
            self.active, self.pointed = self.target, True
        self.target = self.kind = None
        assert self.reg.activate_pending().version == self.active

    @invariant()
    def matches_the_model(self):
        assert self.reg.champion().version == self.active
        events = self.reg.events()
        assert [e.seq for e in events] == sorted({e.seq for e in events})
        versions = self.reg.versions("coder")
        assert [v.version for v in versions] == sorted(self.parents)
        assert all(v.bundle.provenance.parents == tuple(self.parents[v.version]) for v in versions)


RegistryMachine.TestCase.settings = settings(max_examples=8, stateful_step_count=10, deadline=None)
test_registry_state_machine = RegistryMachine.TestCase
test_registry_state_machine.pytestmark = [pytest.mark.heavy]  # hypothesis runs many sequences: seconds


def test_a_database_from_another_schema_version_is_refused(root):
    Registry(root).close()
    db = sqlite3.connect(root / ".registry" / "registry.sqlite3")
    db.execute("PRAGMA user_version = 99")
    db.commit()
    db.close()
    with pytest.raises(StorageError, match="schema version 99"):
        Registry(root)


def test_a_bundle_built_with_model_copy_is_validated_before_it_is_stored(tmp_path):
    """model_copy skips validation; the registry must refuse the bad value instead of storing it."""
    import shutil

    from ole.errors import ValidationError
    root = tmp_path / "r"
    root.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "bundles" / "coder.yaml", root / "coder.yaml")
    with Registry(root) as reg:
        seed = reg.get("coder@1").bundle
        bad = seed.model_copy(update={"loop_policy": seed.loop_policy.model_copy(update={
            "action": seed.loop_policy.action.model_copy(update={"episodes_per_submit": 0})})})
        n = len(reg.events())
        with pytest.raises(ValidationError, match="episodes_per_submit"):
            reg.register(bad, parents=[1])
        assert len(reg.events()) == n and reg.fsck().ok
