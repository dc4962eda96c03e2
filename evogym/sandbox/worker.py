"""The code that runs *inside* the policy sandbox (a script; stdlib only).

It never imports `evogym`: the sandbox binds only this file, `channel.py` beside it (its end
of the wire, stdlib only too: `isolation.WORKER_FILES`), the policy snapshot, the allowed
packages and the Python prefix. Order matters and is the security contract:

1. lower the rlimits it can (FSIZE, NOFILE, CORE; AS only when the host has no cgroup
   memory limit), cap BLAS threads;
2. install the seccomp filter (no socket, fork, exec, ptrace, mount, namespaces ...;
   threads still work) -- before any policy byte is imported;
3. only then import `policy.py`, check `Policy` is a class and construct it (or, for
   EvoPolicyGym main's ABI, find `make_policy`, called afresh at every episode's reset);
4. serve `reset` / `act` requests until the request pipe closes.

A pre-started sandbox (`evogym/sandbox/spare.py`) gets one `prepare` request between 2
and 3: it imports the trusted packages it names (numpy, scipy modules only; under the
same rlimits and filter, output discarded, failures ignored) and then blocks until the
start request, which may be minutes away. No policy byte has been read at that point.

The wire is a shared-memory channel (`channel.py`: its layout and this end; the host's end
is `evogym/sandbox/transport.py`). The worker is also made non-dumpable, and under
bubblewrap it is pid 1 of its namespace (`--as-pid-1`), so no other process is visible to
the policy.
"""
import errno
import marshal
import os
import resource
import signal
import sys
import time

# `python -I` puts no script folder on sys.path: the channel module is found beside this file
# (bound there in the sandbox), and the folder is taken off again before any policy byte is read.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from channel import (  # type: ignore[import-not-found]  # noqa: E402 - found through the line above, not as a package
    OP_ACT, OP_PREPARE, OP_START, RESP_BUSY_US, Channel)
del sys.path[0]

TRACEBACK_CHARS = 64 << 10
"""Longest traceback text sent back; the rest is cut (tracebacks of deep recursion are huge)."""

THREAD_ENV = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS")
"""BLAS pools read these at load; one thread keeps memory and pids within the sandbox limits."""

DENIED_SYSCALLS = (
    "socket", "socketpair", "fork", "vfork", "execve", "execveat", "ptrace",
    "process_vm_readv", "process_vm_writev", "mount", "umount2", "setns", "unshare",
    "pivot_root", "chroot", "kexec_load", "kexec_file_load", "bpf", "keyctl", "add_key",
    "request_key", "init_module", "finit_module", "delete_module", "perf_event_open",
    "userfaultfd", "open_by_handle_at", "name_to_handle_at", "reboot", "swapon", "swapoff",
    "sethostname", "setdomainname", "acct", "quotactl", "iopl", "ioperm", "personality",
    "io_uring_setup", "fsopen", "fsmount", "fspick", "open_tree", "move_mount",
    "mount_setattr", "kcmp", "lookup_dcookie", "syslog",
)
"""Answered with EPERM. `clone` is denied unless it creates a thread; `clone3` gets ENOSYS
so glibc falls back to `clone`, whose flags the filter can inspect."""

CLONE_THREAD = 0x00010000
SECCOMP_LIBS = {"c": "libc.so.6", "seccomp": "libseccomp.so.2"}
"""Sonames given to pyseccomp: `ctypes.util.find_library` would spawn `ldconfig` (and the
sandbox has no `/etc/ld.so.cache` for it)."""

PHASE_ERRORS = {1: "init_error", 2: "reset_error", 3: "act_error"}

PRELOADABLE = ("numpy", "scipy")
"""Top-level packages a `prepare` request may import: trusted code the policy could import
itself, and nothing that prints (a stale guess must not put text into a submit's stdout)."""
MAX_PRELOAD = 32


def set_rlimits(limits):
    """Lower the rlimits named in `limits` (soft = hard, so the policy cannot raise them)."""
    for name, value in limits.items():
        code = getattr(resource, "RLIMIT_" + name.upper())
        resource.setrlimit(code, (value, value))
    # Over RLIMIT_FSIZE a write must fail with EFBIG, not kill the worker with SIGXFSZ.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)


