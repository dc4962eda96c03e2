"""Compact space schemas, JSON value encoding and action coercion.

The schema and value rules reproduce what EvoPolicyGym v0.1.0 gave its policies
(`envs/gym/space.py`, reference report §3.6), so a policy written for the paper host
sees the same `obs_space`/`action_space` dicts and the same observation values here.

One deliberate deviation: the schema of a space type this module does not know is
`{"type": <class name>, "repr": <repr(space)>}` as in v0.1.0, **but with memory
addresses (`" at 0x7f…"`) removed from the repr**. v0.1.0 leaked the address of
MiniGrid's mission generator (`MissionSpace(<function DoorKeyEnv._gen_mission at
0x7f…>, None)`), which made `/info` differ between processes and runs and gave the
policy a meaningless token. Stripping only the address keeps the type name and the
generator's name (both informative, both what the paper's agents saw) and makes the
schema a pure function of the environment. A Text-like schema was rejected because it
would change the `type` the paper's policies branch on.
"""
from __future__ import annotations

import math
import re
from array import array
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces as gs

BOUNDS_INLINE_MAX = 32
"""Box bounds with at most this many elements are emitted in full; larger ones as a summary."""

ACTION_NESTING_MAX = 64
"""Deepest list nesting `coerce_action` inspects before calling a raw action malformed."""

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def space_schema(space: gs.Space) -> dict:
    """Return the compact JSON schema of `space` exactly as v0.1.0 emits it (module doc)."""
    if isinstance(space, gs.Box):
        return _box_schema(space)
    if isinstance(space, gs.Discrete):
        out = {"type": "Discrete", "n": int(space.n)}
        if int(space.start) != 0:
            out["start"] = int(space.start)
        return out
    if isinstance(space, gs.MultiDiscrete):
        out = {"type": "MultiDiscrete", "nvec": space.nvec.tolist(), "dtype": str(space.dtype)}
        if np.any(space.start != 0):
            out["start"] = space.start.tolist()
        return out
    if isinstance(space, gs.MultiBinary):
        size: Any = space.n  # an int, or a shape as given (a sequence or an array): gymnasium keeps it as it came
        scalar = bool(np.isscalar(size))  # a plain bool: numpy's isscalar narrows `size` to types int() refuses
        return {"type": "MultiBinary", "n": int(size) if scalar else [int(x) for x in size]}
    if isinstance(space, gs.Tuple):
        return {"type": "Tuple", "spaces": [space_schema(s) for s in space.spaces]}
    if isinstance(space, gs.Dict):
        return {"type": "Dict", "spaces": {k: space_schema(space.spaces[k]) for k in sorted(space.spaces)}}
    if isinstance(space, gs.Text):
        return {"type": "Text", "min_length": int(space.min_length), "max_length": int(space.max_length)}
    return {"type": type(space).__name__, "repr": _ADDRESS.sub("", repr(space))}


def _box_schema(space: gs.Box) -> dict:
    shape = [int(x) for x in space.shape]
    if _is_image(space):
        return {
            "type": "Image",
            "shape": shape,
            "dtype": "uint8",
            "layout": "height_width_channels",
            "value_range": [0, 255],
            "storage": "external",
        }
    return {
        "type": "Box",
        "shape": shape,
        "dtype": str(space.dtype),
        "low": _bounds(space.low),
        "high": _bounds(space.high),
    }


def _is_image(space: gs.Box) -> bool:
    return (
        len(space.shape) in (2, 3)
        and space.dtype == np.uint8
        and bool(np.all(space.low >= 0))
        and bool(np.all(space.high <= 255))
    )


def _bounds(values: np.ndarray) -> Any:
    if values.size <= BOUNDS_INLINE_MAX:
        return to_jsonable(values)
    return {
        "shape": [int(x) for x in values.shape],
        "min": to_jsonable(values.min()),
        "max": to_jsonable(values.max()),
    }


def obs_storage(schema: Mapping) -> str:
    """`"external"` if any subschema is an Image or declares external storage, else `"inline"`."""
    stack = [schema]
    while stack:
        node = stack.pop()
        if node.get("type") == "Image" or node.get("storage") == "external":
            return "external"
        subs = node.get("spaces")
        if isinstance(subs, Mapping):
            stack.extend(subs.values())
        elif isinstance(subs, list):
            stack.extend(subs)
    return "inline"


