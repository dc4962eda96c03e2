"""Process pools under a deep TMPDIR (evogym.mpcontext): the forkserver's socket must fit AF_UNIX."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
POOL = """
import sys
from concurrent.futures import ProcessPoolExecutor
import multiprocessing
from evogym.mpcontext import forkserver
ctx = forkserver() if sys.argv[1] == "ours" else multiprocessing.get_context("forkserver")
with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
    print(sum(pool.map(abs, [-1, -2, -3])))
"""


def _pool(tmp_path: Path, which: str) -> subprocess.CompletedProcess:
    deep = tmp_path / ("d" * 60) / ("e" * 40)  # with pytest's own prefix, far past 108 bytes
    deep.mkdir(parents=True)
    return subprocess.run([sys.executable, "-c", POOL, which], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TMPDIR": str(deep), "PYTHONPATH": str(REPO)})


def test_a_pool_starts_under_a_temporary_directory_too_deep_for_a_socket(tmp_path):
    done = _pool(tmp_path, "ours")
    assert done.returncode == 0 and done.stdout.strip() == "6", done.stderr[-2000:]


@pytest.mark.skipif(sys.version_info >= (3, 13), reason="Python 3.13+ falls back to /tmp by itself")
def test_the_plain_forkserver_fails_there_so_the_test_above_means_something(tmp_path):
    done = _pool(tmp_path, "plain")
    assert done.returncode != 0 and "AF_UNIX path too long" in done.stderr
