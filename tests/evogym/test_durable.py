"""The one atomic write (evogym.durable.atomic_write)."""
from __future__ import annotations

import os
import stat

import pytest

from evogym.durable import atomic_write


def test_a_write_replaces_the_file_whole_with_the_mode_asked(tmp_path):
    path = tmp_path / "settings.yaml"
    path.write_text("old\n")
    atomic_write(path, "new ü\n", mode=0o644)
    assert path.read_text(encoding="utf-8") == "new ü\n" and stat.S_IMODE(path.stat().st_mode) == 0o644
    atomic_write(path, b"\x00bytes", durable=False)
    assert path.read_bytes() == b"\x00bytes" and stat.S_IMODE(path.stat().st_mode) == 0o600  # a fresh temporary's mode
    assert sorted(os.listdir(tmp_path)) == ["settings.yaml"]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "outcome.json"
    path.write_text("old\n")
    with pytest.raises(TypeError):
        atomic_write(path, 12345)  # type: ignore[arg-type]  # not bytes: the write itself fails
    assert path.read_text() == "old\n" and sorted(os.listdir(tmp_path)) == ["outcome.json"]
