"""Helpers every rendered program starts with: observation decoding and action encoding.

The policy must be self-contained (the sandbox imports only the stdlib, numpy and scipy),
so these helpers are copied into each rendered program rather than imported. They read
only the compact schemas the host passes to `Policy.__init__`, which is what keeps every
mechanism free of env-specific constants.
"""
import numpy as np


def num(x):
    """A JSON-style observation value as float (the host sends non-finite floats as strings)."""
    if isinstance(x, str):
        return float(x)
    return float(x)


def flat(obs):
    """Any observation (nested lists, dicts with sorted keys, scalars) as a 1-d float array."""
    out = []

    def walk(v):
        if isinstance(v, dict):
            for k in sorted(v):
                if not isinstance(v[k], str) or v[k] in ("inf", "-inf", "nan"):
                    walk(v[k])
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)
        elif isinstance(v, str):
            out.append(num(v) if v in ("inf", "-inf", "nan") else 0.0)
        else:
            out.append(float(v))

    walk(obs)
    arr = np.asarray(out, dtype=float)
    return np.nan_to_num(arr, nan=0.0, posinf=1e6, neginf=-1e6)


def bounds(schema, size):
    """(low, high) float arrays of a Box schema; summaries and strings are expanded."""

    def expand(b, default):
        if b is None:
            return np.full(size, default)
        if isinstance(b, dict):
            return np.full(size, num(b.get("min", default)))
        arr = flat(b) if isinstance(b, (list, tuple)) else np.full(size, num(b))
        return arr if arr.size == size else np.full(size, float(arr.flat[0]))

    low = expand(schema.get("low"), -np.inf)
    high = expand(schema.get("high"), np.inf)
    if isinstance(schema.get("high"), dict):
        high = np.full(size, num(schema["high"].get("max", np.inf)))
    return low, high


def scale_of(schema, size):
    """Per-dimension observation scale: half the bound width when finite, else 1."""
    if schema.get("type") != "Box":
        return np.ones(size)
    low, high = bounds(schema, size)
    width = (high - low) / 2.0
    ok = np.isfinite(width) & (width > 1e-9) & (width < 1e5)
    return np.where(ok, width, 1.0)


class ActionCodec:
    """Turns a real vector u into a valid action for the action schema."""

    def __init__(self, schema):
        self.schema = schema
        self.kind = schema.get("type")
        if self.kind == "Discrete":
            self.n = int(schema["n"])
            self.start = int(schema.get("start", 0))
            self.dim = self.n
        elif self.kind == "Box":
            shape = schema.get("shape") or [1]
            self.dim = int(np.prod(shape))
            self.low, self.high = bounds(schema, self.dim)
            self.low = np.where(np.isfinite(self.low), self.low, -1.0)
            self.high = np.where(np.isfinite(self.high), self.high, 1.0)
        else:
            raise ValueError("unsupported action space " + str(self.kind))

    def box(self, u):
        """u in [-1, 1] per dimension -> the Box range, as a list of floats."""
        u = np.clip(np.asarray(u, dtype=float).reshape(-1)[: self.dim], -1.0, 1.0)
        mid = (self.high + self.low) / 2.0
        half = (self.high - self.low) / 2.0
        return [float(v) for v in mid + half * u]

    def choice(self, k):
        """Index k in [0, n) -> a Discrete action value."""
        return int(self.start + max(0, min(self.n - 1, int(k))))