def install_seccomp(lib_dir):
    """Install the syscall filter; return a short status ("on" or why it is off)."""
    if lib_dir is None:
        return "off: host has no pyseccomp"
    import ctypes

    # pyseccomp only calls ctypes.util.find_library; the real module imports subprocess,
    # shutil and re (~25 ms of every sandbox start) and would spawn ldconfig.
    stub = type(sys)("ctypes.util")
    stub.find_library = SECCOMP_LIBS.get
    sys.modules["ctypes.util"], ctypes.util = stub, stub
    sys.path.insert(0, lib_dir)
    try:
        import pyseccomp as sc
    except (ImportError, OSError, RuntimeError) as exc:
        return f"off: {type(exc).__name__}: {exc}"
    finally:
        del sys.modules["ctypes.util"], ctypes.util
        sys.path.remove(lib_dir)
    filt = sc.SyscallFilter(defaction=sc.ALLOW)
    filt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
    for name in DENIED_SYSCALLS:
        try:
            filt.add_rule(sc.ERRNO(errno.EPERM), name)
        except (OSError, ValueError, RuntimeError):
            pass  # a syscall this kernel/arch does not have cannot be called either
    filt.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
    filt.add_rule(sc.ERRNO(errno.EPERM), "clone", sc.Arg(0, sc.MASKED_EQ, CLONE_THREAD, 0))
    filt.load()
    return "on"


def _tiny_json(obj):
    """JSON text of None, bool, int, str, dict and list values, without importing json (the
    start report: most policies never make the worker import it)."""
    if obj is None:
        return "null"
    t = type(obj)
    if t is bool:
        return "true" if obj else "false"
    if t is int:
        return str(obj)
    if t is str:
        return '"' + "".join(c if c >= " " and c not in '"\\' else "\\u%04x" % ord(c) for c in obj) + '"'
    if t is dict:
        return "{" + ",".join(_tiny_json(str(k)) + ":" + _tiny_json(v) for k, v in obj.items()) + "}"
    if t is list or t is tuple:
        return "[" + ",".join(_tiny_json(v) for v in obj) + "]"
    raise TypeError(f"{t.__name__} is not in the start report's vocabulary")


def failure(category, exc, skip_frames):
    """An error reply for `exc`, with the worker's own frames cut from the traceback."""
    tb = exc.__traceback__
    for _ in range(skip_frames):
        tb = tb.tb_next if tb is not None and tb.tb_next is not None else tb
    try:
        import traceback  # only failures pay for its import

        text = "".join(traceback.format_exception(type(exc), exc, tb))[-TRACEBACK_CHARS:]
    except MemoryError:
        text = None
    if isinstance(exc, MemoryError):
        category = "oom"
    message = f"{type(exc).__name__}: {exc}"[:2000]
    return {"category": category, "message": message, "traceback": text}


def load_policy(policy_dir, request):
    """Import policy.py and construct Policy; return (instance, None) or (None, error reply)."""
    sys.path.insert(0, policy_dir)
    stems = {n[:-3] for n in os.listdir(policy_dir) if n.endswith(".py")} | {"policy"}
    for stem in stems - set(sys.builtin_module_names):
        sys.modules.pop(stem, None)  # a helper must shadow any module the worker loaded
    try:
        import policy as module  # type: ignore[import-not-found]  # the snapshot's policy.py, on sys.path now
    except BaseException as exc:  # noqa: BLE001 - any import failure is the policy's verdict
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            raise
        return None, failure("import_error", exc, 1)
    cls = getattr(module, "Policy", None)
    make = getattr(module, "make_policy", None)
    if callable(make):  # EvoPolicyGym main's entrypoint (policy.py:make_policy) wins: its programs may
        return MadePolicy(make, request), None  # also define a `class Policy` of their own shape
    if not isinstance(cls, type):
        msg = f"policy.py must define class Policy or a function make_policy; found Policy = {type(cls).__name__}"
        return None, {"category": "missing_policy", "message": msg, "traceback": None}
    try:
        return cls(request["obs_space"], request["action_space"], request["env_meta"]), None
    except Exception as exc:  # noqa: BLE001
        return None, failure("init_error", exc, 1)


class PolicyContext:
    """What EvoPolicyGym main's `make_policy(context)` receives: the public, case-independent
    facts of one episode (never a seed of the environment). `policy_seed` is the episode's
    position in its submit (0, 1, ...): reproducible, and the same for every program."""

    __slots__ = ("observation_space", "action_space", "metadata", "environment_parameters", "policy_seed")

    def __init__(self, request, policy_seed):
        self.observation_space = request["obs_space"]
        self.action_space = request["action_space"]
        self.metadata = request["env_meta"]
        self.environment_parameters = {}
        self.policy_seed = policy_seed


