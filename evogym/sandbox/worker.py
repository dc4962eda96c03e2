"""The code that runs *inside* the policy sandbox (a script; stdlib only).

It never imports `evogym`: the sandbox binds only this file, the policy snapshot, the
allowed packages and the Python prefix. Order matters and is the security contract:

1. lower the rlimits it can (FSIZE, NOFILE, CORE; AS only when the host has no cgroup
   memory limit), cap BLAS threads;
2. install the seccomp filter (no socket, fork, exec, ptrace, mount, namespaces ...;
   threads still work) -- before any policy byte is imported;
3. only then import `policy.py`, check `Policy` is a class and construct it;
4. serve `reset` / `act` requests until the request pipe closes.

A pre-started sandbox (`evogym/sandbox/spare.py`) gets one `prepare` request between 2
and 3: it imports the trusted packages it names (numpy, scipy modules only; under the
same rlimits and filter, output discarded, failures ignored) and then blocks until the
start request, which may be minutes away. No policy byte has been read at that point.

The wire is a shared-memory channel (header words + payload, see
`evogym/sandbox/transport.py`, whose numbers this file repeats because it cannot import
it). Requests: start (JSON: spaces and env_meta), reset (an int), act (the observation,
raw buffers or JSON). Replies: a value (an int, a raw numeric buffer, or JSON) or an
error `{"category", "message", "traceback"}`. The policy sees observations exactly as the
JSON encoding gives them: nested lists, non-finite floats as "nan"/"inf"/"-inf". The worker
is also made non-dumpable, and under bubblewrap it is pid 1 of its namespace (`--as-pid-1`),
so no other process is visible to the policy.
"""
import errno
import marshal
import os
import resource
import signal
import struct
import sys
import time

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


# Wire layout: the same numbers as evogym/sandbox/transport.py (a test compares them).
CONTROL_BYTES = 4096
REQ_SEQ, REQ_OP, REQ_KIND, REQ_LEN, REQ_FMT, REQ_NDIM, REQ_AUX, REQ_LAYOUT = 0, 1, 2, 3, 4, 5, 6, 7
REQ_SHAPE = 8
HOST_WAITING = 32
RESP_SEQ, RESP_STATUS, RESP_KIND, RESP_LEN, RESP_FMT, RESP_NDIM, RESP_BUSY_US = 64, 65, 66, 67, 68, 69, 70
RESP_SHAPE = 72
WORKER_WAITING = 96
MAX_NDIM = 8
OP_START, OP_RESET, OP_ACT, OP_PREPARE = 1, 2, 3, 4
KIND_NONE, KIND_JSON, KIND_INT, KIND_ARRAY, KIND_DICT, KIND_MARSHAL = 0, 1, 2, 3, 4, 5
STATUS_OK, STATUS_ERROR = 0, 1
FORMATS = frozenset("fdbBhHiIlLqQ?")
WAIT_SLICE_MS = 2
"""Longest single poll() while blocked; bounds the cost of a lost wake-up."""
SPIN_MIN_S = 2e-6
PREEMPTED_S = 30e-6
MAX_BACKOFF = 1024
LOAD_CHECK_S = 0.02
"""How often the worker re-reads the machine's runnable-task count (a few µs per read)."""
INT64 = (-(1 << 63), 1 << 63)


