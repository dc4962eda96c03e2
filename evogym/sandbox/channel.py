"""The shared-memory channel: its layout (both ends read it) and the worker's end. Stdlib only.

This module runs *inside* the policy sandbox: the sandbox binds it beside `worker.py`
(`isolation.WORKER_FILES`), and the worker imports it before any policy byte is read. It
imports nothing but the standard library and never `evogym`. The host's end
(`transport.py`, with numpy) takes the same layout from here, so the two ends cannot drift.

The wire: one sealed memfd holds a control page (32-bit words, indexes below) and two
payload areas (request, reply); two pipes carry only wake-up bytes (`transport.py` has the
protocol). Requests: start (spaces and env_meta), reset (an int), act (the observation, raw
buffers or marshal). Replies: a value (an int, a raw numeric buffer, or JSON) or an error
`{"category", "message", "traceback"}`. The policy sees observations exactly as the JSON
encoding gives them: nested lists, non-finite floats as "nan"/"inf"/"-inf".
"""
import marshal
import os
import struct
import time

# Layout of the control page: 32-bit word indexes.
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
"""Native single-character buffer formats that cross raw (memoryview can cast them)."""

WAIT_SLICE_MS = 2
"""Longest single poll() while blocked (either end); bounds the cost of a lost wake-up."""
SPIN_MIN_S = 2e-6
"""The shortest spin budget: a few checks, so a reply already on its way is not slept through."""
PREEMPTED_S = 30e-6
"""(worker) A gap this long between two clock reads of a spin loop (~0.1 µs apart) means
the spinner lost its core."""
MAX_BACKOFF = 1024
"""(worker) Most consecutive waits that block without spinning after preemptions."""
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
                    value = finite(value)
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
                value = finite(value)
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
        except (TypeError, ValueError):  # no buffer (e.g. datetime64: "cannot include dtype 'M'"): the JSON path says why
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


def finite(x):
    """`x` with non-finite floats replaced by their string names (numpy converted first); the
    one rule of both ends for what JSON cannot carry."""
    if isinstance(x, float):
        return x if x == x and x not in (float("inf"), float("-inf")) else repr(x)
    if isinstance(x, (list, tuple)):
        return [finite(v) for v in x]
    if isinstance(x, dict):
        return {k: finite(v) for k, v in x.items()}
    if hasattr(x, "tolist") and not isinstance(x, (int, str, bool)):
        return finite(x.tolist())
    return x


_ENCODER = None
"""Built once, at the first JSON answer: `json.dumps(..., default=...)` would build a new
encoder on every act()."""


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
        text = _ENCODER.encode(finite(value))
    return text.encode()
