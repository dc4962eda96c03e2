"""The policy process: one untrusted `Policy` instance behind a process boundary.

The trusted side steps the environment and talks to `worker.py` over a shared-memory
channel with wake-up pipes (`transport.py`; never stdout). Under `isolation="bwrap"`
the worker runs in bubblewrap with every namespace unshared, all capabilities dropped,
an empty environment, as pid 1 of its pid namespace (no other process is visible), a
read-only view of `/usr`, the Python prefix, the snapshot (at `/policy`) and the allowed
packages, a size-capped private `/tmp`, and a per-sandbox cgroup for memory and pids.
The worker makes itself non-dumpable and adds rlimits and seccomp before any policy
code runs. Nothing secret (seeds, pools, run dir, server env) ever enters.

A sandbox can also be started ahead of its code (`prepare()`, used by
`evogym.sandbox.spare`): the same argv, limits and environment, brought up to "worker
waiting for its start request" with an empty staging directory bound at `/policy`; the
caller fills that directory (it becomes the checkpoint) and then calls start().

Deadlines: `init_wall_s` for prepare() and for start(); every reset()/act() call gets the earlier of
`act_wall_s` from its start and the end of the episode budget (`episode_wall_s`). At a
deadline the sandbox is SIGKILLed and the call returns `timeout`.

`isolation="none"` runs the same worker as a plain subprocess (`env={}`, `close_fds`,
deadlines still enforced): UNSAFE, for machines without bubblewrap and explicit opt-in.

Limits of the design worth knowing: `--die-with-parent` ties the sandbox to the *thread*
that started it (PR_SET_PDEATHSIG), so start a `PolicyProcess` from a thread that outlives
it. A failing policy is a `CallResult`, never an exception; only host faults raise.
"""
from __future__ import annotations

import marshal
import os
import select
import shutil
import signal
import subprocess
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from evogym.sandbox.cgroup import ENTER_SHELL, Cgroup, share_cpu_group
from evogym.errors import ConfigError, ProtocolError, SandboxUnavailable
from evogym.sandbox import transport
from evogym.sandbox.transport import Channel, Oversized, Stream, WorkerGone
from evogym.sandbox.isolation import (DEFAULT_ISOLATION, ISOLATIONS, POLICY_MOUNT, bwrap_argv, probe_isolation,
                                      worker_layout)
from evogym.sandbox.replies import CallResult, failure, start_report, worker_error
from evogym.sandbox.snapshot import validate_snapshot
from evogym.verdicts import FATAL

__all__ = ["Limits", "PolicyProcess"]

READ_CHUNK = 64 << 10
"""Bytes read from an output pipe at once."""
DRAIN_READS = 256
"""Most output chunks take_output() reads at once (16 MiB): bounded even if a thread spams."""
KILL_WAIT_S = 5.0
"""How long close() waits for the killed sandbox to be reaped before giving up loudly."""
WORKER_SPIN_S = 1e-3
"""How long the worker busy-waits for the next request before blocking: one env step of
the cheap envs (30-150 µs) fits many times over, so a step costs no wake-up; between
episodes (env construction, ms) it blocks (experiments/results/host_overhead.md)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one policy process; every field is enforced (see module doc)."""

    init_wall_s: float = 120.0
    """Wall clock for start(): sandbox start, import policy.py, Policy(...)."""
    episode_wall_s: float = 600.0
    """Wall clock for reset + all act() calls of one episode (see begin_episode)."""
    act_wall_s: float = 5.0
    """Wall clock of one reset() or act() call; the profiles set it (`pools.Profile`)."""
    memory_bytes: int = 4 << 30
    """cgroup memory limit of the sandbox; RLIMIT_AS of the worker when there is no cgroup."""
    max_pids: int = 64
    """cgroup pids.max (processes + threads) of the sandbox."""
    file_bytes: int = 64 << 20
    """RLIMIT_FSIZE of the worker and the size of its private /tmp."""
    output_bytes: int = 64 << 10
    """stdout and stderr bytes kept per take_output(); the rest is counted and noted."""
    frame_bytes: int = 16 << 20
    """Largest message (observation or action) in either direction: the size of each
    shared-memory payload area."""
    open_files: int = 256
    """RLIMIT_NOFILE of the worker."""

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise ConfigError(f"Limits.{name} must be > 0, got {value!r}",
                                  hint="pass a positive value or keep the default")


