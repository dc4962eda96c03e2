"""Sharing a bundle between registries (issue 20): export / import by content hash, hash prefixes.

Everything goes through the real CLI entry point on temporary roots with real SQLite files.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from ole.bundle import load_bundle_yaml
from ole.cli import main
from ole.registry import Registry
from ole.yamlio import load_yaml

PROJECT = Path(__file__).resolve().parents[2]


def ole(root: Path, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def source(tmp_path, capsys) -> Path:
    """A registry with coder@1 (seed), coder@2 (child of 1) and coder@3 (child of 2)."""
    root = tmp_path / "source"
    root.mkdir()
    shutil.copy(PROJECT / "bundles" / "coder.yaml", root / "coder.yaml")
    seed = (root / "coder.yaml").read_text()
    for version, value in ((1, "0.5"), (2, "0.6")):
        child = tmp_path / f"child{version}.yaml"
        child.write_text(seed.replace("step_size: 0.3", f"step_size: {value}"))
        assert ole(root, capsys, "bundle", "register", str(child), "--parent", f"coder@{version}")[0] == 0
    return root


def _empty(tmp_path: Path, name: str) -> Path:
    root = tmp_path / name
    root.mkdir()
    return root


def test_show_prints_yaml_whose_header_is_comments(source, capsys):
    code, out, _ = ole(source, capsys, "bundle", "show", "coder@2")
    assert code == 0 and out.startswith("# coder@2  [registered]")
    assert load_bundle_yaml(out) == Registry(source).get("coder@2").bundle  # the whole output loads as the bundle


def test_export_names_parents_by_hash_and_import_keeps_an_absent_parent_external(source, tmp_path, capsys):
    with Registry(source) as reg:
        c1, c2, c3 = (reg.get(f"coder@{v}") for v in (1, 2, 3))
    exported = tmp_path / "c3.yaml"
    code, out, _ = ole(source, capsys, "bundle", "export", "coder@3", "-o", str(exported))
    assert code == 0 and str(exported) in out
    doc = load_yaml(exported.read_text())
    assert doc["format"] == "ole-bundle-export" and doc["content_hash"] == c3.content_hash
    assert doc["bundle"]["provenance"]["parents"] == [] and doc["bundle"]["provenance"]["external_parents"] == [
        c2.content_hash]
    assert "version" not in json.dumps(doc["bundle"]).replace("schema_version", "")
    other = _empty(tmp_path, "other")
    code, out, _ = ole(other, capsys, "bundle", "import", str(exported), "--json")
    result = json.loads(out)
    assert code == 0 and result["ref"] == "coder@1" and result["external_parents"] == [c2.content_hash]
    with Registry(other) as reg:
        imported = reg.get("coder@1")
        assert imported.content_hash == c3.content_hash and imported.bundle.provenance.edge == "manual"
        assert imported.bundle.provenance.external_parents == (c2.content_hash,)
    code, out, _ = ole(other, capsys, "bundle", "list")
    assert f"ext:{c2.content_hash[:8]}" in out
    # the lineage travels on: exported again from `other`, the external parent is still named
    again = tmp_path / "again.yaml"
    assert ole(other, capsys, "bundle", "export", "coder@1", "-o", str(again))[0] == 0
    assert load_yaml(again.read_text())["bundle"]["provenance"]["external_parents"] == [c2.content_hash]
    # identical content dedupes, and says so
    code, out, _ = ole(other, capsys, "bundle", "import", str(exported))
    assert code == 0 and "already registered as coder@1" in out
    assert c1.content_hash not in out


def test_import_links_a_parent_that_is_present_by_its_hash(source, tmp_path, capsys):
    target = _empty(tmp_path, "target")
    for ref in ("coder@1", "coder@2", "coder@3"):
        path = tmp_path / f"{ref.replace('@', '-')}.yaml"
        assert ole(source, capsys, "bundle", "export", ref, "-o", str(path))[0] == 0
        assert ole(target, capsys, "bundle", "import", str(path))[0] == 0
    with Registry(source) as a, Registry(target) as b:
        for v in (1, 2, 3):
            assert a.get(f"coder@{v}").content_hash == b.get(f"coder@{v}").content_hash
        assert b.get("coder@3").bundle.provenance.parents == (2,)
        assert b.get("coder@3").bundle.provenance.external_parents == ()
        assert [e.payload["parents"] for e in b.events(kind="registration")] == [[], [1], [2]]


def test_a_changed_export_and_a_plain_bundle_are_refused_and_nothing_is_registered(source, tmp_path, capsys):
    exported = tmp_path / "c2.yaml"
    assert ole(source, capsys, "bundle", "export", "coder@2", "-o", str(exported))[0] == 0
    tampered = tmp_path / "tampered.yaml"
    tampered.write_text(exported.read_text().replace("step_size: 0.5", "step_size: 0.7"))
    target = _empty(tmp_path, "target")
    code, _, err = ole(target, capsys, "bundle", "import", str(tampered))
    assert code == 1 and "changed after export" in err and len(err.strip().splitlines()) == 1
    code, _, err = ole(target, capsys, "bundle", "import", str(PROJECT / "bundles" / "coder.yaml"))
    assert code == 2 and "is a bundle file, not an export" in err and "ole bundle register" in err
    code, _, err = ole(target, capsys, "bundle", "import", str(exported), "--expect-hash", "0" * 12)
    assert code == 2 and "does not match the content" in err
    with Registry(target) as reg:
        assert reg.names() == []


def test_expect_hash_takes_the_prefix_bundle_list_prints(source, tmp_path, capsys):
    code, out, _ = ole(source, capsys, "bundle", "list", "--json")
    printed = {b["ref"]: b["content_hash"] for b in json.loads(out)}
    file = tmp_path / "c4.yaml"
    file.write_text((source / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.8"))
    content = load_bundle_yaml(file).content_hash
    for wrong, message in (("abc", "is not a sha256 prefix"), (printed["coder@3"][:12], "does not match the content")):
        code, _, err = ole(source, capsys, "bundle", "register", str(file), "--parent", "3", "--expect-hash", wrong)
        assert code == 2 and message in err, err
        if message.startswith("does not"):
            assert content in err and wrong in err  # both in full: never a message that looks like a match
    code, out, _ = ole(source, capsys, "bundle", "register", str(file), "--parent", "coder@3", "--expect-hash",
                       content[:12].upper())
    assert code == 0 and "registered coder@4" in out


def test_parent_takes_a_number_or_a_ref_and_says_what_is_wrong(source, tmp_path, capsys):
    file = tmp_path / "c.yaml"
    file.write_text((source / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.9"))
    for bad, message in (("coder@x", "--parent 'coder@x' is not a version"),
                         ("other@1", "names bundle `other`, but the file is bundle `coder`")):
        code, _, err = ole(source, capsys, "bundle", "register", str(file), "--parent", bad)
        assert code == 2 and message in err and "invalid" not in err, err
    unknown = _empty(tmp_path, "elsewhere")
    code, _, err = ole(unknown, capsys, "bundle", "register", str(file), "--parent", "1")
    assert code == 2 and "ole bundle export" in err  # the way to move a bundle is named


def test_export_refuses_to_replace_a_link_a_pipe_or_a_device(source, tmp_path, capsys):
    """`-o` is written by renaming a temporary file over it: `-o /dev/full` replaced the device
    node with a regular file (as root) and said it succeeded."""
    import os
    target = tmp_path / "kept.txt"
    target.write_text("not to be replaced")
    link = tmp_path / "link.yaml"
    link.symlink_to(target)
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    for path in (link, fifo, Path("/dev/null")):
        code, _, err = ole(source, capsys, "bundle", "export", "coder@1", "-o", str(path))
        assert code == 2 and "is not a regular file" in err, (path, err)
    assert target.read_text() == "not to be replaced" and link.is_symlink() and fifo.is_fifo()
    assert Path("/dev/null").is_char_device()
    plain = tmp_path / "plain.yaml"
    plain.write_text("old")
    assert ole(source, capsys, "bundle", "export", "coder@1", "-o", str(plain))[0] == 0  # a regular file is replaced
    assert "content_hash" in plain.read_text()
