"""The storage experiments, tiny: many writers with SIGKILLs on both backends (and the checks must pass),
and the latency table's shape."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[2]


@pytest.mark.heavy
def test_eight_writers_with_kills_lose_duplicate_and_reorder_nothing_on_both_backends(tmp_path):
    out = tmp_path / "storage.md"
    done = subprocess.run([sys.executable, "experiments/storage_concurrency.py", "--writers", "8", "--writes", "10",
                           "--kills", "4", "--max-gap", "3", "--every-k", "3", "--out", str(out)], cwd=PROJECT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [line for line in out.read_text().splitlines() if line.startswith(("| sqlite", "| postgresql"))]
    assert len(rows) == 2
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] == "4" and cells[3] == "80" and cells[4:7] == ["0", "0", "0"], row  # 4 kills, 80 acked
        assert cells[7:9] == ["yes", "clean"] and cells[10] == "26 (26)" and cells[11] == "0", row


@pytest.mark.heavy
def test_the_latency_benchmark_writes_its_section_beside_the_others(tmp_path):
    out = tmp_path / "storage.md"
    out.write_text("# Storage\n\n<!-- storage_concurrency -->\nkept\n<!-- /storage_concurrency -->\n")
    done = subprocess.run([sys.executable, "experiments/storage_latency.py", "--versions", "3", "--repeats", "1",
                           "--out", str(out)], cwd=PROJECT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert "kept" in text and text.count("<!-- storage_latency -->") == 1
    assert [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ") and "ms" not in line
            and "---" not in line] == ["ole champion show", "open", "select", "select + activation"]