@dataclass
class _Handles:
    """OS resources of one sandbox, released by `_release` (also via weakref.finalize)."""

    proc: subprocess.Popen | None = None
    fds: list[int] = field(default_factory=list)
    channel: Channel | None = None
    cgroup: Cgroup | None = None
    scratch: str | None = None
    isolation: str = DEFAULT_ISOLATION


def _release(h: _Handles) -> None:
    if h.proc is not None and h.proc.poll() is None:
        try:
            if h.isolation == "none":
                os.killpg(h.proc.pid, signal.SIGKILL)
            else:
                h.proc.kill()
        except ProcessLookupError:
            pass
    if h.proc is not None:
        try:
            h.proc.wait(KILL_WAIT_S)
        except subprocess.TimeoutExpired:
            pass  # the cgroup sweep below still kills every member
    if h.cgroup is not None:
        h.cgroup.destroy()
        h.cgroup = None
    if h.channel is not None:
        h.channel.close()
        h.channel = None
    for fd in h.fds:
        try:
            os.close(fd)
        except OSError:
            pass
    h.fds.clear()
    if h.scratch:
        shutil.rmtree(h.scratch, ignore_errors=True)
        h.scratch = None


class PolicyProcess:
    """One sandboxed `Policy` instance (one submit, or one hidden pool).

    Calls never raise for policy faults: they return `CallResult`. After a fatal
    category (`FATAL`) the sandbox is already killed and every later call returns that
    failure again. Use as a context manager or call close().
    """

    def __init__(self, code_dir: Path, *, isolation: str = DEFAULT_ISOLATION, limits: Limits = Limits()) -> None:
        if isolation not in ISOLATIONS:
            raise ConfigError(f"isolation must be {' or '.join(map(repr, ISOLATIONS))}, got {isolation!r}",
                              hint="use 'bwrap' (needs bubblewrap) or pass --isolation none explicitly")
        self.code_dir = Path(code_dir).resolve()
        self.isolation = isolation
        self.limits = limits
        self.sandbox_id = os.urandom(8).hex()
        self.report: dict = {}
        self._h = _Handles(isolation=isolation)
        self._finalizer = weakref.finalize(self, _release, self._h)
        self._dead: CallResult | None = None
        self._deadline: float | None = None
        self._armed = False
        self._prepared = False
        self._started = False
        self._bound: tuple[int, int] | None = None
        self._ch: Channel | None = None
        self._streams: list[Stream] = []
        self._poll = select.poll()

    # -- lifecycle ---------------------------------------------------------------------

    def launch(self) -> None:
        """Start the sandbox and the worker now, before the snapshot is complete if need be:
        the worker imports nothing of the policy until start(). The judge overlaps the
        sandbox start (bwrap, interpreter, seccomp: tens of ms) with its snapshot copy."""
        if self._h.proc is None and self._dead is None:
            self._launch()

    def prepare(self, preload: tuple[str, ...] = ()) -> CallResult:
        """Launch the sandbox before its code exists, up to "worker up, rlimits and seccomp
        on, `preload` imported, waiting for the start request".

        `code_dir` must be an existing (typically empty) directory: it is bound now, read
        only at start(), and may be renamed meanwhile (see `rebind`). Only trusted code runs
        before start(). Ok with {"preloaded", "modules"} (what loaded, and the top-level
        module names that added); a failure leaves the process dead. Deadline: init_wall_s.
        """
        if self._h.proc is not None or self._dead is not None:
            raise ProtocolError("prepare() on a PolicyProcess that was already launched",
                                hint="create a new PolicyProcess per sandbox")
        t0 = time.monotonic()
        st = self.code_dir.stat()
        self._bound = (st.st_dev, st.st_ino)
        self._prepared = True
        self._launch()
        assert self._ch is not None  # _launch made it
        self._send("prepare", self._ch.send_value, transport.OP_PREPARE, list(preload))
        result = self._await_announced("prepare", t0 + self.limits.init_wall_s)
        value = result.value if result.ok else None
        if isinstance(value, dict) and isinstance(value.get("preloaded"), list) \
                and isinstance(value.get("modules"), list):
            self.report.update(prestarted=True, preloaded=value["preloaded"], preload_modules=value["modules"])
        elif result.ok:
            result = self._kill(failure("protocol_error", "prepare reply is not {preloaded, modules}"))
        result.elapsed_s = time.monotonic() - t0
        return result

    def rebind(self, code_dir: Path) -> None:
        """After the bound staging directory was renamed (to the checkpoint): use its new path.
        Refuses any directory other than the one bound at prepare()."""
        code_dir = Path(code_dir).resolve()
        st = code_dir.stat()
        if not self._prepared or self._started or (st.st_dev, st.st_ino) != self._bound:
            raise ProtocolError(f"{code_dir} is not the directory bound into this sandbox",
                                hint="rebind() takes the renamed staging directory of a prepared sandbox")
        self.code_dir = code_dir

    def alive(self) -> bool:
        """Whether the sandbox runs and its reply pipe is open (a spare that died idle is not)."""
        if self._dead is not None or self._ch is None or self._h.proc is None or self._h.proc.poll() is not None:
            return False
        try:
            self._ch.drain_wake()
        except WorkerGone:
            return False
        return True

    def interrupt(self) -> None:
        """SIGKILL the sandbox now, from any thread; close() (on the owning thread) still
        releases everything. For a spare being prepared while its keeper shuts down."""
        proc = self._h.proc
        if proc is not None and proc.poll() is None:
            try:
                if self.isolation == "none":
                    os.killpg(proc.pid, signal.SIGKILL)
                else:
                    proc.kill()
            except ProcessLookupError:
                pass

    def start(self, obs_space: dict, action_space: dict, env_meta: dict) -> CallResult:
        """Validate, launch the sandbox (unless launch() or prepare() did), import policy.py and
        construct Policy."""
        if self._started or self._dead is not None:
            raise ProtocolError("start() called twice on one PolicyProcess",
                                hint="create a new PolicyProcess per Policy instance")
        self._started = True
        t0 = time.monotonic()
        invalid = validate_snapshot(self.code_dir)
        if invalid is not None:
            self.close()
            self._dead = invalid
            return invalid
        self.launch()
        policy_dir = str(self.code_dir) if self.isolation == "none" else POLICY_MOUNT
        request = {"obs_space": obs_space, "action_space": action_space, "env_meta": env_meta,
                   "policy_dir": policy_dir}
        assert self._ch is not None  # launch made it
        self._send("start", self._ch.send_value, transport.OP_START, request)
        result = self._await("start", t0 + self.limits.init_wall_s)
        claims = start_report(result.value) if result.ok else None
        if isinstance(claims, dict):  # the worker's own claims (seccomp, rlimits)
            self.report.update(claims)
        elif result.ok:
            result = self._kill(failure("protocol_error", f"start reply: {claims}"))
        else:
            self._kill(result)
        result.elapsed_s = time.monotonic() - t0
        return result

    def close(self) -> None:
        """Kill the whole sandbox (pid namespace + cgroup), release fds; idempotent."""
        self._finalizer()
        self._ch = None
        self._streams = []
        if self._dead is None:
            self._dead = failure("crashed", "the policy process was closed")

    def __enter__(self) -> "PolicyProcess":
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # -- episode clock -----------------------------------------------------------------

    def begin_episode(self, wall_s: float | None = None) -> None:
        """Start one episode's wall budget now (default `limits.episode_wall_s`).

        reset() starts the clock itself unless begin_episode() armed it first, so a caller
        that also wants env.reset() inside the budget calls begin_episode() before it.
        """
        self._deadline = time.monotonic() + (self.limits.episode_wall_s if wall_s is None else wall_s)
        self._armed = True

    def remaining_s(self) -> float:
        """Seconds left in the current episode budget (the full budget if none started)."""
        if self._deadline is None:
            return self.limits.episode_wall_s
        return max(self._deadline - time.monotonic(), 0.0)

    def reset(self, episode_index: int) -> CallResult:
        """Call `policy.reset(episode_index)` inside the episode budget."""
        if not self._armed:
            self.begin_episode()
        self._armed = False
        if (dead := self._check("reset")) is not None:
            return dead
        assert self._ch is not None  # started and not dead: the channel is open
        self._ch.send_int(transport.OP_RESET, int(episode_index))
        return self._await("reset", self._call_deadline())

    def act(self, obs) -> CallResult:
        """Call `policy.act(obs)` with an observation as the env returned it.

        The policy sees `spaces.to_jsonable(obs)`; `.value` is its answer (a JSON value,
        or a numpy array when `.array`)."""
        if self._deadline is None:
            self.begin_episode()
            self._armed = False
        if (dead := self._check("act")) is not None:
            return dead
        assert self._ch is not None  # started and not dead: the channel is open
        self._send("act", self._ch.send_obs, obs)
        return self._await("act", self._call_deadline())

    def take_output(self) -> tuple[str, str]:
        """stdout and stderr written since the last take, each capped at output_bytes (with a
        note counting the dropped bytes)."""
        if self._streams:
            self._drain()
        if not self._streams:
            return "", ""
        return self._streams[0].take(), self._streams[1].take()

    def take_output_counted(self) -> tuple[tuple[str, int], tuple[str, int]]:
        """((stdout, bytes dropped), (stderr, bytes dropped)) since the last take."""
        if self._streams:
            self._drain()
        if not self._streams:
            return ("", 0), ("", 0)
        return self._streams[0].take_counted(), self._streams[1].take_counted()

    # -- internals ---------------------------------------------------------------------

    def _check(self, phase: str) -> CallResult | None:
        if self._dead is not None:
            return failure(self._dead.category or "crashed", self._dead.message, self._dead.traceback)
        if not self._started:
            raise ProtocolError(f"{phase}() before start()", hint="call start() first")
        return None

    def _call_deadline(self) -> float:
        assert self._deadline is not None  # reset() and act() begin the episode first
        return min(self._deadline, time.monotonic() + self.limits.act_wall_s)

    def _send(self, phase: str, send, *args) -> None:
        try:
            send(*args)
        except Oversized as exc:
            raise ProtocolError(f"{phase} request of {exc} exceeds Limits.frame_bytes={self.limits.frame_bytes}",
                                hint="raise Limits.frame_bytes for this env") from None

    def _launch(self) -> None:
        info = probe_isolation()
        if self.isolation == "bwrap" and not (info["bwrap"] and info["userns"]):
            raise SandboxUnavailable(
                f"bubblewrap sandbox unavailable: bwrap={info['bwrap']!r}, user namespaces={info['userns']}",
                hint="install bubblewrap (apt-get install -y bubblewrap) or pass `--isolation none` "
                     "explicitly to run policies UNSAFELY without a sandbox")
        h = self._h
        share_cpu_group()  # the host and its sandboxes schedule as one group (see there)
        if info["cgroup_memory"] or info["cgroup_pids"]:
            h.cgroup = Cgroup.create(self.sandbox_id, self.limits.memory_bytes, self.limits.max_pids)
        h.channel = self._ch = Channel(self.limits.frame_bytes)
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        h.fds += [out_r, err_r]
        try:
            argv, cwd = self._argv(info, self._ch.child_fds)
            enter = None
            if h.cgroup is not None:
                if os.access(ENTER_SHELL, os.X_OK):
                    argv = h.cgroup.entering(argv)
                else:
                    enter = h.cgroup.enter  # no /bin/sh: the slower full fork
            h.proc = subprocess.Popen(
                argv, env={}, cwd=cwd, close_fds=True, pass_fds=self._ch.child_fds,
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w,
                start_new_session=self.isolation == "none", preexec_fn=enter)
        finally:
            for fd in (out_w, err_w):
                os.close(fd)
            self._ch.close_child_ends()
        for fd in (out_r, err_r):
            os.set_blocking(fd, False)
        self._streams = [Stream(out_r, self.limits.output_bytes), Stream(err_r, self.limits.output_bytes)]
        for fd in (self._ch.resp_r, out_r, err_r):
            self._poll.register(fd, select.POLLIN)
        self.report.update(isolation=self.isolation, cgroup=h.cgroup is not None,
                           memory_limit="cgroup" if h.cgroup and h.cgroup.memory else "rlimit_as",
                           policy_packages=list(info["policy_packages"]))

    def _argv(self, info: dict, fds: tuple[int, int, int]) -> tuple[list[str], str]:
        rlimits = {"fsize": self.limits.file_bytes, "nofile": self.limits.open_files, "core": 0}
        if not (self._h.cgroup and self._h.cgroup.memory):
            rlimits["as"] = self.limits.memory_bytes
        layout = worker_layout(self.isolation, self.code_dir, info)
        if self.isolation == "none":
            self._h.scratch = layout.scratch
        memfd, req_fd, resp_fd = fds
        config = {"memfd": memfd, "req_fd": req_fd, "resp_fd": resp_fd, "frame_bytes": self.limits.frame_bytes,
                  "spin_s": WORKER_SPIN_S, "ordered_stores": transport.ORDERED_STORES,
                  "rlimits": rlimits, "site_dir": layout.site_dir,
                  "seccomp_lib": layout.seccomp_lib, "sandbox_id": self.sandbox_id}
        # marshalled (hex): the worker reads it without importing json; nothing in it is secret.
        # The sandbox id follows in plain text, so `ps` (and the tests) can tell sandboxes apart.
        worker = [layout.python, "-I", "-S", "-B", "-X", "utf8", layout.worker, marshal.dumps(config).hex(),
                  f"sandbox={self.sandbox_id}"]
        if self.isolation == "none":
            return worker, str(self.code_dir)
        return bwrap_argv(info, layout, self.code_dir, self.limits.file_bytes) + worker, "/"

    def _await(self, phase: str, deadline: float) -> CallResult:
        """Wait for the reply to the request just sent: spin, then block in poll() (draining
        stdout/stderr meanwhile) until the reply, the worker's death, or the deadline."""
        ch = self._ch
        assert ch is not None  # a request was just sent on it
        t0 = time.monotonic()
        if not ch.spin():
            failure = self._block(phase, deadline)
            if failure is not None:
                return failure
        result = self._interpret(phase)
        result.elapsed_s = time.monotonic() - t0
        return result

    def _await_announced(self, phase: str, deadline: float) -> CallResult:
        """Wait for a reply the worker always announces with a wake byte, in poll() alone:
        no spin and no 2 ms slices, so a spare's keeper thread waiting here through a
        sandbox start-up (0.1-0.5 s) does not take the GIL from the thread stepping the
        current submit (it did: that submit's episodes took 62 -> 150 ms)."""
        ch = self._ch
        assert ch is not None  # a request was just sent on it
        while not ch.ready():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return self._kill(failure("timeout", self._timeout_message(phase, deadline)))
            for fd, _ in self._poll.poll(remaining * 1000.0):
                if fd != ch.resp_r:
                    self._drain_fd(fd)
                    continue
                try:
                    ch.drain_wake()
                except WorkerGone:
                    if ch.ready():
                        break
                    return self._died(phase)
        return self._interpret(phase)

    def _block(self, phase: str, deadline: float) -> CallResult | None:
        ch = self._ch
        assert ch is not None  # a request was just sent on it
        try:
            while not ch.begin_block():
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return self._kill(failure("timeout", self._timeout_message(phase, deadline)))
                for fd, _ in transport.poll_fds(self._poll, remaining):
                    if fd == ch.resp_r:
                        try:
                            ch.drain_wake()
                        except WorkerGone:
                            if ch.ready():  # it answered, then exited: the answer stands
                                return None
                            return self._died(phase)
                    else:
                        self._drain_fd(fd)
        finally:
            if self._ch is not None:
                ch.end_block()
        return None

    def _interpret(self, phase: str) -> CallResult:
        """The reply now in shared memory as a `CallResult`. Every field the worker wrote is
        checked by type and size before it is used: a frame the worker could not have sent
        (the policy forged it) is a `protocol_error` that ends the sandbox, never an exception."""
        assert self._ch is not None  # the reply is in its shared memory
        try:
            status, kind, value = self._ch.reply()
        except (ValueError, RecursionError, MemoryError) as exc:  # UnicodeDecodeError is a ValueError
            return self._kill(failure("protocol_error", f"malformed reply: {exc}"[:500]))
        if status == transport.STATUS_OK:
            return CallResult(ok=True, value=value, array=kind == transport.KIND_ARRAY)
        error = worker_error(value, phase)
        if isinstance(error, str):
            return self._kill(failure("protocol_error", error))
        return self._kill(error) if error.category in FATAL else error

    def _timeout_message(self, phase: str, deadline: float) -> str:
        if phase == "start":
            return f"start (import policy.py + Policy(...)) exceeded init_wall_s={self.limits.init_wall_s} s"
        if phase == "prepare":
            return f"sandbox start (interpreter, seccomp, preload) exceeded init_wall_s={self.limits.init_wall_s} s"
        if self._deadline is not None and deadline >= self._deadline:
            return f"{phase}() did not return within the episode wall budget ({self.limits.episode_wall_s} s)"
        return f"{phase}() did not return within act_wall_s={self.limits.act_wall_s} s"

    def _died(self, phase: str) -> CallResult:
        """The worker closed its end: classify the death (oom vs crash), then clean up."""
        proc = self._h.proc
        assert proc is not None  # launched: the worker that died
        try:
            code = proc.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        oom = self._h.cgroup is not None and self._h.cgroup.oom_killed()
        if oom:
            return self._kill(failure("oom", f"the policy exceeded the memory limit of "
                                       f"{self.limits.memory_bytes} bytes during {phase}"))
        return self._kill(failure("crashed", f"the policy process died during {phase} ({_describe(code)})"))

    def _kill(self, result: CallResult) -> CallResult:
        self._release_keep_output()
        self._drain()  # the writers are dead now, so this ends at EOF
        self._dead = result
        return result

    def _release_keep_output(self) -> None:
        # Output fds stay readable until close(); kill and reap everything else now.
        h = self._h
        keep = [s.fd for s in self._streams]
        h.fds = [fd for fd in h.fds if fd not in keep]
        if h.channel is not None:
            try:
                self._poll.unregister(h.channel.resp_r)
            except KeyError:
                pass
        _release(h)
        self._ch = None
        h.fds = keep

    def _drain(self) -> None:
        for s in self._streams:
            self._drain_fd(s.fd, DRAIN_READS)

    def _drain_fd(self, fd: int, reads: int = 1) -> None:
        """Read at most `reads` chunks: a policy printing without end cannot hold the host."""
        stream = self._streams[0] if fd == self._streams[0].fd else self._streams[1]
        for _ in range(reads):
            try:
                data = os.read(fd, READ_CHUNK)
            except OSError:  # BlockingIOError: nothing more for now
                return
            if not data:
                try:
                    self._poll.unregister(fd)
                except KeyError:
                    pass
                return
            stream.absorb(data)


def _describe(code: int | None) -> str:
    if code is None:
        return "still running after its reply pipe closed"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    if code > 128 and code - 128 in signal.Signals._value2member_map_:
        return f"exit status {code}, i.e. killed by {signal.Signals(code - 128).name}"
    return f"exit status {code}"
