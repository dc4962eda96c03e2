"""The policy process: one untrusted `Policy` instance behind a process boundary.

The trusted side steps the environment and exchanges JSON frames with
`worker.py` over two dedicated pipes (never stdout). Under `isolation="bwrap"`
the worker runs in bubblewrap with every namespace unshared, all capabilities dropped,
an empty environment (bwrap itself is started with `env={}`: inside the pid namespace
`/proc/1/environ` is bwrap's), a read-only view of `/usr`, the Python prefix, the
snapshot (at `/policy`) and the allowed packages, a size-capped private `/tmp`, and a
per-sandbox cgroup for memory and pids. The worker adds rlimits and seccomp before any
policy code runs. Nothing secret (seeds, pools, run dir, server env) ever enters.

`isolation="none"` runs the same worker as a plain subprocess (`env={}`, `close_fds`,
deadlines still enforced): UNSAFE, for machines without bubblewrap and explicit opt-in.

Limits of the design worth knowing: `--die-with-parent` ties the sandbox to the *thread*
that started it (PR_SET_PDEATHSIG), so start a `PolicyProcess` from a thread that outlives
it. A failing policy is a `CallResult`, never an exception; only host faults raise.
"""
from __future__ import annotations

import ast
import json
import os
import select
import shutil
import signal
import subprocess
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path

from evogym.sandbox.cgroup import Cgroup
from evogym.errors import ConfigError, ProtocolError, SandboxUnavailable
from evogym.sandbox.transport import DECODER, READ_CHUNK, Reply, Stream, dumps
from evogym.sandbox.isolation import bwrap_argv, probe_isolation, worker_layout
from evogym.verdicts import FATAL, WORKER_CATEGORIES

__all__ = ["CallResult", "Limits", "PolicyProcess", "validate_snapshot"]

MAX_SOURCE_BYTES = 8 << 20
"""Largest `*.py` file the static validation parses (host side, before any execution)."""

TRACEBACK_CHARS = 64 << 10
"""Longest traceback kept from the worker (it cuts to this too; the host re-checks)."""
MESSAGE_CHARS = 4000
DRAIN_READS = 256
"""Most output chunks take_output() reads at once (16 MiB): bounded even if a thread spams."""
KILL_WAIT_S = 5.0
"""How long close() waits for the killed sandbox to be reaped before giving up loudly."""
SPIN_S = 150e-6
"""How long a call busy-polls for its reply before sleeping in poll() (see _spin_receive);
measured: HalfCheetah 8 episodes 1.98 s -> 1.52 s (experiments/results/host_overhead.md)."""


@dataclass(frozen=True)
class Limits:
    """Resource limits of one policy process; every field is enforced (see module doc)."""

    init_wall_s: float = 120.0
    """Wall clock for start(): sandbox start, import policy.py, Policy(...)."""
    episode_wall_s: float = 600.0
    """Wall clock for reset + all act() calls of one episode (see begin_episode)."""
    memory_bytes: int = 4 << 30
    """cgroup memory limit of the sandbox; RLIMIT_AS of the worker when there is no cgroup."""
    max_pids: int = 64
    """cgroup pids.max (processes + threads) of the sandbox."""
    file_bytes: int = 64 << 20
    """RLIMIT_FSIZE of the worker and the size of its private /tmp."""
    output_bytes: int = 64 << 10
    """stdout and stderr bytes kept per take_output(); the rest is counted and noted."""
    frame_bytes: int = 16 << 20
    """Largest protocol frame accepted in either direction."""
    open_files: int = 256
    """RLIMIT_NOFILE of the worker."""

    def __post_init__(self) -> None:
        for name, value in vars(self).items():
            if not value > 0:
                raise ConfigError(f"Limits.{name} must be > 0, got {value!r}",
                                  hint="pass a positive value or keep the default")


@dataclass
class CallResult:
    """Outcome of one call into the policy process; a failure is data, not an exception."""

    ok: bool
    value: object = None
    category: str | None = None
    """A `verdicts.CallCategory` when not ok."""
    message: str = ""
    traceback: str | None = None
    elapsed_s: float = 0.0


def _failure(category: str, message: str, traceback: str | None = None) -> CallResult:
    return CallResult(ok=False, category=category, message=message, traceback=traceback)


