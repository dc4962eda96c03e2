"""What isolation this machine offers, and the filesystem view the policy worker gets.

The policy sees the Python stdlib plus exactly `POLICY_PACKAGES` (bound into a private
site dir), nothing else of the host: no venv (so no gymnasium/mujoco/box2d/minigrid/
highway_env/evogym/ole/litellm -- that enforces "no local rollouts"), no base or system
site-packages (masked by read-only empty tmpfs mounts), no `/etc`, no home, no run dir.
"""
from __future__ import annotations

import functools
import glob
import importlib.util
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from evogym.sandbox.cgroup import cgroup_support

Isolation = Literal["bwrap", "none"]
"""A sandbox mode: bubblewrap, or a plain subprocess (a host's policies, and a command agent)."""
ISOLATIONS: tuple[Isolation, ...] = get_args(Isolation)
"""The sandbox modes a host can run policies under: bubblewrap, or a plain subprocess."""

DEFAULT_ISOLATION: Isolation = "bwrap"
"""The mode every entry point uses unless told otherwise."""

POLICY_PACKAGES = ("numpy", "numpy.libs", "scipy", "scipy.libs")
"""Directories of the venv's site-packages a policy may import (plus the stdlib)."""

SANDBOX_ROOT = "/opt/evogym"
"""Where the worker, its site dir and pyseccomp appear inside the sandbox."""

WORKER_FILES = ("worker.py", "channel.py")
"""The worker script first, then the stdlib-only module it imports from beside itself: the
files of `evogym/sandbox/` bound into the sandbox (at `SANDBOX_ROOT`), and nothing else of evogym."""

POLICY_MOUNT = "/policy"
"""Where the snapshot appears inside the sandbox (its cwd and `sys.path[0]`)."""

SYSTEM_SITE_GLOBS = ("/usr/lib/python3*/dist-packages", "/usr/lib/python3*/site-packages",
                     "/usr/local/lib/python3*/dist-packages", "/usr/local/lib/python3*/site-packages")
"""Package dirs under the bound `/usr` that are hidden from the policy."""

ROOT_LINKS = ("bin", "sbin", "lib", "lib64", "lib32", "libx32")
"""Top-level paths that are merged-/usr symlinks on Debian 12 (recreated) or real dirs (bound)."""

PROBE_TIMEOUT_S = 20.0


@dataclass(frozen=True)
class WorkerLayout:
    """Paths as the worker sees them, and the host paths behind them."""

    python: str
    """Interpreter to run (the base interpreter, never the venv's)."""
    worker: str
    """Path of the worker script (`evogym/sandbox/worker.py`)."""
    policy_dir: str
    """The snapshot (`/policy` under bwrap)."""
    site_dir: str
    """Private site dir holding exactly POLICY_PACKAGES."""
    seccomp_lib: str | None
    """Dir holding pyseccomp.py, or None when the host has none."""
    binds: tuple[tuple[str, str], ...] = ()
    """Read-only binds host path -> sandbox path (bwrap only)."""
    scratch: str | None = None
    """Host temp dir to delete on close (isolation="none": the symlinked site dir)."""


def _origin(module: str) -> Path | None:
    spec = importlib.util.find_spec(module)
    return Path(spec.origin).resolve() if spec and spec.origin else None


def _package_dirs() -> dict[str, Path]:
    numpy_init = _origin("numpy")
    if numpy_init is None:
        return {}
    site = numpy_init.parent.parent
    return {name: site / name for name in POLICY_PACKAGES if (site / name).is_dir()}


def _base_python() -> str:
    exe = Path(sys.base_prefix, "bin", f"python{sys.version_info[0]}.{sys.version_info[1]}")
    return str(exe) if exe.exists() else os.path.realpath(sys.executable)


def _masked_dirs() -> list[str]:
    base = {"base": sys.base_prefix, "platbase": sys.base_exec_prefix}
    dirs = {sysconfig.get_paths(vars=base)[key] for key in ("purelib", "platlib")}
    for pattern in SYSTEM_SITE_GLOBS:
        dirs.update(glob.glob(pattern))
    return sorted(d for d in dirs if os.path.isdir(d))


