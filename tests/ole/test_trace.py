"""The trace archive: ids name files of the archive only."""
from __future__ import annotations

import pytest


def test_a_trace_id_is_never_a_path(tmp_path):
    """`ole trace show ../secret/leak` read a file outside the archive (and called it damaged)."""
    from ole.errors import NotFound
    from ole.trace import TraceArchive
    archive = tmp_path / "traces"
    archive.mkdir()
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "leak.json").write_text('{"not": "a trace"}')
    for trace_id in ("../secret/leak", "/etc/passwd", ".hidden", ""):
        with pytest.raises(NotFound):
            TraceArchive(archive).get(trace_id)