def validate_snapshot(code_dir: Path) -> CallResult | None:
    """Static checks of a snapshot, executing nothing; None when it may be started.

    `policy.py` must exist as a regular file and contain a literal top-level
    `class Policy`; every `*.py` below `code_dir` must parse (symlinks are not followed).
    """
    code_dir = Path(code_dir)
    entry = code_dir / "policy.py"
    if entry.is_symlink() or not entry.is_file():
        return _failure("missing_policy", f"no regular file policy.py in the snapshot {code_dir.name}; "
                        "write system/policy.py defining class Policy")
    trees = {}
    for root, dirs, files in os.walk(code_dir):
        dirs[:] = sorted(d for d in dirs if not os.path.islink(os.path.join(root, d)))
        for name in sorted(f for f in files if f.endswith(".py")):
            path = Path(root, name)
            if path.is_symlink():
                continue
            rel = path.relative_to(code_dir).as_posix()
            tree_or_error = _parse(path, rel)
            if isinstance(tree_or_error, CallResult):
                return tree_or_error
            trees[rel] = tree_or_error
    if not any(isinstance(n, ast.ClassDef) and n.name == "Policy" for n in trees["policy.py"].body):
        return _failure("missing_policy", "policy.py has no top-level `class Policy` statement "
                        "(an import or assignment does not count); define the class in policy.py")
    return None


def _parse(path: Path, rel: str) -> ast.Module | CallResult:
    if path.stat().st_size > MAX_SOURCE_BYTES:
        return _failure("import_error", f"{rel}: {path.stat().st_size} bytes exceeds the "
                        f"{MAX_SOURCE_BYTES}-byte source limit; move data out of .py files")
    try:
        return ast.parse(path.read_bytes(), filename=rel)
    except SyntaxError as exc:
        return _failure("import_error", f"{rel}:{exc.lineno}: SyntaxError: {exc.msg}")
    except (ValueError, RecursionError, MemoryError) as exc:
        return _failure("import_error", f"{rel}: cannot be parsed: {type(exc).__name__}: {exc}")