class Channel:
    """The worker's half of the shared-memory channel (see transport.py for the protocol).

    `spin_s` is the longest busy-wait for the next request before blocking on the wake
    pipe (the budget is learned as the host's `SpinBudget` does); 0 always blocks. `ordered` says whether stores are seen in order (x86), else
    every message is followed by a wake byte and waits always block in the pipe.
    """

    def __init__(self, memfd, req_fd, resp_fd, frame_bytes, spin_s, ordered):
        import mmap
        import select

        self.mm = mmap.mmap(memfd, CONTROL_BYTES + 2 * frame_bytes)
        os.close(memfd)
        whole = memoryview(self.mm)
        self.ctl = whole[:CONTROL_BYTES].cast("I")
        self.req = whole[CONTROL_BYTES:CONTROL_BYTES + frame_bytes]
        self.resp = whole[CONTROL_BYTES + frame_bytes:]
        self.req_fd, self.resp_fd = req_fd, resp_fd
        self.frame_bytes = frame_bytes
        self.spin_max = self.budget = spin_s if ordered else 0.0
        self.skip, self.backoff = 0, 1
        self.cores = len(os.sched_getaffinity(0))
        self.load_checked, self.spare = -LOAD_CHECK_S, True
        self.ordered = ordered
        self.seq = 0
        self.layout, self.view, self.flat, self.floats = None, None, None, False  # see value()
        self.poller = select.poll()
        self.poller.register(req_fd, select.POLLIN)

    # -- requests ----------------------------------------------------------------------

    def receive(self, block=False):
        """Block until the next request; return its op, or None when the host closed.

        `block`: wait in the pipe without time slices (the host wakes every start request,
        so an idle pre-started sandbox sleeps instead of polling every 2 ms)."""
        ctl, last = self.ctl, self.seq
        if block:
            while ctl[REQ_SEQ] == last:
                self.poller.poll()
                if not self._drain():
                    return None
        elif ctl[REQ_SEQ] == last:
            t0 = time.perf_counter()
            if not self._spin(last, t0):
                while True:
                    ctl[WORKER_WAITING] = 1
                    if ctl[REQ_SEQ] != last:
                        break
                    if self.poller.poll(WAIT_SLICE_MS) and not self._drain():
                        return None
                    if ctl[REQ_SEQ] != last:
                        break
                ctl[WORKER_WAITING] = 0
                self._learn(time.perf_counter() - t0)
        self.seq = ctl[REQ_SEQ]
        return ctl[REQ_OP]

    def _spin(self, last, t0):
        budget = self.budget
        if self.skip:
            self.skip -= 1
            budget = 0.0
        if not budget or not self._spare_core(t0):
            return False
        ctl, clock = self.ctl, time.perf_counter
        end, prev = t0 + budget, t0
        while True:
            now = clock()
            if ctl[REQ_SEQ] != last:
                if self.backoff > 1:
                    self.backoff //= 2
                return True
            if now - prev > PREEMPTED_S:  # lost the core: spinning takes CPU from the host
                self.skip = self.backoff
                self.backoff = min(2 * self.backoff, MAX_BACKOFF)
                return False
            if now >= end:
                return False
            prev = now

    def _spare_core(self, now):
        """Whether the machine has a core for a spinning worker: at most as many runnable
        tasks as usable cores (`/proc/loadavg`, read at most every LOAD_CHECK_S). On a full
        machine a spinning worker is one more busy process and its host's next request
        waits for the scheduler; a sleeping one is woken ahead of busy ones."""
        if now >= self.load_checked + LOAD_CHECK_S:
            self.load_checked = now
            try:
                with open("/proc/loadavg", "rb") as f:
                    running = int(f.read().split()[3].split(b"/")[0])
                self.spare = running <= self.cores
            except (OSError, ValueError, IndexError):
                self.spare = True  # no load figure: the preemption check alone decides
        return self.spare

    def _learn(self, waited):
        """Grow the budget to catch waits under half the maximum, else halve it (the host's
        SpinBudget rule). The worker also stops spinning for 1, 2, 4 ... waits whenever a
        spin loses its core (`_spin`): on a loaded machine a spinning worker is one more
        busy process, while a sleeping one is woken ahead of busy ones."""
        if not self.spin_max:
            return
        if waited < self.spin_max / 2:
            self.budget = min(self.spin_max, max(self.budget, 2 * waited))
        else:
            self.budget = max(SPIN_MIN_S, self.budget / 2)

    def _drain(self):
        """Consume wake bytes; False at EOF (the host closed the request pipe)."""
        try:
            return bool(os.read(self.req_fd, 4096))
        except BlockingIOError:
            return True

    def value(self):
        """The request's value as the policy sees it (nested lists, as JSON would give)."""
        ctl = self.ctl
        kind, size = ctl[REQ_KIND], ctl[REQ_LEN]
        if kind == KIND_ARRAY:
            if ctl[REQ_LAYOUT] != self.layout:  # a new dtype or shape: describe it once
                self.layout = ctl[REQ_LAYOUT]
                fmt, shape = chr(ctl[REQ_FMT]), ctl[REQ_SHAPE:REQ_SHAPE + ctl[REQ_NDIM]].tolist()
                self.view = self.req[:_prod(shape) * _ITEMSIZE[fmt]].cast(fmt, shape)
                self.flat = self.view if len(shape) == 1 else self.view.cast("B").cast(fmt)
                self.floats = fmt in "fd"
            value = self.view.tolist()
            if self.floats:  # non-finite floats cross as "nan"/"inf"/"-inf", as in JSON
                total = sum(value) if self.flat is self.view else sum(self.flat)
                if total - total != 0.0:
                    value = _finite(value)
            return value
        if kind == KIND_INT:
            return int.from_bytes(self.req[:8], "little", signed=True)
        if kind == KIND_MARSHAL:
            return marshal.loads(self.req[:size])
        if kind == KIND_DICT:
            skeleton = marshal.loads(self.req[:ctl[REQ_AUX]])
            base = (ctl[REQ_AUX] + 7) & ~7
            values = skeleton["values"]
            for index, fmt, shape, offset in skeleton["arrays"]:
                values[index] = self._array(base + offset, fmt, shape)
            return dict(zip(skeleton["keys"], values))
        return None

    def _array(self, offset, fmt, shape):
        size = _prod(shape) * _ITEMSIZE[fmt]
        view = self.req[offset:offset + size]
        value = view.cast(fmt, shape).tolist()
        if fmt in "fd":  # non-finite floats cross as "nan"/"inf"/"-inf", as in JSON
            total = sum(value) if len(shape) == 1 else sum(view.cast(fmt))
            if total - total != 0.0:
                value = _finite(value)
        return value

    # -- replies -----------------------------------------------------------------------

    def reply_ok(self, value):
        """Answer with `value`: raw where it is an int or a numeric array, else JSON."""
        ctl = self.ctl
        kind = self._put_value(value)
        if kind is None:
            body = encode_value(value)
            if len(body) > self.frame_bytes:
                return self.reply_error({
                    "category": "act_error", "traceback": None,
                    "message": f"act() returned a value of {len(body)} bytes as JSON; the limit is "
                               f"{self.frame_bytes}"})
            self.resp[:len(body)] = body
            ctl[RESP_LEN] = len(body)
            kind = KIND_JSON
        ctl[RESP_STATUS] = STATUS_OK
        ctl[RESP_KIND] = kind
        self._publish()

    def reply_text(self, body):
        """Answer with `body`, ready-made UTF-8 JSON (the start report, see `_tiny_json`)."""
        self.resp[:len(body)] = body
        ctl = self.ctl
        ctl[RESP_LEN] = len(body)
        ctl[RESP_STATUS] = STATUS_OK
        ctl[RESP_KIND] = KIND_JSON
        self._publish()

    def reply_error(self, error):
        body = _json().dumps(error).encode()[:self.frame_bytes]
        self.resp[:len(body)] = body
        ctl = self.ctl
        ctl[RESP_LEN] = len(body)
        ctl[RESP_STATUS] = STATUS_ERROR
        ctl[RESP_KIND] = KIND_JSON
        self._publish()

    def _publish(self):
        ctl = self.ctl
        ctl[RESP_SEQ] = self.seq  # last: the host reads the payload only after seeing it
        if not self.ordered or ctl[HOST_WAITING]:
            try:
                os.write(self.resp_fd, b"\0")
            except BlockingIOError:
                pass  # unread wake bytes are pending: the host wakes anyway

    def announce(self):
        """A wake byte whatever the host's waiting word says: the prepare reply, which the host
        waits for in poll() alone (no spinning, no time slices)."""
        try:
            os.write(self.resp_fd, b"\0")
        except BlockingIOError:
            pass

    def _put_value(self, value):
        """Write `value` raw when it has a raw form; its kind, or None for JSON."""
        t = type(value)
        if value is None:
            self.ctl[RESP_LEN] = 0
            return KIND_NONE
        if t is int:
            if not INT64[0] <= value < INT64[1]:
                return None
            self.resp[:8] = value.to_bytes(8, "little", signed=True)
            self.ctl[RESP_LEN] = 8
            return KIND_INT
        if t is float:
            return self._put_floats([value], ())
        if t is list or t is tuple:
            n = len(value)
            if 0 < n <= self.frame_bytes // 8:
                if all(type(x) is float for x in value):
                    return self._put_floats(value, (n,))
            return None
        if hasattr(value, "__array_interface__"):  # numpy arrays and scalars; numpy is not imported here
            return self._put_buffer(value)
        return None

    def _put_floats(self, values, shape):
        struct.pack_into("%dd" % len(values), self.resp, 0, *values)
        return self._describe("d", shape, 8 * len(values))

    def _put_buffer(self, value):
        try:
            view = memoryview(value)
        except TypeError:
            return None
        if view.format not in FORMATS or not view.c_contiguous or view.ndim > MAX_NDIM \
                or 0 in view.shape or view.nbytes > self.frame_bytes:
            return None
        self.resp[:view.nbytes] = view.cast("B")
        return self._describe(view.format, view.shape, view.nbytes)

    def _describe(self, fmt, shape, nbytes):
        ctl = self.ctl
        ctl[RESP_FMT] = ord(fmt)
        ctl[RESP_NDIM] = len(shape)
        for i, dim in enumerate(shape):
            ctl[RESP_SHAPE + i] = dim
        ctl[RESP_LEN] = nbytes
        return KIND_ARRAY


_ITEMSIZE = {f: struct.calcsize(f) for f in FORMATS}


def _prod(shape):
    n = 1
    for dim in shape:
        n *= dim
    return n


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


_ENCODER = None
"""Built once, at the first JSON answer: `json.dumps(..., default=...)` would build a new
encoder on every act()."""


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


def _json():
    """The json module, imported at the first answer that needs it: with `re` it is most of
    the worker's start-up imports, and quick policies answer raw."""
    import json

    return json


def encode_value(value):
    """UTF-8 JSON of an action; non-finite floats become "nan" / "inf" / "-inf"."""
    global _ENCODER
    if _ENCODER is None:
        _ENCODER = _json().JSONEncoder(separators=(",", ":"), allow_nan=False, default=_tolist)
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
    return {"category": category, "message": message, "traceback": text}


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
        return None, {"category": "missing_policy", "message": msg, "traceback": None}
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
