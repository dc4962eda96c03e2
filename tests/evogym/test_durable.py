"""The one atomic write (evogym.durable.atomic_write)."""
from __future__ import annotations

import os
import stat

import pytest

from evogym.durable import NotRegularFile, TooLarge, atomic_write, read_regular


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


def test_a_read_takes_only_a_bounded_regular_file(tmp_path):
    """What an agent may leave where a summary belongs: read only when it is a regular file within
    the limit; a FIFO is refused without waiting for a writer, a final link is not followed."""
    path = tmp_path / "summary.json"
    path.write_bytes(b"{}")
    assert read_regular(path, 2) == b"{}"
    with pytest.raises(TooLarge):
        read_regular(path, 1)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile):
        read_regular(fifo, 100)  # returns at once: opened non-blocking, refused by fstat
    link = tmp_path / "link.json"
    link.symlink_to(path)
    with pytest.raises(OSError):
        read_regular(link, 100)
    assert read_regular(link, 100, follow=True) == b"{}"  # the control: the same target through the link
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    with pytest.raises(NotRegularFile):
        read_regular(zero, 100, follow=True)  # followed, /dev/zero is a device: never read
