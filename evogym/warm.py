"""Warm processes for runs: a template that forks a fresh host per run, and fresh hidden-evaluation workers.

A cold `evogym serve` pays a Python interpreter and the imports of gymnasium, MuJoCo and the
host before it can answer (1.2-1.3 CPU s; 1.4-1.8 s of wall time per run at load 4-7 on the
2-core project machine), and its hidden evaluation started a forkserver pool whose workers
import all of it again (a 4-program pusher5 validation took 11-12 s in a pool vs 6-7.5 s
in-process at load ~7; `experiments/results/evolve_profile.md`). `make evolve` pays both once
per run, 135 times. A `HostLauncher` instead starts one *template* process, which imports the
host's modules once, probes the sandbox once, and on the first run of an env builds and
closes one env of it (what every host process does once anyway, `envs.make_env`). After
that it only forks:

- `HostLauncher.spawn(argv)`: a fresh `evogym serve` process for each run, in its own
  session, with the caller's stdout pipe and stderr file;
- on that host's request, fresh hidden-evaluation workers (`evogym.workers`), each a
  process that runs the `rollout.run_episodes` jobs its host sends it, and nothing else.

Isolation: the template never creates a host, never reads a pool and never runs a policy:
it imports and forks, so each process it forks starts from the same state as the one
before, and no state of one run can reach another run through it. It holds no secret: a
spawn request carries the public command line (env, run dir, pool seed), never a seed list;
jobs travel from a host to its own workers over a socket pair the template only hands over.
Every host has its own channel to the template; a worker is bound to the host that asked for
it and is SIGKILLed when that host's channel closes (the host exited or was killed). The
template exits when the launcher's end of its control socket closes (the process that started
it closed it or died); workers die with the template (PR_SET_PDEATHSIG). Every socket here is
close-on-exec, so nothing started with `exec` (the sandboxed policy, the episode formatter)
inherits one.
"""
from __future__ import annotations

import atexit
import ctypes
import os
import pickle
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from pathlib import Path

from evogym import workers

PRELOAD = ("evogym.cli", "evogym.host", "evogym.server", "evogym.progress", "evogym.finalize",
           "evogym.rollout", "evogym.judge", "evogym.recording", "evogym.feedback", "evogym.code_metrics")
"""Modules `evogym serve` imports before it answers; the template imports them once."""
MESSAGE_BYTES = 1 << 16
"""Largest spawn or worker request (a pickled command line; requests are never larger)."""
_EXIT = struct.Struct("<q")


# ----- the caller's side ------------------------------------------------------------------------------
class WarmHost:
    """A host process forked by the template: the parts of `subprocess.Popen` the runner uses.

    `pid` is also its process group (it runs in its own session); `stdout` is a text stream;
    `wait`/`poll` report the exit status the template observed (`returncode`, negative for a
    signal, as Popen's). If the template itself is gone, the host is waited for by its pid.
    """

    def __init__(self, pid: int, stdout, status: socket.socket, args: list[str]) -> None:
        self.pid, self.stdout, self._status, self.args = pid, stdout, status, args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and select.select([self._status], [], [], 0)[0]:
            self._collect()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is not None:
            return self.returncode
        if not select.select([self._status], [], [], timeout)[0]:  # only with a timeout: select blocks
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self._collect()

    def _collect(self) -> int:
        data = self._status.recv(_EXIT.size)
        if len(data) == _EXIT.size:
            self.returncode = code = int(_EXIT.unpack(data)[0])
        else:  # the template died before the host: wait for the host by its pid
            self.returncode = code = _wait_foreign(self.pid)
        self._status.close()
        self.stdout.close()
        return code