# ---------------------------------------------------------------- value encoding


def to_jsonable(value: Any) -> Any:
    """Turn an observation, info value or bound into plain JSON-safe Python values.

    numpy arrays become nested lists, numpy scalars Python scalars, tuples lists, and
    non-finite floats the strings "inf", "-inf", "nan" (v0.1.0 encoding, §3.6). Dict
    keys become strings. Anything else unknown becomes its `str()`, so the result can
    always be serialized. Runs on every step, so float arrays take a fast path: one
    `tolist()`, with the non-finite patch only when `np.isfinite` finds a bad value.
    """
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else _nonfinite(value)
    if isinstance(value, np.ndarray):
        return _array_jsonable(value)
    if isinstance(value, np.generic):
        return to_jsonable(value.item())
    if isinstance(value, Mapping):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    return str(value)


def _nonfinite(x: float) -> str:
    if math.isnan(x):
        return "nan"
    return "inf" if x > 0 else "-inf"


def _array_jsonable(arr: np.ndarray) -> Any:
    kind = arr.dtype.kind
    if kind == "f":
        if bool(np.isfinite(arr).all()):
            return arr.tolist()
        return _patch_floats(arr.tolist())
    if kind in "biuU":
        return arr.tolist()
    if kind == "S":
        return _patch_floats(np.char.decode(arr, "utf-8", "replace").tolist())
    return to_jsonable(arr.tolist())


def _patch_floats(tree: Any) -> Any:
    if isinstance(tree, list):
        return [_patch_floats(x) for x in tree]
    if isinstance(tree, float) and not math.isfinite(tree):
        return _nonfinite(tree)
    return tree


# ---------------------------------------------------------------- action coercion


def coerce_action(space: gs.Space, raw: Any) -> tuple[Any, bool]:
    """Turn a policy's raw JSON action into a valid env action; never raises.

    Rules (v0.1.0 §2.5): Discrete → `int`, clamped to `[start, start+n-1]`, a
    non-integer becomes `start`; Box → array of the space dtype broadcast to the shape
    (zeros on failure), clipped to the bounds; MultiDiscrete/MultiBinary the same
    (failure → `start` / zeros); Dict/Tuple recursively. `invalid` is True whenever the
    returned action differs from what the policy sent: wrong type, wrong shape repaired
    by broadcasting, clamped or clipped values, non-finite numbers, missing or extra
    Dict keys. Hostile values (deep nesting, huge lists, strings, None) are checked by
    a bounded walk before numpy sees them, so cost stays proportional to the space size.
    Unknown space types pass the value through, flagged when the space rejects it.
    """
    try:
        fast = _coerce_flat_box(space, raw)
        return fast if fast is not None else _coerce(space, raw)
    except Exception:  # noqa: BLE001 - the contract is "never raise"; the fallback is marked invalid
        return _fallback(space), True


_NUMBER_TYPES = (float, int)


def action_coercer(space: gs.Space):
    """`coerce(raw, is_array) -> (action, invalid)` for one action space, built once per episode.

    The result is always `coerce_action(space, raw)` of the JSON value the policy's answer
    encodes to: `raw` itself, or `to_jsonable(raw)` when the answer crossed as a numpy
    array (`is_array`). Two fast paths give the same result without the general walk
    (they run every step): a plain int for `Discrete`, and a flat float vector of a
    one-dimensional float `Box` that needs no repair (checked in Python on the values
    rounded to the space dtype; anything else takes the general path).
    """
    if type(space) is gs.Discrete:
        start, last = int(space.start), int(space.start + space.n - 1)

        def coerce_discrete(raw, is_array: bool):
            if type(raw) is int:
                value = start if raw < start else last if raw > last else raw
                return value, value != raw
            return coerce_action(space, to_jsonable(raw) if is_array else raw)
        return coerce_discrete
    box = _FlatBox.of(space)
    if box is not None:
        return box.coerce
    return lambda raw, is_array: coerce_action(space, to_jsonable(raw) if is_array else raw)


