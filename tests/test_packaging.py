"""The package as a user installs it: sdist -> wheel -> a fresh venv outside the checkout -> `ole run`.

Marked `slow` (about a minute: two builds, a venv, one short real task); `.ci/run` runs it
after the default tier. The sdist is built from the checkout with setuptools' own PEP 517
hooks, the wheel from the unpacked sdist (so a file the sdist forgets fails here), and the
wheel is installed with pip into a new venv in a temporary folder. Its third-party
dependencies come from this checkout's venv through a `.pth` line, so no network is needed:
what is under test is our wheel (package data, entry points, the default registry root),
not pip's resolver. The commands run from an empty directory with a fresh $HOME, as a new
user's would.
"""
from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import tarfile
import venv
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

CHECKOUT = Path(__file__).resolve().parents[1]
BUILD_TIMEOUT_S = 300


def _hook(hook: str, source: Path, out: Path) -> Path:
    """Run one setuptools PEP 517 build hook in `source`, in a subprocess; the built file."""
    code = f"from setuptools import build_meta as b; print(b.{hook}({str(out)!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=source, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_S)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "BuildBackendWarning" not in done.stderr and "deprecated" not in done.stderr.lower(), done.stderr[-3000:]
    return out / done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def fresh(tmp_path_factory):
    """(venv bin folder, environment, working directory) of a user who installed the wheel."""
    tmp = tmp_path_factory.mktemp("wheel")
    sdist = _hook("build_sdist", CHECKOUT, tmp / "dist")
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp / "src", filter="data")
    (unpacked,) = (tmp / "src").iterdir()
    wheel = _hook("build_wheel", unpacked, tmp / "dist")
    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    pip = subprocess.run([sys.executable, "-m", "pip", "--python", str(env_dir / "bin" / "python"), "install",
                          "--no-deps", "--no-index", "-q", str(wheel)], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr[-3000:]
    purelib = Path(subprocess.check_output([str(env_dir / "bin" / "python"), "-c",
                                            "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                           text=True).strip())
    (purelib / "_checkout_deps.pth").write_text("".join(p + "\n" for p in site.getsitepackages()))
    home, work = tmp / "home", tmp / "user"
    home.mkdir()
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OLE_", "PYTHON", "XDG_"))}
    env.update(HOME=str(home), PATH=f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return env_dir / "bin", env, work, purelib


def _run(fresh, *argv: str, timeout: float = 600) -> subprocess.CompletedProcess:
    bin_dir, env, work, _ = fresh
    return subprocess.run([str(bin_dir / argv[0]), *argv[1:]], cwd=work, env=env, capture_output=True, text=True,
                          timeout=timeout)


def test_the_wheel_holds_its_data_and_imports_from_the_new_venv(fresh):
    done = _run(fresh, "python", "-c", "import ole, evogym; from importlib import resources; print(ole.__file__); "
                "print(sorted(p.name for p in resources.files('ole').joinpath('seeds').iterdir()))")
    assert done.returncode == 0, done.stderr
    where, seeds = done.stdout.splitlines()
    assert where.startswith(str(fresh[3])) and not where.startswith(str(CHECKOUT))
    assert seeds == "['coder-llm.yaml', 'coder.yaml']"
    version = _run(fresh, "ole", "--version")
    assert version.returncode == 0 and version.stdout.strip() == "ole (openloopevolve) 0.1.0"


def test_a_new_user_runs_ole_from_any_directory(fresh):
    _, env, work, _ = fresh
    listed = _run(fresh, "ole", "bundle", "list")
    assert listed.returncode == 0, listed.stderr
    assert "coder@1" in listed.stdout and "coder-llm@1" in listed.stdout
    user_root = Path(env["HOME"]) / ".local" / "share" / "ole" / "bundles"
    assert sorted(p.name for p in user_root.glob("*.yaml")) == ["coder-llm.yaml", "coder.yaml"]
    assert (user_root / ".registry" / "registry.sqlite3").is_file()
    shown = _run(fresh, "ole", "champion", "show", "--env", "gym/acrobot")
    assert shown.returncode == 0 and "coder@1" in shown.stdout, shown.stderr
    isolation = "bwrap" if shutil.which("bwrap") else "none"
    ran = _run(fresh, "ole", "run", "--env", "gym/acrobot", "--agent", "builtin", "--profile", "quick",
               "--budget", "4", "--isolation", isolation, "--quiet")
    assert ran.returncode == 0, ran.stderr[-3000:]
    traces = list((work / "traces").glob("*.json"))
    assert len(traces) == 1 and f"next: `ole trace show {traces[0].stem}`" in ran.stdout
    assert _run(fresh, "evogym", "envs", "gym/acrobot", "--json").returncode == 0


def test_the_unrelated_evogym_distribution_fails_loudly(fresh):
    meta = fresh[3] / "evogym-2.0.0.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text("Metadata-Version: 2.1\nName: evogym\nVersion: 2.0.0\n")
    try:
        for argv in (("ole", "bundle", "list"), ("evogym", "envs")):
            done = _run(fresh, *argv)
            assert done.returncode == 1, done
            lines = done.stderr.strip().splitlines()
            assert len(lines) == 1 and "Evolution Gym" in lines[0] and "`evogym` 2.0.0" in lines[0], done.stderr
    finally:
        shutil.rmtree(meta)