def _root_entries() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for name in ROOT_LINKS:
        path = Path("/", name)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for prefix in sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)}):
        if not prefix.startswith("/usr/"):
            args += ["--ro-bind", prefix, prefix]
    return args


def _userns_works(bwrap: str) -> bool:
    argv = [bwrap, "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", *_root_entries(),
            "--proc", "/proc", "--dev", "/dev", "--", "/usr/bin/true"]
    try:
        return subprocess.run(argv, env={}, capture_output=True, timeout=PROBE_TIMEOUT_S).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@functools.lru_cache(maxsize=1)
def _probe() -> tuple[tuple[str, object], ...]:
    bwrap = shutil.which("bwrap") or shutil.which("bwrap", path="/usr/bin:/usr/local/bin:/bin")
    seccomp_py = _origin("pyseccomp")
    libseccomp = any(glob.glob(d + "/libseccomp.so.2") for d in
                     ("/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib64", "/usr/lib", "/lib"))
    cg = cgroup_support()
    return (("bwrap", bwrap), ("userns", bwrap is not None and _userns_works(bwrap)),
            ("seccomp", bool(seccomp_py and libseccomp and os.path.exists("/proc/sys/kernel/seccomp"))),
            ("seccomp_module", str(seccomp_py) if seccomp_py else None),
            ("cgroup_memory", cg["memory"]), ("cgroup_pids", cg["pids"]),
            ("python", _base_python()),
            ("policy_packages", tuple(_package_dirs())),
            ("landlock", False))


def probe_isolation() -> dict:
    """What this machine offers (probed once per process; a fresh dict per call).

    Keys: bwrap (path or None), userns, seccomp, seccomp_module, cgroup_memory,
    cgroup_pids, python, policy_packages, landlock (not used: always False).
    """
    return dict(_probe())


def worker_layout(isolation: str, code_dir: Path, info: dict) -> WorkerLayout:
    """Where the worker finds everything, for `isolation` "bwrap" or "none"."""
    here = Path(__file__).parent
    worker = str(here / WORKER_FILES[0])
    seccomp = info["seccomp_module"] if info["seccomp"] else None
    packages = _package_dirs()
    if isolation == "none":
        scratch = tempfile.mkdtemp(prefix="evogym-site-")
        for name, path in packages.items():
            os.symlink(path, os.path.join(scratch, name))
        return WorkerLayout(info["python"], worker, str(code_dir), scratch,
                            str(Path(seccomp).parent) if seccomp else None, scratch=scratch)
    binds = [(str(here / name), f"{SANDBOX_ROOT}/{name}") for name in WORKER_FILES]
    binds += [(str(path), f"{SANDBOX_ROOT}/site/{name}") for name, path in packages.items()]
    if seccomp:
        binds.append((seccomp, f"{SANDBOX_ROOT}/lib/pyseccomp.py"))
    return WorkerLayout(info["python"], binds[0][1], POLICY_MOUNT, f"{SANDBOX_ROOT}/site",
                        f"{SANDBOX_ROOT}/lib" if seccomp else None, tuple(binds))


def bwrap_argv(info: dict, layout: WorkerLayout, code_dir: Path, tmp_bytes: int) -> list[str]:
    """The bwrap command line up to `--`; the worker command follows it.

    `--as-pid-1`: the worker itself is pid 1 of the new pid namespace, so no bwrap
    process (whose `/proc/<pid>/mem` the policy could open: same user, dumpable) is
    visible inside. Nothing secret may appear in the worker's argv either: inside the
    sandbox it is `/proc/1/cmdline`.
    """
    argv = [info["bwrap"], "--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--as-pid-1",
            "--new-session", "--clearenv", "--setenv", "PATH", "/usr/bin", *_root_entries()]
    for masked in _masked_dirs():
        argv += ["--tmpfs", masked, "--remount-ro", masked]
    argv += ["--ro-bind", str(code_dir), POLICY_MOUNT]
    for src, dst in layout.binds:
        argv += ["--ro-bind", src, dst]
    if layout.site_dir not in {dst for _, dst in layout.binds}:
        argv += ["--dir", layout.site_dir]
    argv += ["--size", str(tmp_bytes), "--tmpfs", "/tmp", "--proc", "/proc", "--dev", "/dev",
             "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", POLICY_MOUNT, "--"]
    return argv