class _FlatBox:
    """The in-bounds fast path of a one-dimensional float32/float64 Box."""

    __slots__ = ("space", "n", "typecode", "dtype", "bounds", "uniform")

    @classmethod
    def of(cls, space: gs.Space) -> "_FlatBox | None":
        if type(space) is not gs.Box or len(space.shape) != 1 or space.dtype not in (np.float32, np.float64):
            return None
        return cls(space)

    def __init__(self, space: gs.Box) -> None:
        self.space, self.n, self.dtype = space, int(space.shape[0]), space.dtype
        self.typecode = "f" if space.dtype == np.float32 else "d"
        big = float(np.finfo(np.float32 if self.typecode == "f" else np.float64).max)  # finite bounds: "in bounds" then also means "finite"
        low = np.maximum(space.low.astype(np.float64), -big).tolist()
        high = np.minimum(space.high.astype(np.float64), big).tolist()
        self.bounds = list(zip(low, high))
        self.uniform = (low[0], high[0]) if len(set(low)) == 1 and len(set(high)) == 1 else None

    def coerce(self, raw, is_array: bool):
        if is_array:
            values = raw.tolist() if raw.dtype.kind == "f" and raw.shape == (self.n,) else None
        else:
            values = raw if type(raw) is list and len(raw) == self.n and \
                all(type(v) is float for v in raw) else None
        if values is not None:
            rounded = array(self.typecode, values)
            # the values are finite here (JSON and the transport give non-finite ones as
            # strings), so min/max are exact; rounding may still overflow to inf: out of bounds
            if (self.uniform is not None and self.uniform[0] <= min(rounded) and max(rounded) <= self.uniform[1]) \
                    or (self.uniform is None and all(lo <= v <= hi for v, (lo, hi) in zip(rounded, self.bounds))):
                return np.frombuffer(rounded, dtype=self.dtype), False
        return coerce_action(self.space, to_jsonable(raw) if is_array else raw)


def _coerce_flat_box(space: gs.Space, raw: Any) -> tuple[np.ndarray, bool] | None:
    """Fast path for the common case, a flat list of plain numbers of exactly the Box's length
    (this runs every step: the general path costs ~50 µs, this one a few). None = not that case."""
    if type(raw) is not list or type(space) is not gs.Box or len(space.shape) != 1 or len(raw) != space.shape[0]:
        return None
    if not all(type(v) in _NUMBER_TYPES for v in raw):
        return None
    if space.dtype.kind != "f":
        return _coerce_flat_int_box(space, raw)
    try:
        wide = np.array(raw, dtype=np.float64)
    except OverflowError:
        return None
    if not np.isfinite(wide).all():
        return None
    with np.errstate(over="ignore"):  # a finite value beyond float32 rounds to +-inf: clipped to the bound below
        arr = wide.astype(space.dtype)
    out = np.minimum(np.maximum(arr, space.low), space.high).astype(space.dtype, copy=False)
    return out, bool((arr < space.low).any() or (arr > space.high).any())


def _coerce_flat_int_box(space: gs.Box, raw: list) -> tuple[np.ndarray, bool] | None:
    """The fast path's rule for an integer-typed Box (unchanged: cast, then clip)."""
    arr = np.array(raw, dtype=space.dtype)
    if not np.isfinite(arr).all():
        return None
    out = np.minimum(np.maximum(arr, space.low), space.high).astype(space.dtype, copy=False)
    return out, bool((arr < space.low).any() or (arr > space.high).any())


def _coerce(space: gs.Space, raw: Any) -> tuple[Any, bool]:
    if isinstance(space, gs.Discrete):
        return _coerce_discrete(space, raw)
    if isinstance(space, gs.Box):
        return _coerce_array(space, raw, space.low, space.high, float_ok=True)
    if isinstance(space, gs.MultiDiscrete):
        return _coerce_array(space, raw, space.start, space.start + space.nvec - 1, float_ok=False)
    if isinstance(space, gs.MultiBinary):
        return _coerce_array(space, raw, 0, 1, float_ok=False)
    if isinstance(space, gs.Dict):
        return _coerce_dict(space, raw)
    if isinstance(space, gs.Tuple):
        return _coerce_tuple(space, raw)
    return raw, not _contains(space, raw)


def _contains(space: gs.Space, raw: Any) -> bool:
    try:
        return bool(space.contains(raw))
    except Exception:  # noqa: BLE001 - a space that cannot judge the value rejects it
        return False


