"""The registry root tolerates odd files; a damaged blob degrades only its version (issue 13).

Each case goes through the real CLI entry point on a temporary root with a real SQLite
file: one bad `*.yaml` must not stop any command (fsck included), an edited seed must
be reported, a corrupt blob must leave every other version usable, and the documented
recovery (`ole fsck --restore FILE`) must bring the version back.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from ole.cli import main
from ole.registry import Registry

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(tmp_path) -> Path:
    target = tmp_path / "bundles"
    target.mkdir()
    for seed in (PROJECT / "bundles").glob("*.yaml"):
        shutil.copy(seed, target / seed.name)
    return target


def ole(root: Path, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


ODD_FILES = {
    "syntax.yaml": "name: [broken\n",
    "misnamed.yaml": None,  # a valid bundle whose name is not the file's
    "unknown_field.yaml": "name: unknown_field\nloop_policy: {}\nsurprise: 1\n",
    "parents.yaml": "name: parents\nloop_policy: {}\nprovenance: {parents: [1], edge: manual}\n",
    "empty.yaml": "",
    "binary.yaml": b"\xff\xfe\x00garbage",
    "folder.yaml": "DIR",
}


@pytest.mark.parametrize("filename", sorted(ODD_FILES))
def test_one_odd_yaml_in_the_root_is_reported_and_skipped(root, capsys, filename):
    content = ODD_FILES[filename]
    path = root / filename
    if content is None:
        path.write_text((root / "coder.yaml").read_text())
    elif content == "DIR":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    code, out, err = ole(root, capsys, "bundle", "list", "--json")
    assert code == 0
    assert [b["ref"] for b in json.loads(out)] == ["coder@1", "coder-llm@1"]
    warnings = [line for line in err.splitlines() if line.startswith("ole: warning:")]
    assert len(warnings) == 1 and filename in warnings[0] and "skipped" in warnings[0]
    assert ole(root, capsys, "champion", "show")[0] == 0
    code, out, err = ole(root, capsys, "fsck")
    assert code == 1 and f"problem: seed {filename} skipped" in out and err == ""
    path.rmdir() if path.is_dir() else path.unlink()
    code, out, _ = ole(root, capsys, "fsck")
    assert code == 0 and out.startswith("clean")


def test_an_edited_seed_is_reported_until_registered_as_a_new_version(root, capsys):
    assert ole(root, capsys, "bundle", "list")[0] == 0
    seed = root / "coder.yaml"
    seed.write_text(seed.read_text().replace("step_size: 0.3", "step_size: 0.4"))
    code, _, err = ole(root, capsys, "champion", "show")
    assert code == 0 and "coder.yaml was edited after `coder` was registered" in err
    code, out, _ = ole(root, capsys, "fsck", "--no-repair")
    assert code == 1 and "coder.yaml was edited" in out
    code, out, _ = ole(root, capsys, "bundle", "register", str(seed), "--parent", "1", "--json")
    assert code == 0 and json.loads(out)["ref"] == "coder@2"
    code, out, err = ole(root, capsys, "fsck")
    assert code == 0 and out.startswith("clean") and "warning" not in err


def _damage(root: Path, ref: str) -> bytes:
    """Corrupt the blob of `ref`; returns its original bytes (the backup)."""
    with Registry(root) as reg:
        blob = reg.blob_path(reg.get(ref).blob_hash)
    original = blob.read_bytes()
    os.chmod(blob, 0o644)
    blob.write_bytes(original + b"# flipped\n")
    return original


def test_a_corrupt_blob_degrades_only_its_version_and_restore_brings_it_back(root, tmp_path, capsys):
    child = tmp_path / "child.yaml"
    child.write_text((root / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.5"))
    assert ole(root, capsys, "bundle", "register", str(child), "--parent", "1")[0] == 0
    backup = tmp_path / "backup.yaml"
    backup.write_bytes(_damage(root, "coder@2"))
    code, out, _ = ole(root, capsys, "fsck")
    assert code == 1 and "coder@2: blob" in out and "quarantined" in out and "--restore" in out
    # everything but coder@2 keeps working after the quarantine
    code, out, _ = ole(root, capsys, "bundle", "list", "--json")
    assert code == 0
    listed = {b["ref"]: b["status"] for b in json.loads(out)}
    assert listed == {"coder@1": "active", "coder-llm@1": "registered", "coder@2": "damaged"}
    for args in (["champion", "show"], ["lineage", "show"], ["events"], ["bundle", "show", "coder@1"],
                 ["champion", "history"]):
        assert ole(root, capsys, *args)[0] == 0, args
    code, _, err = ole(root, capsys, "bundle", "show", "coder@2")
    assert code == 1 and "blob of coder@2 is missing" in err and "--restore" in err
    code, _, err = ole(root, capsys, "release", "coder@2", "--reason", "x")
    assert code == 1 and "missing" in err
    with Registry(root) as reg:
        assert not [e for e in reg.events() if e.kind == "release"]  # refused before anything was recorded
    code, out, _ = ole(root, capsys, "fsck")
    assert code == 1 and "coder@2: blob" in out and "is missing" in out
    # the documented recovery: a byte-exact copy goes back, the version is whole again
    code, out, _ = ole(root, capsys, "fsck", "--restore", str(backup))
    assert code == 0 and "restored: coder@2" in out and "clean" in out
    assert ole(root, capsys, "bundle", "show", "coder@2")[0] == 0


def test_restore_refuses_bytes_that_are_no_stored_blob(root, tmp_path, capsys):
    other = tmp_path / "other.yaml"
    other.write_text((root / "coder.yaml").read_text())
    code, _, err = ole(root, capsys, "fsck", "--restore", str(other))
    assert code == 2 and "not the stored YAML of any registered version" in err
    # no unbounded read (/dev/zero ate memory), no internal error for a folder or a missing path
    big = tmp_path / "big.yaml"
    big.write_bytes(b"x" * (300 * 1024))
    for path, why in (("/dev/zero", "not a regular file"), (str(tmp_path), "not a regular file"),
                      (str(tmp_path / "nope.yaml"), "missing"), (str(big), "no stored blob is that large")):
        code, _, err = ole(root, capsys, "fsck", "--restore", path)
        assert code == 2 and why in err and "internal error" not in err, (path, err)


def test_a_damaged_champion_can_still_be_rolled_back_to_its_parent(root, tmp_path, capsys):
    child = tmp_path / "child.yaml"
    child.write_text((root / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.5"))
    for args in (["bundle", "register", str(child), "--parent", "1"], ["release", "coder@2", "--reason", "r"],
                 ["champion", "activate"]):
        assert ole(root, capsys, *args)[0] == 0
    _damage(root, "coder@2")
    assert ole(root, capsys, "fsck")[0] == 1
    code, out, _ = ole(root, capsys, "rollback", "--reason", "its blob is damaged")
    assert code == 0 and "to coder@1" in out
    code, out, _ = ole(root, capsys, "champion", "activate")
    assert code == 0 and "coder@2 -> coder@1" in out


def test_register_checks_expect_hash_and_parent_even_when_the_content_is_known(root, tmp_path, capsys):
    seed = root / "coder.yaml"
    code, _, err = ole(root, capsys, "bundle", "register", str(seed), "--expect-hash", "0" * 64)
    assert code == 2 and f"--expect-hash {'0' * 64} does not match the content, which hashes to " in err
    child = tmp_path / "child.yaml"
    child.write_text(seed.read_text().replace("step_size: 0.3", "step_size: 0.5"))
    assert ole(root, capsys, "bundle", "register", str(child), "--parent", "1")[0] == 0
    for args, message in ((["--parent", "2"], "with parents [1], not --parent [2]"),
                          (["--parent", "1", "--edge", "online"], "with edge 'manual', not --edge online")):
        code, _, err = ole(root, capsys, "bundle", "register", str(child), *args)
        assert code == 2 and message in err, err
    with Registry(root) as reg:
        content = reg.get("coder@2").content_hash
        assert [e.kind for e in reg.events()] == ["registration"] * 3
    code, out, _ = ole(root, capsys, "bundle", "register", str(child), "--parent", "1", "--expect-hash", content,
                       "--json")
    assert code == 0 and json.loads(out)["deduplicated"] is True


def test_validate_lists_every_error_in_text_and_json(root, tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: coder\nloop_policy:\n  action:\n    step_size: -1\n    bogus: 1\n"
                   "  memory:\n    top_k_programs: x\n")
    code, out, _ = ole(root, capsys, "bundle", "validate", str(bad))
    assert code == 2 and "3 errors" in out
    for message in ("action.step_size: Input should be greater than 0", "action.bogus: unknown field",
                    "memory.top_k_programs: Input should be a valid integer"):
        assert message in out
    code, out, _ = ole(root, capsys, "bundle", "validate", str(bad), "--json")
    assert code == 2 and len(json.loads(out)[0]["errors"]) == 3


@pytest.mark.parametrize("how", ["emptied", "deleted"])
def test_a_lost_index_beside_stored_blobs_is_refused_not_rebuilt(root, capsys, how):
    """An emptied or deleted registry.sqlite3 was opened as a new registry (the seeds registered
    again as a fresh history) and `fsck` then swept every blob of the old history."""
    assert ole(root, capsys, "bundle", "list")[0] == 0
    db = root / ".registry" / "registry.sqlite3"
    blobs = sorted(p.name for p in (root / ".registry" / "blobs").rglob("*") if p.is_file())
    assert blobs and db.is_file()
    for extra in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        extra.unlink(missing_ok=True)
    if how == "emptied":
        db.write_bytes(b"")
    else:
        db.unlink()
    for args in (["bundle", "list"], ["fsck"], ["champion", "show"]):
        code, out, err = ole(root, capsys, *args)
        assert code == 1 and "the index was lost" in err and "Traceback" not in err, (args, out, err)
    assert sorted(p.name for p in (root / ".registry" / "blobs").rglob("*") if p.is_file()) == blobs
    assert (db.stat().st_size == 0) if how == "emptied" else not db.exists()  # nothing was written


def test_a_bundle_whose_stored_form_would_not_read_back_is_refused_before_commit(root, capsys):
    """19,000 evidence ids fit a flow-style file under the 256 KiB cap but dump larger in block
    style: the registration was committed, then every read of that blob failed (`bundle list`
    exit 2 for the whole registry)."""
    from ole.errors import ValidationError
    with Registry(root) as reg:
        champ = reg.get("coder@1")
        ids = [f"ev{i:08d}" for i in range(19000)]
        with pytest.raises(ValidationError, match="cannot be stored, nothing was registered"):
            reg.register(champ.bundle.model_copy(update={"description": "bigger"}), parents=[1], evidence_ids=ids)
        assert [v.version for v in reg.versions("coder")] == [1]
    assert ole(root, capsys, "bundle", "list")[0] == 0
    assert ole(root, capsys, "fsck", "--no-repair")[0] == 0


def test_a_pipe_or_a_folder_where_a_file_should_be_never_hangs_and_degrades_only_itself(root, tmp_path, capsys):
    """A FIFO named *.yaml in the root made every command hang (the seed scan read it); a folder or
    a pipe in place of a blob hung `bundle list` or was an internal error."""
    child = tmp_path / "child.yaml"
    child.write_text((root / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.5"))
    assert ole(root, capsys, "bundle", "register", str(child), "--parent", "1")[0] == 0
    os.mkfifo(root / "pipe.yaml")
    code, out, err = ole(root, capsys, "bundle", "list", "--json")
    assert code == 0 and "pipe.yaml" in err, err  # listed as skipped, not read
    with Registry(root) as reg:
        blob = reg.blob_path(reg.get("coder@2").blob_hash)
    blob.unlink()
    os.mkfifo(blob)
    code, out, _ = ole(root, capsys, "bundle", "list", "--json")
    assert code == 0 and {b["ref"]: b["status"] for b in json.loads(out)}["coder@2"] == "damaged"
    code, _, err = ole(root, capsys, "bundle", "show", "coder@2")
    assert code == 1 and "not a regular file" in err
    blob.unlink()
    blob.mkdir()
    code, out, _ = ole(root, capsys, "bundle", "list", "--json")
    assert code == 0 and {b["ref"]: b["status"] for b in json.loads(out)}["coder@2"] == "damaged"


def test_a_registry_locked_by_another_writer_is_busy_not_read_only(root, capsys, monkeypatch):
    """A writer holding the lock past the busy timeout made `ole release` say the registry was
    read-only and suggest a writable copy."""
    import sqlite3

    from ole import sqlite_open
    assert ole(root, capsys, "bundle", "list")[0] == 0
    real = sqlite_open.connect
    monkeypatch.setattr(sqlite_open, "connect", lambda path, schema=None, **kw: real(path, schema, timeout_s=0.5))
    holder = sqlite3.connect(root / ".registry" / "registry.sqlite3", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        code, _, err = ole(root, capsys, "release", "coder@1", "--reason", "x")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert code == 1 and "is busy" in err and "read-only" not in err, err
    assert ole(root, capsys, "bundle", "list")[0] == 0  # free again