def _wait_foreign(pid: int) -> int:
    """Wait for a process that is not our child (its exit status is unknown: 1)."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return 1
    try:
        select.select([fd], [], [])
    finally:
        os.close(fd)
    return 1


class HostLauncher:
    """One warm template process; `spawn` forks a fresh `evogym serve` from it per run. Thread-safe."""

    _shared: dict[int, "HostLauncher"] = {}

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        self._ctrl = ours
        try:
            self._proc = subprocess.Popen([sys.executable, "-m", "evogym.warm", str(theirs.fileno())],
                                          pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL,
                                          stdout=subprocess.DEVNULL, start_new_session=True, env=_source_env())
        finally:
            theirs.close()

    @classmethod
    def shared(cls) -> "HostLauncher":
        """This process's launcher (started on first use; a forked child starts its own)."""
        pid = os.getpid()
        launcher = cls._shared.get(pid)
        if launcher is None or launcher._proc.poll() is not None:
            launcher = cls._shared[pid] = cls()
            atexit.register(launcher.close)
        return launcher

    def spawn(self, argv: list[str], stderr, env_id: str | None = None) -> WarmHost:
        """Fork `evogym ARGV` (e.g. `serve --env ...`) from the template; stdout is a pipe, stderr `stderr`.

        `env_id`: the env the host will step; the template imports and warms it before forking
        (once per env), so the host does not. Raises OSError when the template is gone.
        """
        read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
        status, status_theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            request = pickle.dumps({"argv": list(argv), "cwd": os.getcwd(), "env_id": env_id})
            with self._lock:
                socket.send_fds(self._ctrl, [request], [write_fd, stderr.fileno(), status_theirs.fileno()])
            reply = status.recv(_EXIT.size)
        except BaseException:
            os.close(read_fd)
            status.close()
            raise
        finally:
            os.close(write_fd)
            status_theirs.close()
        if len(reply) != _EXIT.size:
            os.close(read_fd)
            status.close()
            raise OSError("the warm host template did not start the host (it exited)")
        return WarmHost(_EXIT.unpack(reply)[0], os.fdopen(read_fd, "r"), status, ["evogym", *argv])

    def close(self) -> None:
        """Stop the template (hosts it forked keep running until they finish); idempotent."""
        self._ctrl.close()
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()


def _source_env() -> dict[str, str]:
    """The environment, with this evogym's source first on PYTHONPATH (as the episode formatter does)."""
    source = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")]))}


