"""The code that runs *inside* the policy sandbox (a script; stdlib only).

It never imports `evogym`: the sandbox binds only this file, the policy snapshot, the
allowed packages and the Python prefix. Order matters and is the security contract:

1. lower the rlimits it can (FSIZE, NOFILE, CORE; AS only when the host has no cgroup
   memory limit), cap BLAS threads;
2. install the seccomp filter (no socket, fork, exec, ptrace, mount, namespaces ...;
   threads still work) -- before any policy byte is imported;
3. only then import `policy.py`, check `Policy` is a class and construct it;
4. serve `reset` / `act` requests until the request pipe closes.

Frames on the two dedicated pipes are a 4-byte big-endian length followed by UTF-8 JSON.
Requests: `{"op":"start",...}`, `{"op":"reset","episode_index":i}`, `{"op":"act","obs":x}`.
Replies: `{"ok":true,"value":v}` or `{"ok":false,"category":c,"message":m,"traceback":t}`.
Non-finite floats in an action cross as the strings "nan", "inf", "-inf" (the same encoding
observations use), so the host's action coercion flags them invalid instead of stepping them.
"""
import errno
import json
import os
import resource
import signal
import sys

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

READ_CHUNK = 64 << 10
"""One read usually takes a whole request (header + body): one syscall per request."""

PHASE_ERRORS = {"start": "init_error", "reset": "reset_error", "act": "act_error"}


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


class Channel:
    """Blocking frame I/O on the two protocol pipes."""

    def __init__(self, req_fd, resp_fd, frame_bytes):
        self.req_fd = req_fd
        self.resp_fd = resp_fd
        self.frame_bytes = frame_bytes
        self.buffer = bytearray()

    def _fill(self, n):
        """Read until `n` bytes are buffered; False at end of input."""
        while len(self.buffer) < n:
            chunk = os.read(self.req_fd, max(n - len(self.buffer), READ_CHUNK))
            if not chunk:
                return False
            self.buffer += chunk
        return True

    def receive(self):
        """The next request as a dict, or None when the host closed the pipe."""
        if not self._fill(4):
            return None
        size = int.from_bytes(self.buffer[:4], "big")
        if size > self.frame_bytes:
            raise SystemExit(f"request frame of {size} bytes exceeds {self.frame_bytes}")
        if not self._fill(4 + size):
            return None
        body = bytes(self.buffer[4:4 + size])
        del self.buffer[:4 + size]
        return json.loads(body)

    def send(self, payload):
        view = memoryview(len(payload).to_bytes(4, "big") + payload)
        while view:
            view = view[os.write(self.resp_fd, view):]


def _tolist(obj):
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return obj.tolist()
    raise TypeError(f"act() returned a {type(obj).__name__}, which is not JSON-encodable")


def _finite(x):
    """`x` with non-finite floats replaced by their string names (numpy converted first)."""
    if isinstance(x, float):
        return x if x == x and x not in (float("inf"), float("-inf")) else repr(x)
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if hasattr(x, "tolist") and not isinstance(x, (int, str, bool)):
        return _finite(x.tolist())
    return x


_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=_tolist)
"""Built once: `json.dumps(..., default=...)` would build a new encoder on every act()."""


def encode_value(value):
    """UTF-8 JSON of an action; non-finite floats become "nan" / "inf" / "-inf"."""
    try:
        text = _ENCODER.encode(value)
    except ValueError as exc:
        if "Circular" in str(exc):
            raise
        text = _ENCODER.encode(_finite(value))
    return text.encode()


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
    return {"ok": False, "category": category, "message": message, "traceback": text}


def load_policy(policy_dir, request):
    """Import policy.py and construct Policy; return (instance, None) or (None, error reply)."""
    sys.path.insert(0, policy_dir)
    stems = {n[:-3] for n in os.listdir(policy_dir) if n.endswith(".py")} | {"policy"}
    for stem in stems - set(sys.builtin_module_names):
        sys.modules.pop(stem, None)  # a helper must shadow any module the worker loaded
    try:
        import policy as module
    except BaseException as exc:  # noqa: BLE001 - any import failure is the policy's verdict
        if isinstance(exc, (SystemExit, KeyboardInterrupt)):
            raise
        return None, failure("import_error", exc, 1)
    cls = getattr(module, "Policy", None)
    if not isinstance(cls, type):
        msg = f"policy.py must define class Policy; found {type(cls).__name__}"
        return None, {"ok": False, "category": "missing_policy", "message": msg, "traceback": None}
    try:
        return cls(request["obs_space"], request["action_space"], request["env_meta"]), None
    except Exception as exc:  # noqa: BLE001
        return None, failure("init_error", exc, 1)


def _flush_output():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass  # a policy that closed or overfilled its stdout loses that output only


def serve(channel, policy):
    """Answer reset/act requests until the host closes the request pipe."""
    ok_prefix = b'{"ok":true,"value":'
    while True:
        request = channel.receive()
        if request is None:
            return
        op = request.get("op")
        try:
            if op == "act":
                value = policy.act(request["obs"])
            else:
                policy.reset(request["episode_index"])
                value = None
        except Exception as exc:  # noqa: BLE001 - the policy's error is the verdict
            reply = json.dumps(failure(PHASE_ERRORS.get(op, "act_error"), exc, 1)).encode()
        else:
            reply = _encode_reply(value, channel.frame_bytes, ok_prefix)
        _flush_output()
        channel.send(reply)


def _encode_reply(value, frame_bytes, ok_prefix):
    try:
        body = ok_prefix + encode_value(value) + b"}"
    except (TypeError, ValueError, RecursionError) as exc:
        return json.dumps(failure("act_error", exc, 99)).encode()
    if len(body) > frame_bytes:
        msg = f"act() returned a value of {len(body)} bytes as JSON; the limit is {frame_bytes}"
        return json.dumps({"ok": False, "category": "act_error", "message": msg, "traceback": None}).encode()
    return body


def main(config):
    """Entry point; `config` is the JSON the host puts in argv (no secrets, only limits and fds)."""
    for name in THREAD_ENV:
        os.environ[name] = "1"
    set_rlimits(config["rlimits"])
    seccomp = install_seccomp(config.get("seccomp_lib"))
    sys.path.insert(0, config["site_dir"])
    channel = Channel(config["req_fd"], config["resp_fd"], config["frame_bytes"])
    request = channel.receive()
    if request is None or request.get("op") != "start":
        raise SystemExit("expected a start request")
    os.chdir(config["policy_dir"])
    policy, error = load_policy(config["policy_dir"], request)
    _flush_output()
    if error is not None:
        channel.send(json.dumps(error).encode())
        return
    report = {"seccomp": seccomp, "rlimits": config["rlimits"], "pid": os.getpid()}
    channel.send(json.dumps({"ok": True, "value": report}).encode())
    serve(channel, policy)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