class MadePolicy:
    """A `make_policy(context)` program behind our reset/act calls: upstream makes a fresh
    policy object for every episode, so `reset(i)` calls `make_policy` (its failure is the
    episode's `reset_error`) and `act` goes to the object it returned. Observations arrive as
    plain lists and numbers, upstream's carriers."""

    def __init__(self, make, request):
        self.make, self.request, self.policy = make, request, None

    def reset(self, episode_index):
        self.policy = None  # a failing make_policy must not leave the last episode's object acting
        self.policy = self.make(PolicyContext(self.request, episode_index))

    def act(self, observation):
        return self.policy.act(observation)


def _flush_output():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a policy that closed or overfilled its stdout loses that output only


def serve(channel, policy):
    """Answer reset/act requests until the host closes the request pipe."""
    act, reset, clock, ctl = policy.act, policy.reset, time.perf_counter, channel.ctl
    while True:
        op = channel.receive()
        if op is None:
            return
        t0 = clock()
        try:
            if op == OP_ACT:
                value = act(channel.value())
            else:
                reset(channel.value())
                value = None
            ctl[RESP_BUSY_US] = min(int((clock() - t0) * 1e6), 0xFFFFFFFF)  # the host's spin hint
        except Exception as exc:  # noqa: BLE001 - the policy's error is the verdict
            _flush_output()
            channel.reply_error(failure(PHASE_ERRORS.get(op, "act_error"), exc, 1))
            continue
        _flush_output()
        try:
            channel.reply_ok(value)
        except Exception as exc:  # noqa: BLE001 - encoding runs the policy's code (tolist, properties)
            channel.reply_error(failure("act_error", exc, 99))


def preload(names):
    """Import the named trusted modules; return (those that loaded, top-level names the
    imports added to sys.modules). A failure (e.g. the memory limit) leaves no partial
    module behind: the policy's own import then fails as it would have without it. The
    host starts cold instead when a snapshot file could shadow an added name."""
    first = set(sys.modules)
    import contextlib
    import importlib
    import io

    loaded = []
    for name in names[:MAX_PRELOAD] if isinstance(names, list) else ():
        if not isinstance(name, str) or name.split(".")[0] not in PRELOADABLE \
                or not all(part.isidentifier() for part in name.split(".")):
            continue
        before = set(sys.modules)
        sink = io.StringIO()
        try:
            with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
                importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a module that cannot load here is simply not preloaded
            for added in set(sys.modules) - before:
                del sys.modules[added]
            continue
        loaded.append(name)
    return loaded, sorted({m.split(".")[0] for m in set(sys.modules) - first})


def set_non_dumpable():
    """PR_SET_DUMPABLE 0: no core dumps, and /proc/<pid>/mem, maps, environ of this process
    are closed to every other process of the same user (the policy itself still reads its own)."""
    import ctypes

    try:
        return ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0) == 0  # PR_SET_DUMPABLE
    except (OSError, AttributeError):
        return False


def main(config):
    """Entry point; `config` is the JSON the host puts in argv (no secrets, only limits and fds)."""
    for name in THREAD_ENV:
        os.environ[name] = "1"
    set_rlimits(config["rlimits"])
    dumpable = not set_non_dumpable()
    seccomp = install_seccomp(config.get("seccomp_lib"))
    sys.path.insert(0, config["site_dir"])
    channel = Channel(config["memfd"], config["req_fd"], config["resp_fd"], config["frame_bytes"],
                      config["spin_s"], config["ordered_stores"])
    op = channel.receive()
    if op == OP_PREPARE:
        loaded, added = preload(channel.value())
        channel.reply_text(_tiny_json({"preloaded": loaded, "modules": added}).encode())
        channel.announce()
        op = channel.receive(block=True)
    if op != OP_START:
        raise SystemExit("expected a start request")
    request = channel.value()
    policy_dir = request["policy_dir"]  # in the request: a pre-started sandbox learns it only now
    os.chdir(policy_dir)
    policy, error = load_policy(policy_dir, request)
    _flush_output()
    if error is not None:
        channel.reply_error(error)
        return
    report = {"seccomp": seccomp, "rlimits": config["rlimits"], "pid": os.getpid(), "dumpable": dumpable}
    channel.reply_text(_tiny_json(report).encode("utf-8", "replace"))
    serve(channel, policy)


if __name__ == "__main__":
    main(marshal.loads(bytes.fromhex(sys.argv[1])))
