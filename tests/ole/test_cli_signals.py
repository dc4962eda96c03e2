"""SIGTERM to `ole` takes the Ctrl-C path: exit 130 and no host or sandbox process left behind."""
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).parents[2]


def _alive(marker: str) -> list[str]:
    return subprocess.run(["pgrep", "-f", marker], capture_output=True, text=True).stdout.split()


@pytest.mark.heavy
def test_sigterm_cleans_up_the_host(tmp_path):
    (tmp_path / "reg").mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", tmp_path / "reg")
    proc = subprocess.Popen([sys.executable, "-m", "ole.cli", "--root", str(tmp_path / "reg"), "run",
                             "--env", "gym/acrobot", "--profile", "bench", "--runs-dir", str(tmp_path / "runs"),
                             "--traces-dir", str(tmp_path / "traces")], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not list((tmp_path / "runs").glob("*/host/workspace/feedback/submit_000")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(str(tmp_path / "runs")), "the host never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted" in err
    deadline = time.monotonic() + 10
    while _alive(str(tmp_path / "runs")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(str(tmp_path / "runs")) == []


@pytest.mark.slow
def test_sigterm_stops_evolution_workers_and_their_hosts(tmp_path):
    (tmp_path / "reg").mkdir()
    shutil.copy(REPO / "bundles" / "coder.yaml", tmp_path / "reg")
    work = tmp_path / "work"
    proc = subprocess.Popen([sys.executable, "-m", "ole.cli", "--root", str(tmp_path / "reg"), "evolve", "--mode",
                             "offline", "--workers", "2", "--workdir", str(work), "--traces", str(tmp_path / "tr")],
                            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 90
    while len(_alive(str(work))) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(str(work)), "no evaluation host started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    deadline = time.monotonic() + 15
    while _alive(str(work)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _alive(str(work)) == []
