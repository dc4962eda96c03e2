"""Per-sandbox cgroup v1 groups for memory and pids (the kernel limits of a policy).

Each sandbox gets a child group `evogym-sbx-<host pid>-<sandbox id>` under the caller's
own memory and pids groups, entered by the forked child before it execs bwrap, so every
sandbox process is accounted from its first instruction. The memory limit SIGKILLs on
overrun (RLIMIT_AS alone only fails an allocation, which a policy can catch and retry);
pids.max holds for root, unlike RLIMIT_NPROC, which root ignores (a fork bomb run as root
would otherwise be unbounded).
Groups of a dead host process are swept when the next group is created.
"""
from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PREFIX = "evogym-sbx-"
EMPTY_WAIT_S = 3.0
"""How long destroy() keeps killing members before leaving the group for the next sweep."""

LIMIT_FILES = {"memory": "memory.limit_in_bytes", "pids": "pids.max"}


def own_dir(controller: str) -> Path | None:
    """The cgroup v1 directory of this process for `controller`, if that hierarchy is mounted."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return ROOT / controller / path.lstrip("/")
    return None


SWEEP_WAIT_S = 2.0
"""How long a sweep waits for a dead server's sandbox processes to be reaped before leaving the group."""


def usable_dirs() -> dict[str, Path]:
    """This process's own group of each v1 controller it may create child groups in."""
    usable = {}
    for controller in LIMIT_FILES:
        d = own_dir(controller)  # the root group has no limit file, so probe cgroup.procs
        if d and (d / "cgroup.procs").exists() and os.access(d, os.W_OK):
            usable[controller] = d
    return usable


def cgroup_support() -> dict[str, bool]:
    """Which v1 controllers this process may create child groups in."""
    usable = usable_dirs()
    return {controller: controller in usable for controller in LIMIT_FILES}


def _write(path: Path, value: int | str) -> None:
    path.write_text(str(value))


def _sweep(parent: Path) -> None:
    """Remove groups left by host processes that no longer exist."""
    for d in parent.glob(PREFIX + "*"):
        owner = d.name[len(PREFIX):].split("-", 1)[0]
        if owner.isdigit() and not Path("/proc", owner).exists():
            _remove_when_empty(d, SWEEP_WAIT_S)


def _remove_when_empty(d: Path, wait_s: float) -> None:
    """SIGKILL the group's members and rmdir it once they are gone (a killed process leaves
    the group only when it is reaped, so rmdir right after the kill fails with EBUSY)."""
    give_up = time.monotonic() + wait_s
    while True:
        _kill_members(d)
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > give_up:
                return  # still busy; the next sweep retries
            time.sleep(0.01)


def sweep_orphans() -> None:
    """Remove this process's sibling groups whose host process is gone (a SIGKILLed server)."""
    for parent in usable_dirs().values():
        _sweep(parent)


def find_groups(tag: str) -> list[Path]:
    """Existing groups (any owner) of the sandbox `tag` under this process's own groups."""
    return [d for parent in usable_dirs().values() for d in parent.glob(f"{PREFIX}*-{tag}")]


def _members(d: Path) -> list[int]:
    try:
        return [int(p) for p in (d / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_members(d: Path) -> None:
    for pid in _members(d):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


ENTER_SHELL = "/bin/sh"
ENTER_SCRIPT = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'
"""Writes the shell's pid into each group file given before `--`, then execs the rest."""

CPU_PREFIX = "evogym-cpu-"
_cpu_lock = threading.Lock()
_cpu_group: Path | None = None


def share_cpu_group() -> Path | None:
    """Move this process, once, into its own child group of the v1 `cpu` controller (sandboxes
    launched afterwards inherit it); the group's path, or None where that is not possible.

    Why: with autogroups every session is its own scheduling group, and bwrap's
    `--new-session` (kept: it stops TIOCSTI injection into a terminal) gives each sandbox
    its own. On an oversubscribed machine every act() then hands the CPU from the host's
    group to the worker's and back, each time behind the other groups: 150-400 µs per
    step measured here at load 8-10 on 2 cores. In one group the host and its worker
    share one entity and hand over within it: 17-150 µs then; 29-64 µs per step of
    overhead in experiments/results/host_overhead.md (load 5-9).
    Groups of dead host processes are swept here too.
    """
    global _cpu_group
    with _cpu_lock:
        if _cpu_group is not None:
            return _cpu_group
        parent = own_dir("cpu")
        if parent is None or parent.name.startswith(CPU_PREFIX) or not os.access(parent, os.W_OK):
            return None
        for d in parent.glob(CPU_PREFIX + "*"):
            owner = d.name[len(CPU_PREFIX):]
            if owner.isdigit() and not Path("/proc", owner).exists():
                _remove_when_empty(d, SWEEP_WAIT_S)
        group = parent / f"{CPU_PREFIX}{os.getpid()}"
        try:
            group.mkdir(exist_ok=True)
            _write(group / "cgroup.procs", os.getpid())
        except OSError:
            return None
        _cpu_group = group
        return group


@dataclass
class Cgroup:
    """One sandbox's groups; `memory` / `pids` are None where the controller is missing."""

    memory: Path | None
    pids: Path | None

    @classmethod
    def create(cls, tag: str, memory_bytes: int, max_pids: int) -> "Cgroup":
        usable = usable_dirs()
        name = f"{PREFIX}{os.getpid()}-{tag}"
        dirs: dict[str, Path | None] = {}
        for controller, value in (("memory", memory_bytes), ("pids", max_pids)):
            parent = usable.get(controller)
            if parent is None:
                dirs[controller] = None
                continue
            _sweep(parent)
            d = parent / name
            d.mkdir()
            _write(d / LIMIT_FILES[controller], value)
            dirs[controller] = d
        return cls(dirs["memory"], dirs["pids"])

    def __post_init__(self) -> None:
        # Precomputed: enter() runs between fork and exec, where allocation should be minimal.
        self._procs = [str(d / "cgroup.procs") for d in (self.memory, self.pids) if d]

    def entering(self, argv: list[str]) -> list[str]:
        """`argv` behind a `/bin/sh` that moves itself into the groups and then execs it, so the
        process is accounted from its first instruction and Popen can still use vfork (a
        `preexec_fn` forces a full fork of the host: 10 ms a sandbox, measured at load 10)."""
        if not self._procs:
            return argv
        return [ENTER_SHELL, "-c", ENTER_SCRIPT, "sh", *self._procs, "--", *argv]

    def enter(self) -> None:
        """Move the calling process in (runs in the forked child: only os calls)."""
        pid = str(os.getpid()).encode()
        for path in self._procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)

    def oom_killed(self) -> bool:
        """Whether the kernel OOM-killed a member (v1 `oom_kill` counter, else failcnt)."""
        if self.memory is None:
            return False
        try:
            for line in (self.memory / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value) > 0
            return int((self.memory / "memory.failcnt").read_text()) > 0
        except (OSError, ValueError):
            return False

    def members(self) -> list[int]:
        """Host pids still in the group (either controller)."""
        return sorted({pid for d in (self.memory, self.pids) if d for pid in _members(d)})

    def destroy(self) -> None:
        """SIGKILL every member until the groups are empty, then remove them."""
        for d in (self.memory, self.pids):
            if d is not None:
                _remove_when_empty(d, EMPTY_WAIT_S)  # if still busy: left for the next sweep
