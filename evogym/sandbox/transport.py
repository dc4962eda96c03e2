"""The host end of the wire between a `PolicyProcess` and the in-sandbox `worker.py`.

The layout of the control page (word indexes, ops, kinds, formats) is `channel.py`'s, the
module that also holds the worker's end: one definition, read by both ends.

One sealed memfd holds a control page and two payload areas (request, reply), each
`frame_bytes` long; two pipes carry only wake-up bytes, and the reply pipe's EOF is
how a dead worker shows. A message is a header (32-bit words in the control page) plus
a payload:

- `ARRAY`: a C-order buffer of one native numeric format (`FORMATS`) and a shape; the
  worker turns it into nested lists with `memoryview.tolist()` (what `to_jsonable`
  gives), so the policy sees exactly what the JSON encoding gave it;
- `INT`: one signed 64-bit integer;
- `DICT` (observations only): a skeleton with the dict's keys and non-array values,
  followed by one raw buffer per numeric-array value;
- `MARSHAL` (host to worker only): any other JSON-like value, `marshal`led, so the worker
  needs no `json` (with `re`, most of its start-up imports) unless it must answer in JSON;
  the host never unmarshals anything: the worker's answers are raw or JSON;
- `JSON` (worker to host): UTF-8 JSON, non-finite floats as "nan"/"inf"/"-inf";
- `NONE`: no value.

Waiting (both sides): spin on the peer's sequence word for a bounded time, then set
the own "waiting" word, re-check, and block in poll() on the wake pipe; the sender
writes a wake byte only when the peer's waiting word is set. The host spins only for
a quick policy whose worker was awake (`SpinBudget`, `Channel.spin`); the worker only
with a spare core (worker.py). A wake lost to the store/load race of that handshake
costs at most one `WAIT_SLICE_S` poll, never correctness. On machines without x86's
store ordering every message is followed by a wake byte and the reader always blocks
in the pipe (the kernel orders it).

Everything the worker writes is untrusted: header words are read once into locals and
bounds-checked, and a reply payload is copied out of the shared memory before it is
parsed, so a worker that scribbles concurrently can only corrupt its own answer.
"""
from __future__ import annotations

import fcntl
import json
import marshal
import math
import mmap
import os
import platform
import select
import struct
import time
from typing import Any

import numpy as np

from evogym.sandbox.channel import (CONTROL_BYTES, FORMATS, HOST_WAITING, KIND_ARRAY, KIND_DICT, KIND_INT, KIND_JSON,
                                    KIND_MARSHAL, KIND_NONE, MAX_NDIM, OP_ACT, OP_START,
                                    REQ_AUX, REQ_FMT, REQ_KIND, REQ_LAYOUT, REQ_LEN, REQ_NDIM, REQ_OP, REQ_SEQ,
                                    REQ_SHAPE, RESP_BUSY_US, RESP_FMT, RESP_KIND, RESP_LEN, RESP_NDIM, RESP_SEQ,
                                    RESP_SHAPE, RESP_STATUS, SPIN_MIN_S, STATUS_ERROR, STATUS_OK, WAIT_SLICE_MS,
                                    WORKER_WAITING, finite)
from evogym.sandbox.channel import MAX_BACKOFF, OP_PREPARE, OP_RESET, PREEMPTED_S  # noqa: F401 - the whole layout, here too

_DTYPES = {f: np.dtype(f) for f in FORMATS}

ORDERED_STORES = platform.machine().lower() in ("x86_64", "amd64", "i686", "i386")
"""x86 keeps stores in order, so a reader that sees the sequence word sees the payload."""

