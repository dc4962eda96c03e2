"""Smoke test of experiments/bench_host_overhead.py at a tiny budget (real hosts, the real
reference beside ours when its source is there)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from test_reference_check import reference_src

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.heavy
@pytest.mark.sandbox
def test_bench_host_overhead_smoke(tmp_path):
    out = tmp_path / "overhead.md"
    args = ["--episodes", "1", "--repeats", "1", "--envs", "gym/acrobot", "--finalize-profile", "quick",
            "--out", str(out)]
    src = reference_src()
    if src is not None:
        args += ["--reference-src", str(src)]
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "bench_host_overhead.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "| gym/acrobot | 1 | 500 |" in text and "Finalize on gym/acrobot" in text
    assert ("reference (serial, every candidate)" in text) == (src is not None)
    out.write_text(text + "\n## Account\nkept\n")  # a rerun keeps the hand-written part
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "bench_host_overhead.py"), *args,
                           "--no-finalize"], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and out.read_text().endswith("## Account\nkept\n")


@pytest.mark.heavy
@pytest.mark.sandbox
def test_bench_submit_latency_smoke(tmp_path):
    out = tmp_path / "latency.md"
    out.write_text("old tables\n## Account\nkept\n")
    args = ["--configs", "gym/acrobot:1", "--repeats", "1", "--agent-repeats", "0", "--out", str(out)]
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "bench_submit_latency.py"), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = out.read_text()
    assert "bench_submit_latency.py --configs gym/acrobot:1" in text and "| gym/acrobot | 1 |" in text
    assert "old tables" not in text and text.endswith("## Account\nkept\n")