def _coerce_discrete(space: gs.Discrete, raw: Any) -> tuple[int, bool]:
    start, n = int(space.start), int(space.n)
    if isinstance(raw, bool) or not isinstance(raw, (int, float, np.integer, np.floating)):
        return start, True
    if isinstance(raw, (float, np.floating)) and not math.isfinite(float(raw)):
        return start, True
    value = int(raw)
    clamped = min(max(value, start), start + n - 1)
    return clamped, bool(clamped != raw)


def _coerce_array(space: gs.Box | gs.MultiDiscrete | gs.MultiBinary, raw: Any, low: Any, high: Any, *, float_ok: bool) -> tuple[np.ndarray, bool]:
    shape = tuple(space.shape)
    if not _numeric_tree(raw, max_depth=len(shape), max_leaves=max(1, math.prod(shape)), float_ok=float_ok):
        return _fallback(space), True
    with np.errstate(all="ignore"):
        if float_ok and space.dtype.kind == "f":  # NaN/inf is no action; a finite value beyond the dtype's range is clipped
            try:
                wide = np.asarray(raw, dtype=np.float64)
            except OverflowError:  # an integer beyond float64
                return _fallback(space), True
            if not bool(np.isfinite(wide).all()):
                return _fallback(space), True
            arr = wide.astype(space.dtype)  # an overflow here gives +-inf, which the clip below bounds
        else:
            arr = np.asarray(raw, dtype=space.dtype)
            if float_ok and not bool(np.isfinite(arr).all()):
                return _fallback(space), True
    out = np.broadcast_to(arr, shape).astype(space.dtype, copy=True)
    clipped = np.clip(out, low, high).astype(space.dtype, copy=False)
    invalid = arr.shape != shape or not np.array_equal(clipped, out)
    return clipped, invalid


def _numeric_tree(raw: Any, *, max_depth: int, max_leaves: int, float_ok: bool) -> bool:
    """True when `raw` is a number or nested lists of numbers, no deeper than `max_depth`
    levels and with at most `max_leaves` numbers (a broadcastable value never has more)."""
    leaf_types = (int, float) if float_ok else (int,)
    stack: list[tuple[Any, int]] = [(raw, 0)]
    leaves = 0
    while stack:
        node, depth = stack.pop()
        if isinstance(node, list):
            if depth >= min(max_depth, ACTION_NESTING_MAX) or len(node) > max_leaves:
                return False
            stack.extend((child, depth + 1) for child in node)
            continue
        if isinstance(node, bool) or not isinstance(node, leaf_types):
            return False
        leaves += 1
        if leaves > max_leaves:
            return False
    return True


def _coerce_dict(space: gs.Dict, raw: Any) -> tuple[dict, bool]:
    if not isinstance(raw, Mapping):
        return _fallback(space), True
    out, invalid = {}, set(raw) != set(space.spaces)
    for key, sub in space.spaces.items():
        value, bad = coerce_action(sub, raw.get(key))
        out[key] = value
        invalid = invalid or bad
    return out, invalid


def _coerce_tuple(space: gs.Tuple, raw: Any) -> tuple[tuple, bool]:
    if not isinstance(raw, (list, tuple)) or len(raw) != len(space.spaces):
        return _fallback(space), True
    pairs = [coerce_action(sub, value) for sub, value in zip(space.spaces, raw)]
    return tuple(v for v, _ in pairs), any(bad for _, bad in pairs)


def _fallback(space: gs.Space) -> Any:
    """The repaired action used when nothing usable was sent: `start`, zeros clipped into
    the bounds, or the per-component fallback for composite spaces."""
    if isinstance(space, gs.Discrete):
        return int(space.start)
    if isinstance(space, gs.Box):
        return np.clip(np.zeros(space.shape, dtype=space.dtype), space.low, space.high).astype(space.dtype)
    if isinstance(space, gs.MultiDiscrete):
        return np.array(space.start, dtype=space.dtype, copy=True)
    if isinstance(space, gs.MultiBinary):
        return np.zeros(space.shape, dtype=space.dtype)
    if isinstance(space, gs.Dict):
        return {k: _fallback(s) for k, s in space.spaces.items()}
    if isinstance(space, gs.Tuple):
        return tuple(_fallback(s) for s in space.spaces)
    return None