SPIN_S = 1e-3
"""The longest the host busy-waits for the reply of a quick policy before blocking in
poll() (`SpinBudget`): a quick act() answers within microseconds, and a blocking wait
adds the scheduler's wake-up latency (5-20 µs idle, milliseconds on an oversubscribed
machine) to every step (experiments/results/host_overhead.md)."""
FAST_ACT_S = 200e-6
"""A policy whose act() takes less than this (as the worker reports) is waited for by spinning."""
FLAT_LIST_MAX = 4096
"""A flat numeric reply longer than this comes back as a numpy array (kind ARRAY) instead of a
list: a policy answering 10^6 floats per step (over any action space here) made the host
build 10^6 Python floats per step (issue 18); the array is one copy of the bytes."""
WAIT_SLICE_S = WAIT_SLICE_MS / 1000
"""Longest single poll() while blocked; bounds the cost of a lost wake-up."""
WAKE_READ = 4096
"""Bytes drained from the wake pipe per read (a flood is bounded per wait, like output)."""

_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False, default=lambda o: _tolist(o))
DECODER = json.JSONDecoder(parse_constant=lambda name: _reject_constant(name))


def _reject_constant(name: str):
    raise ValueError(f"non-finite number {name} in a frame")


def _tolist(obj):
    if hasattr(obj, "tolist"):  # numpy arrays and scalars
        return obj.tolist()
    raise TypeError(f"{type(obj).__name__} is not JSON-encodable")


def dumps(value) -> bytes:
    """Compact JSON; non-finite floats become "nan" / "inf" / "-inf"."""
    try:
        return _ENCODER.encode(value).encode()
    except ValueError:
        return _ENCODER.encode(finite(value)).encode()


class WorkerGone(Exception):
    """The worker closed its end (it exited or was killed)."""


class Oversized(Exception):
    """A request does not fit the payload area."""


