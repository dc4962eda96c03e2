"""Where the registry lives without --root (issue 20): the project's `bundles/`, else a per-user
root seeded on first use with the packaged seeds (`ole.roots`)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ole.errors import NotFound
from ole.registry import Registry
from ole.roots import packaged_seeds, project_root, resolve, user_root

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def clean(tmp_path, monkeypatch) -> Path:
    """No $OLE_ROOT, a private XDG data home, and a working directory outside any project."""
    monkeypatch.delenv("OLE_ROOT", raising=False)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    away = tmp_path / "away"
    away.mkdir()
    monkeypatch.chdir(away)
    return tmp_path


def test_the_packaged_seeds_are_the_source_trees_seeds():
    assert [p.name for p in packaged_seeds()] == ["coder-llm.yaml", "coder.yaml"]
    for seed in packaged_seeds():
        assert seed.read_bytes() == (PROJECT / "bundles" / seed.name).read_bytes()


def test_outside_a_project_the_user_root_is_created_and_seeded_once(clean):
    root = resolve()
    assert root == clean / "data" / "ole" / "bundles" == user_root()
    with Registry() as reg:
        assert [e.ref for e in reg.versions("coder")] == ["coder@1"] and "coder-llm" in reg.names()
    (root / "coder-llm.yaml").unlink()  # the user's edits stay: an existing root is never re-seeded
    assert resolve() == root and not (root / "coder-llm.yaml").exists()


def test_a_project_bundles_folder_wins_from_any_subfolder(clean, monkeypatch):
    project = clean / "project"
    (project / "bundles").mkdir(parents=True)
    shutil.copy(PROJECT / "bundles" / "coder.yaml", project / "bundles" / "coder.yaml")
    deep = project / "src" / "deep"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    assert resolve() == project / "bundles" and project_root() == project / "bundles"
    assert not (clean / "data").exists()  # the user root is not touched inside a project


def test_an_empty_bundles_folder_is_not_a_project(clean, monkeypatch):
    (clean / "away" / "bundles").mkdir()
    assert project_root() is None and resolve() == user_root()


def test_a_named_root_is_used_as_given_and_a_missing_one_is_an_error(clean, monkeypatch):
    named = clean / "named"
    named.mkdir()
    assert resolve(named) == named
    monkeypatch.setenv("OLE_ROOT", str(named))
    assert resolve() == named
    with pytest.raises(NotFound, match="from --root"):
        resolve(clean / "missing")
    monkeypatch.setenv("OLE_ROOT", str(clean / "gone"))
    with pytest.raises(NotFound, match="from OLE_ROOT"):
        resolve()
    assert not (clean / "data").exists()  # never a silent fallback to the user root