@dataclass
class _Handles:
    """OS resources of one sandbox, released by `_release` (also via weakref.finalize)."""

    proc: subprocess.Popen | None = None
    fds: list[int] = field(default_factory=list)
    cgroup: Cgroup | None = None
    scratch: str | None = None
    isolation: str = "bwrap"


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

    def __init__(self, code_dir: Path, *, isolation: str = "bwrap", limits: Limits = Limits()) -> None:
        if isolation not in ("bwrap", "none"):
            raise ConfigError(f"isolation must be 'bwrap' or 'none', got {isolation!r}",
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
        self._streams: list[Stream] = []
        self._poll = select.poll()
        self._writing = False

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, obs_space: dict, action_space: dict, env_meta: dict) -> CallResult:
        """Validate, launch the sandbox, import policy.py and construct Policy."""
        if self._h.proc is not None or self._dead is not None:
            raise ProtocolError("start() called twice on one PolicyProcess",
                                hint="create a new PolicyProcess per Policy instance")
        t0 = time.monotonic()
        invalid = validate_snapshot(self.code_dir)
        if invalid is not None:
            self._dead = invalid
            return invalid
        self._launch()
        request = {"op": "start", "obs_space": obs_space, "action_space": action_space,
                   "env_meta": env_meta}
        result = self._call("start", dumps(request), t0 + self.limits.init_wall_s)
        if result.ok and isinstance(result.value, dict):  # the worker's own claims (seccomp, rlimits)
            self.report.update(result.value)
        else:
            self._kill(result)
        result.elapsed_s = time.monotonic() - t0
        return result

    def close(self) -> None:
        """Kill the whole sandbox (pid namespace + cgroup), release fds; idempotent."""
        self._finalizer()
        if self._dead is None:
            self._dead = _failure("crashed", "the policy process was closed")

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
        payload = b'{"op":"reset","episode_index":%d}' % int(episode_index)
        return self._timed("reset", payload)

    def act(self, obs) -> CallResult:
        """Call `policy.act(obs)`; `.value` is the raw action as a JSON value."""
        if self._deadline is None:
            self.begin_episode()
            self._armed = False
        return self._timed("act", b'{"op":"act","obs":' + dumps(obs) + b"}")

    def take_output(self) -> tuple[str, str]:
        """stdout and stderr written since the last take, each capped at output_bytes."""
        if self._streams:
            self._drain()
        if not self._streams:
            return "", ""
        return self._streams[0].take(), self._streams[1].take()

    # -- internals ---------------------------------------------------------------------

    def _timed(self, phase: str, payload: bytes) -> CallResult:
        if self._dead is not None:
            return _failure(self._dead.category, self._dead.message, self._dead.traceback)
        if self._h.proc is None:
            raise ProtocolError(f"{phase}() before start()", hint="call start() first")
        t0 = time.monotonic()
        result = self._call(phase, payload, self._deadline)
        result.elapsed_s = time.monotonic() - t0
        return result

    def _launch(self) -> None:
        info = probe_isolation()
        if self.isolation == "bwrap" and not (info["bwrap"] and info["userns"]):
            raise SandboxUnavailable(
                f"bubblewrap sandbox unavailable: bwrap={info['bwrap']!r}, user namespaces={info['userns']}",
                hint="install bubblewrap (apt-get install -y bubblewrap) or pass `--isolation none` "
                     "explicitly to run policies UNSAFELY without a sandbox")
        h = self._h
        if info["cgroup_memory"] or info["cgroup_pids"]:
            h.cgroup = Cgroup.create(self.sandbox_id, self.limits.memory_bytes, self.limits.max_pids)
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        h.fds += [req_w, resp_r, out_r, err_r]
        try:
            argv, cwd = self._argv(info, req_r, resp_w)
            h.proc = subprocess.Popen(
                argv, env={}, cwd=cwd, close_fds=True, pass_fds=(req_r, resp_w),
                stdin=subprocess.DEVNULL, stdout=out_w, stderr=err_w,
                start_new_session=self.isolation == "none",
                preexec_fn=h.cgroup.enter if h.cgroup else None)
        finally:
            for fd in (req_r, resp_w, out_w, err_w):
                os.close(fd)
        for fd in (req_w, resp_r, out_r, err_r):
            os.set_blocking(fd, False)
        self._req_w, self._resp_r = req_w, resp_r
        self._streams = [Stream(out_r, self.limits.output_bytes), Stream(err_r, self.limits.output_bytes)]
        for fd in (resp_r, out_r, err_r):
            self._poll.register(fd, select.POLLIN)
        self.report.update(isolation=self.isolation, cgroup=h.cgroup is not None,
                           memory_limit="cgroup" if h.cgroup and h.cgroup.memory else "rlimit_as",
                           policy_packages=list(info["policy_packages"]))

    def _argv(self, info: dict, req_fd: int, resp_fd: int) -> tuple[list[str], str]:
        rlimits = {"fsize": self.limits.file_bytes, "nofile": self.limits.open_files, "core": 0}
        if not (self._h.cgroup and self._h.cgroup.memory):
            rlimits["as"] = self.limits.memory_bytes
        layout = worker_layout(self.isolation, self.code_dir, info)
        if self.isolation == "none":
            self._h.scratch = layout.scratch
        config = {"req_fd": req_fd, "resp_fd": resp_fd, "frame_bytes": self.limits.frame_bytes,
                  "rlimits": rlimits, "policy_dir": layout.policy_dir, "site_dir": layout.site_dir,
                  "seccomp_lib": layout.seccomp_lib, "sandbox_id": self.sandbox_id}
        worker = [layout.python, "-I", "-S", "-B", "-X", "utf8", layout.worker, json.dumps(config)]
        if self.isolation == "none":
            return worker, str(self.code_dir)
        return bwrap_argv(info, layout, self.code_dir, self.limits.file_bytes) + worker, "/"

    def _call(self, phase: str, payload: bytes, deadline: float) -> CallResult:
        if len(payload) > self.limits.frame_bytes:
            raise ProtocolError(f"{phase} request of {len(payload)} bytes exceeds Limits.frame_bytes="
                                f"{self.limits.frame_bytes}", hint="raise Limits.frame_bytes for this env")
        reply = self._exchange(len(payload).to_bytes(4, "big") + payload, deadline, phase)
        if isinstance(reply, CallResult):
            return reply
        return self._interpret(phase, reply)

    def _exchange(self, frame: bytes, deadline: float, phase: str) -> bytes | CallResult:
        """Send one request frame and wait for its reply, draining stdout/stderr meanwhile."""
        pending = self._send_some(memoryview(frame), phase)
        reply = Reply(self.limits.frame_bytes)
        if not pending and not isinstance(pending, CallResult):
            got = self._spin_receive(reply, phase)
            if got is not None:
                return got
        while not isinstance(pending, CallResult):
            wait_ms = (deadline - time.monotonic()) * 1000.0
            if wait_ms <= 0:
                return self._kill(_failure("timeout", self._timeout_message(phase)))
            for fd, _ in self._poll.poll(wait_ms):
                if fd == self._resp_r:
                    got = self._receive(reply, phase)
                    if got is not None:
                        if self._writing:  # a reply before the whole request went out
                            self._send_some(memoryview(b""), phase)
                        return got
                elif fd == self._req_w:
                    pending = self._send_some(pending, phase)
                    if isinstance(pending, CallResult):
                        return pending
                else:
                    self._drain_fd(fd)
        return pending

    def _spin_receive(self, reply: Reply, phase: str) -> bytes | CallResult | None:
        """Poll the reply pipe without sleeping for up to SPIN_S: a quick act() answers within
        microseconds, and a sleeping wait adds the scheduler's wake-up latency to every step."""
        end = time.perf_counter() + SPIN_S
        while time.perf_counter() < end:
            got = self._receive(reply, phase)
            if got is not None:
                return got
        return None

    def _send_some(self, pending: memoryview, phase: str) -> memoryview | CallResult:
        """Write what the pipe takes now; watch for POLLOUT while anything is left."""
        try:
            if pending:
                pending = pending[os.write(self._req_w, pending):]
        except BlockingIOError:
            pass
        except BrokenPipeError:
            return self._died(phase)
        if bool(pending) != self._writing:
            if pending:
                self._poll.register(self._req_w, select.POLLOUT)
            else:
                self._poll.unregister(self._req_w)
            self._writing = bool(pending)
        return pending

    def _receive(self, reply: Reply, phase: str) -> bytes | CallResult | None:
        try:
            chunk = os.read(self._resp_r, reply.want())
        except BlockingIOError:
            return None
        if not chunk:
            return self._died(phase)
        got = reply.feed(chunk)
        return self._kill(_failure("protocol_error", got)) if isinstance(got, str) else got

    def _interpret(self, phase: str, body: bytes) -> CallResult:
        try:
            reply = DECODER.decode(body.decode())
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            return self._kill(_failure("protocol_error", f"reply is not valid JSON: {exc}"[:500]))
        if not isinstance(reply, dict) or not isinstance(reply.get("ok"), bool):
            return self._kill(_failure("protocol_error", "reply is not an object with a boolean `ok`"))
        if reply["ok"]:
            return CallResult(ok=True, value=reply.get("value"))
        category = reply.get("category")
        if category not in WORKER_CATEGORIES[phase]:
            return self._kill(_failure("protocol_error", f"reply names category {category!r} for {phase}"))
        tb = reply.get("traceback")
        tb = tb[-TRACEBACK_CHARS:] if isinstance(tb, str) else None
        result = _failure(category, str(reply.get("message", ""))[:MESSAGE_CHARS], tb)
        return self._kill(result) if category in FATAL else result

    def _timeout_message(self, phase: str) -> str:
        if phase == "start":
            return f"start (import policy.py + Policy(...)) exceeded init_wall_s={self.limits.init_wall_s} s"
        return f"{phase}() did not return within the episode wall budget ({self.limits.episode_wall_s} s)"

    def _died(self, phase: str) -> CallResult:
        """The worker closed its reply pipe: classify the death (oom vs crash), then clean up."""
        proc = self._h.proc
        try:
            code = proc.wait(1.0)
        except subprocess.TimeoutExpired:
            code = None
        oom = self._h.cgroup is not None and self._h.cgroup.oom_killed()
        if oom:
            return self._kill(_failure("oom", f"the policy exceeded the memory limit of "
                                       f"{self.limits.memory_bytes} bytes during {phase}"))
        return self._kill(_failure("crashed", f"the policy process died during {phase} ({_describe(code)})"))

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
        _release(h)
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