class Channel:
    """Shared memory + wake pipes of one sandbox; the host's half.

    `child_fds` are passed to the worker (and closed here once it started); the host
    keeps `req_w` (wake the worker) and `resp_r` (woken by the worker; EOF = it died).
    """

    def __init__(self, frame_bytes: int) -> None:
        self.frame_bytes = frame_bytes
        size = CONTROL_BYTES + 2 * frame_bytes
        self.memfd = os.memfd_create("evogym-channel", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        os.ftruncate(self.memfd, size)
        # A worker that shrank the file would SIGBUS the host on its next access.
        fcntl.fcntl(self.memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        self.mm = mmap.mmap(self.memfd, size)
        self.size = size
        whole = memoryview(self.mm)
        self.ctl = whole[:CONTROL_BYTES].cast("I")
        self.req = whole[CONTROL_BYTES:CONTROL_BYTES + frame_bytes]
        self.resp = whole[CONTROL_BYTES + frame_bytes:]
        self._views = [whole, self.ctl, self.req, self.resp]
        self.req_r, self.req_w = os.pipe()
        self.resp_r, self.resp_w = os.pipe()
        for fd in (self.req_w, self.resp_r):
            os.set_blocking(fd, False)
        self.seq = 0
        self.woke = False  # whether the last request had to wake the worker (see spin)
        self._last_dtype: np.dtype | None = None  # layout of the last ARRAY request (see send_obs)
        self._last_shape: tuple = ()
        self._last_nbytes = 0
        self.budget = SpinBudget(SPIN_S)

    @property
    def child_fds(self) -> tuple[int, int, int]:
        """(memfd, request wake read end, reply wake write end) for the worker."""
        return self.memfd, self.req_r, self.resp_w

    def close_child_ends(self) -> None:
        """After the worker started: drop our copies of its ends (so its death shows as EOF)."""
        for name in ("req_r", "resp_w"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    def close(self) -> None:
        """Release everything; idempotent."""
        self.close_child_ends()
        for view in reversed(self._views):
            view.release()
        self._views.clear()
        if not self.mm.closed:
            self.mm.close()
        for name in ("memfd", "req_w", "resp_r"):
            fd = getattr(self, name)
            if fd >= 0:
                os.close(fd)
                setattr(self, name, -1)

    # -- sending ---------------------------------------------------------------------

    def send_value(self, op: int, value) -> None:
        """A JSON-like value (dicts, lists, str, int, float, bool, None), marshalled."""
        self._last_dtype = None
        try:
            payload = marshal.dumps(value)
        except ValueError:  # numpy values and the like: their JSON form
            from evogym.spaces import to_jsonable
            payload = marshal.dumps(to_jsonable(value))
        self._put_bytes(payload)
        ctl = self.ctl
        ctl[REQ_KIND] = KIND_MARSHAL
        ctl[REQ_LEN] = len(payload)
        self._publish(op)

    def send_int(self, op: int, value: int) -> None:
        self._last_dtype = None
        self.req[:8] = int(value).to_bytes(8, "little", signed=True)
        ctl = self.ctl
        ctl[REQ_KIND] = KIND_INT
        ctl[REQ_LEN] = 8
        self._publish(op)

    def send_obs(self, obs) -> None:
        """An observation: raw buffers where possible, JSON otherwise (see module doc)."""
        if type(obs) is np.ndarray and obs.dtype is self._last_dtype and obs.shape == self._last_shape \
                and obs.flags.c_contiguous:
            # the same layout as the previous request: the header words still describe it
            self.req[:self._last_nbytes] = obs.tobytes()
        elif type(obs) is np.ndarray and self._put_array(obs, 0):
            self.ctl[REQ_KIND] = KIND_ARRAY
            self.ctl[REQ_LAYOUT] = (self.ctl[REQ_LAYOUT] + 1) & 0xFFFFFFFF  # the worker re-reads the header
            self._last_dtype, self._last_shape, self._last_nbytes = obs.dtype, obs.shape, obs.nbytes
            self._publish(OP_ACT)
            return
        elif isinstance(obs, dict) and self._put_dict(obs):
            self.ctl[REQ_KIND] = KIND_DICT
        elif isinstance(obs, (int, np.integer)) and not isinstance(obs, (bool, np.bool_)) \
                and -(1 << 63) <= int(obs) < (1 << 63):
            self.req[:8] = int(obs).to_bytes(8, "little", signed=True)
            self.ctl[REQ_KIND] = KIND_INT
            self.ctl[REQ_LEN] = 8
        else:
            from evogym.spaces import to_jsonable  # imported lazily: spaces pulls gymnasium
            payload = marshal.dumps(to_jsonable(obs))
            self._put_bytes(payload)
            self.ctl[REQ_KIND] = KIND_MARSHAL
            self.ctl[REQ_LEN] = len(payload)
        if not (type(obs) is np.ndarray and obs.dtype is self._last_dtype and obs.shape == self._last_shape):
            self._last_dtype = None  # the header now describes something else
        self._publish(OP_ACT)

    def _put_bytes(self, payload: bytes) -> None:
        if len(payload) > self.frame_bytes:
            raise Oversized(f"{len(payload)} bytes")
        self.req[:len(payload)] = payload

    def _put_array(self, arr: np.ndarray, offset: int) -> bool:
        """Write `arr` raw at `offset` of the request area and describe it in the header
        (REQ_FMT/NDIM/SHAPE/LEN); False when it must go as JSON instead."""
        fmt = arr.dtype.char
        if fmt not in FORMATS or not arr.dtype.isnative or arr.ndim > MAX_NDIM or arr.size == 0:
            return False
        if not arr.flags.c_contiguous:
            arr = np.ascontiguousarray(arr)
        n = arr.nbytes
        if offset + n > self.frame_bytes:
            raise Oversized(f"{offset + n} bytes")
        self.req[offset:offset + n] = arr.data.cast("B")
        ctl = self.ctl
        ctl[REQ_FMT] = ord(fmt)
        ctl[REQ_NDIM] = arr.ndim
        for i, dim in enumerate(arr.shape):
            ctl[REQ_SHAPE + i] = dim
        ctl[REQ_LEN] = n
        return True

    def _put_dict(self, obs: dict) -> bool:
        """A dict observation: marshalled skeleton, then each numeric array raw (8-byte aligned)."""
        from evogym.spaces import to_jsonable
        keys: list[str] = []
        values: list[Any] = []
        arrays: list[list[Any]] = []
        blobs: list[tuple[int, np.ndarray]] = []
        offset = 0
        for i, (key, value) in enumerate(obs.items()):
            keys.append(str(key))
            if type(value) is np.ndarray and value.dtype.char in FORMATS and value.dtype.isnative \
                    and 0 < value.ndim <= MAX_NDIM and value.size:
                value = np.ascontiguousarray(value)
                arrays.append([i, value.dtype.char, list(value.shape), offset])
                blobs.append((offset, value))
                offset += (value.nbytes + 7) & ~7
                values.append(None)
            else:
                values.append(to_jsonable(value))
        if not arrays:
            return False
        skeleton = marshal.dumps({"keys": keys, "values": values, "arrays": arrays})
        base = (len(skeleton) + 7) & ~7
        if base + offset > self.frame_bytes:
            raise Oversized(f"{base + offset} bytes")
        self.req[:len(skeleton)] = skeleton
        for at, value in blobs:
            self.req[base + at:base + at + value.nbytes] = value.data.cast("B")
        self.ctl[REQ_AUX] = len(skeleton)
        self.ctl[REQ_LEN] = base + offset
        return True

    def _publish(self, op: int) -> None:
        ctl = self.ctl
        ctl[REQ_OP] = op
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        ctl[REQ_SEQ] = self.seq  # last: the worker reads the payload only after seeing it
        self.woke = op == OP_START or not ORDERED_STORES or bool(ctl[WORKER_WAITING])
        if self.woke:  # always for start: a pre-started worker waits for it in the pipe alone
            self._wake()

    def _wake(self) -> None:
        try:
            os.write(self.req_w, b"\0")
        except BlockingIOError:
            pass  # the pipe is full of unread wake bytes: the worker is woken anyway
        except BrokenPipeError:
            pass  # the worker is gone; the wait for its reply sees the EOF

    # -- receiving -------------------------------------------------------------------

    def ready(self) -> bool:
        return self.ctl[RESP_SEQ] == self.seq

    def spin(self) -> bool:
        """Busy-wait up to the current spin budget for the reply; True when it is there.

        Only while the worker was awake (spinning) when the request went out: a worker that
        had to be woken needs a core first, maybe this one, and a spinning host would
        only keep it from running (on a loaded machine that cost ~280 µs a step)."""
        ctl, seq, clock = self.ctl, self.seq, time.perf_counter
        if ctl[RESP_SEQ] == seq:
            return True
        if self.woke:
            return False
        end = clock() + self.budget.budget
        while clock() < end:
            if ctl[RESP_SEQ] == seq:
                return True
        return ctl[RESP_SEQ] == seq

    def begin_block(self) -> bool:
        """Announce that the host is about to block; True if the reply came meanwhile."""
        self.ctl[HOST_WAITING] = 1
        return self.ctl[RESP_SEQ] == self.seq

    def end_block(self) -> None:
        """The blocking wait is over (reply, death or deadline)."""
        self.ctl[HOST_WAITING] = 0

    def drain_wake(self) -> None:
        """Consume wake bytes; raises WorkerGone at EOF (the worker's end is closed)."""
        try:
            data = os.read(self.resp_r, WAKE_READ)
        except BlockingIOError:
            return
        if not data:
            raise WorkerGone()

    def reply(self) -> tuple[int, int, object]:
        """(status, kind, value) of the reply now in shared memory, copied and checked.

        Raises ValueError with a reason for a malformed header or payload."""
        ctl = self.ctl
        status, kind, size = ctl[RESP_STATUS], ctl[RESP_KIND], ctl[RESP_LEN]
        self.budget.update(ctl[RESP_BUSY_US])
        if size > self.frame_bytes:
            raise ValueError(f"reply announces {size} bytes; the limit is {self.frame_bytes}")
        if status not in (STATUS_OK, STATUS_ERROR):
            raise ValueError(f"reply has unknown status {status}")
        if kind == KIND_NONE:
            return status, kind, None
        if kind == KIND_INT:
            if size != 8:
                raise ValueError(f"integer reply of {size} bytes")
            return status, kind, int.from_bytes(self.resp[:8], "little", signed=True)
        if kind == KIND_ARRAY:
            return (status, *self._reply_array(size))
        if kind == KIND_JSON:
            body = bytes(self.resp[:size])  # copy first: the worker may still be writing
            return status, kind, DECODER.decode(body.decode())
        raise ValueError(f"reply has unknown kind {kind}")

    def _reply_array(self, size: int) -> tuple[int, object]:
        """(kind, value): a scalar or a flat vector of at most FLAT_LIST_MAX values as its JSON
        value (the common case: no numpy), anything else as a numpy array (kind ARRAY)."""
        ctl = self.ctl
        fmt_code, ndim = ctl[RESP_FMT], ctl[RESP_NDIM]
        shape = tuple(ctl[RESP_SHAPE + i] for i in range(min(ndim, MAX_NDIM)))
        fmt = chr(fmt_code) if fmt_code < 128 else ""
        if fmt not in FORMATS or ndim > MAX_NDIM:
            raise ValueError(f"array reply with format code {fmt_code} and {ndim} dimensions")
        dtype = _DTYPES[fmt]
        if math.prod(shape) * dtype.itemsize != size:
            raise ValueError(f"array reply of shape {shape} and format {fmt!r} does not fill {size} bytes")
        if ndim == 0 or (ndim == 1 and shape[0] <= FLAT_LIST_MAX):  # one read, straight into Python values
            values = list(struct.unpack_from(f"{size // dtype.itemsize}{fmt}", self.resp))
            if fmt in "fd":
                total = sum(values)
                if total - total != 0.0:  # non-finite: the strings the JSON encoding gives them
                    values = [v if math.isfinite(v) else repr(v) for v in values]
            return KIND_JSON, values if ndim else values[0]
        return KIND_ARRAY, np.frombuffer(bytes(self.resp[:size]), dtype=dtype).reshape(shape)


class SpinBudget:
    """How long the host busy-waits for a reply before blocking.

    The worker reports how long the policy itself took (`RESP_BUSY_US`). While that is
    short (< `FAST_ACT_S`), anything beyond it is transport or scheduling latency: the
    host spins up to `maximum`, because a blocked host must win a core back before it
    can step the env (milliseconds on an oversubscribed machine), while a spinning one
    keeps the core it would use anyway. A slow policy makes the host block almost at
    once (`SPIN_MIN_S`): spinning through a long act() only burns a core. The report
    is untrusted and steers nothing but this budget.
    """

    __slots__ = ("budget", "maximum", "busy")

    def __init__(self, maximum: float) -> None:
        self.budget = self.maximum = maximum
        self.busy = 0.0

    def update(self, busy_us: int) -> None:
        """After a reply: fold the policy's reported time into the estimate (EWMA, 1/4)."""
        self.busy += (busy_us * 1e-6 - self.busy) * 0.25
        self.budget = self.maximum if self.busy < FAST_ACT_S else SPIN_MIN_S


def poll_fds(poller: select.poll, timeout_s: float) -> list[tuple[int, int]]:
    """One poll() slice of at most WAIT_SLICE_S (a lost wake-up costs no more than that)."""
    return poller.poll(max(0.0, min(timeout_s, WAIT_SLICE_S)) * 1000.0)


class Stream:
    """A capped capture of one output pipe."""

    def __init__(self, fd: int, cap: int) -> None:
        self.fd, self.cap = fd, cap
        self.kept = bytearray()
        self.dropped = 0

    def absorb(self, data: bytes) -> None:
        room = self.cap - len(self.kept)
        self.kept += data[:max(room, 0)]
        self.dropped += max(len(data) - max(room, 0), 0)

    def take(self) -> str:
        """The kept text, with a note counting what was dropped."""
        text, dropped = self.take_counted()
        return text + f"\n[truncated {dropped} bytes]" if dropped else text

    def take_counted(self) -> tuple[str, int]:
        """(kept text, bytes dropped): the count stays a number, so whoever caps the text
        again (the feedback writer) reports the total instead of cutting this note off."""
        text, dropped = self.kept.decode("utf-8", "replace"), self.dropped
        self.kept, self.dropped = bytearray(), 0
        return text, dropped