# ----- the template process ------------------------------------------------------------------------------
def _die_with_parent() -> None:
    """SIGKILL this process when its parent dies (Linux prctl), and now if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class _Template:
    """The template's state: its control socket, hosts (pid -> status socket), their channels and workers."""

    def __init__(self, ctrl: socket.socket) -> None:
        self.ctrl = ctrl
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.status: dict[int, socket.socket] = {}
        self.channels: dict[socket.socket, int] = {}
        self.workers: dict[int, int] = {}
        self.warmed: set[str] = set()

    def serve(self) -> None:
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        while True:
            try:
                watched: list[socket.socket | int] = [self.ctrl, self.wake_r, *self.channels]
                ready = select.select(watched, [], [])[0]
            except InterruptedError:
                continue
            if self.wake_r in ready:
                self._drain_wake()
                self._reap()
            if self.ctrl in ready and not self._on_request():
                return
            for chan in ready:
                if chan in self.channels:
                    self._on_channel(chan)

    def _drain_wake(self) -> None:
        try:
            while os.read(self.wake_r, 4096):
                pass
        except BlockingIOError:
            pass

    def _reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.workers.pop(pid, None)
            sock = self.status.pop(pid, None)
            if sock is not None:
                try:
                    sock.send(_EXIT.pack(os.waitstatus_to_exitcode(status)))
                except OSError:  # the caller stopped waiting
                    pass
                sock.close()

    def _on_request(self) -> bool:
        msg, fds, _, _ = socket.recv_fds(self.ctrl, MESSAGE_BYTES, 3, socket.MSG_CMSG_CLOEXEC)
        if not msg:
            return False  # the launcher closed: stop (hosts already forked run on)
        if len(fds) != 3:  # not a spawn request: refuse it, keep serving
            for fd in fds:
                os.close(fd)
            return True
        request = pickle.loads(msg)
        stdout_fd, stderr_fd, status_fd = fds
        status = socket.socket(fileno=status_fd)
        self._warm(request.get("env_id"))
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        pid = os.fork()
        if pid == 0:
            self._close_all(ours, status)
            os._exit(_host_child(request, stdout_fd, stderr_fd, theirs))
        os.close(stdout_fd)
        os.close(stderr_fd)
        theirs.close()
        self.status[pid] = status
        self.channels[ours] = pid
        status.send(_EXIT.pack(pid))
        return True

    def _on_channel(self, chan: socket.socket) -> None:
        host = self.channels[chan]
        try:
            msg, fds, _, _ = socket.recv_fds(chan, MESSAGE_BYTES, 1, socket.MSG_CMSG_CLOEXEC)
        except OSError:
            msg, fds = b"", []
        if not msg:  # the host is gone: so are its workers
            del self.channels[chan]
            chan.close()
            for pid, owner in list(self.workers.items()):
                if owner == host:
                    _kill(pid)
            return
        if len(fds) != 1:  # not a worker request: refuse it, keep serving
            for fd in fds:
                os.close(fd)
            return
        job_sock = socket.socket(fileno=fds[0])
        pid = os.fork()
        if pid == 0:
            self._close_all()
            os._exit(_worker_child(job_sock))
        job_sock.close()
        self.workers[pid] = host

    def _warm(self, env_id: str | None) -> None:
        """Import and warm an env once, as every host process does on its own otherwise: `envs.make_env`
        (imports, one throwaway episode step) and `envs.env_meta` (its public `/info` schemas, from
        fixed-seed samples of the spaces). Both are functions of the env id alone, never of a pool."""
        if not env_id or env_id in self.warmed:
            return
        self.warmed.add(env_id)
        try:
            from evogym import envs
            spec = envs.resolve(env_id)
            envs.make_env(spec).close()
            envs.env_meta(spec)
        except Exception:  # noqa: BLE001 - the host reports an env that cannot be built, with its own error
            pass

    def _close_all(self, *more: socket.socket) -> None:
        """In a forked child: drop the template's signal set-up, its control socket and every
        other host's status and channel sockets (plus `more`), so a child holds only its own."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.close(self.wake_r)
        os.close(self.wake_w)
        self.ctrl.close()
        for sock in [*self.status.values(), *self.channels, *more]:
            sock.close()


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _exit_code(code) -> int:
    if code is None:
        return 0
    return code if isinstance(code, int) else 1


def _finish(code: int) -> int:
    """What interpreter exit does for a program: join non-daemon threads, run atexit, flush."""
    import atexit as _atexit
    try:
        threading._shutdown()  # type: ignore[attr-defined]  # private, as multiprocessing calls it at a child's end
    finally:
        _atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
    return code


def _host_child(request: dict, stdout_fd: int, stderr_fd: int, channel: socket.socket) -> int:
    """A forked host: its own session, the caller's stdout/stderr, then `evogym ARGV` as `main` runs it."""
    code = 1
    try:
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDONLY)
        os.dup2(devnull, 0)
        os.dup2(stdout_fd, 1)
        os.dup2(stderr_fd, 2)
        for fd in (devnull, stdout_fd, stderr_fd):
            os.close(fd)
        os.chdir(request["cwd"])
        workers.bind(channel)
        from evogym.cli import main
        sys.argv = ["evogym", *request["argv"]]
        code = _exit_code(main(request["argv"]))
    except SystemExit as exc:
        code = _exit_code(exc.code)
    except BaseException:  # noqa: BLE001 - a host fault is reported on its stderr, as a cold host's would be
        import traceback
        traceback.print_exc()
    return _finish(code)


def _worker_child(sock: socket.socket) -> int:
    """A hidden-evaluation worker: run each job its host sends until the host closes the socket."""
    _die_with_parent()
    return workers.serve(sock)


def _template_main(fd: int) -> None:
    ctrl = socket.socket(fileno=fd)
    ctrl.set_inheritable(False)
    import importlib
    for name in PRELOAD:
        importlib.import_module(name)
    from evogym import evalcache, sandbox
    sandbox.probe_isolation()  # probed once here, inherited by every host
    evalcache.environment_digest()  # the source and package digest of every evaluation-cache key
    _Template(ctrl).serve()


if __name__ == "__main__":  # run the template from the imported module: its hosts see one `evogym.warm`
    from evogym.warm import _template_main as main
    main(int(sys.argv[1]))
