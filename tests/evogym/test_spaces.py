"""Schemas, value encoding and action coercion (reference §2.5, §3.6)."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from gymnasium import spaces as gs

from evogym.spaces import action_coercer, coerce_action, obs_storage, space_schema, to_jsonable

F32_4PI = 12.566370964050293
F32_9PI = 28.274333953857422


def test_acrobot_like_box_schema_has_full_float32_bounds():
    high = np.array([1, 1, 1, 1, 4 * np.pi, 9 * np.pi], dtype=np.float32)
    schema = space_schema(gs.Box(-high, high, dtype=np.float32))
    assert schema == {
        "type": "Box", "shape": [6], "dtype": "float32",
        "low": [-1.0, -1.0, -1.0, -1.0, -F32_4PI, -F32_9PI],
        "high": [1.0, 1.0, 1.0, 1.0, F32_4PI, F32_9PI],
    }


def test_large_infinite_box_uses_summary_bounds_and_inf_strings():
    schema = space_schema(gs.Box(-np.inf, np.inf, shape=(105,), dtype=np.float64))
    assert schema["low"] == {"shape": [105], "min": "-inf", "max": "-inf"}
    assert schema["high"] == {"shape": [105], "min": "inf", "max": "inf"}
    small = space_schema(gs.Box(-np.inf, np.inf, shape=(5, 5), dtype=np.float32))
    assert small["high"] == [["inf"] * 5] * 5


def test_image_rule_applies_only_to_2d_3d_uint8_in_byte_range():
    image = space_schema(gs.Box(0, 255, (96, 96, 3), np.uint8))
    assert image == {"type": "Image", "shape": [96, 96, 3], "dtype": "uint8",
                     "layout": "height_width_channels", "value_range": [0, 255], "storage": "external"}
    assert space_schema(gs.Box(0, 255, (10,), np.uint8))["type"] == "Box"
    assert space_schema(gs.Box(0, 1, (4, 4), np.float32))["type"] == "Box"


def test_discrete_start_only_when_nonzero_and_other_types():
    assert space_schema(gs.Discrete(3)) == {"type": "Discrete", "n": 3}
    assert space_schema(gs.Discrete(3, start=-1)) == {"type": "Discrete", "n": 3, "start": -1}
    assert space_schema(gs.MultiDiscrete([3, 4])) == {"type": "MultiDiscrete", "nvec": [3, 4], "dtype": "int64"}
    assert space_schema(gs.MultiDiscrete([3, 4], start=[1, 0]))["start"] == [1, 0]
    assert space_schema(gs.MultiBinary(5)) == {"type": "MultiBinary", "n": 5}
    assert space_schema(gs.Text(max_length=8)) == {"type": "Text", "min_length": 1, "max_length": 8}
    tup = space_schema(gs.Tuple([gs.Discrete(2), gs.MultiBinary(1)]))
    assert tup == {"type": "Tuple", "spaces": [{"type": "Discrete", "n": 2}, {"type": "MultiBinary", "n": 1}]}


def test_dict_keys_sorted_and_storage_propagates():
    space = gs.Dict({"z": gs.Discrete(4), "image": gs.Box(0, 255, (7, 7, 3), np.uint8)})
    schema = space_schema(space)
    assert list(schema["spaces"]) == ["image", "z"]
    assert obs_storage(schema) == "external"
    assert obs_storage(space_schema(gs.Discrete(2))) == "inline"


class _Custom(gs.Space):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def __repr__(self):
        return f"_Custom({self.fn!r})"


def test_unknown_space_repr_has_no_memory_address():
    def generator():
        return "x"

    schema = space_schema(_Custom(generator))
    assert schema["type"] == "_Custom"
    assert " at 0x" not in schema["repr"]
    assert "generator" in schema["repr"]


def test_to_jsonable_encodes_numpy_and_nonfinite():
    value = {
        "a": np.array([1.5, np.inf, -np.inf, np.nan], dtype=np.float32),
        "b": np.int64(3), "c": (np.float64(2.0), np.bool_(True)),
        "d": np.arange(6, dtype=np.uint8).reshape(2, 3), "e": float("nan"), 7: "s",
    }
    out = to_jsonable(value)
    assert out == {"a": [1.5, "inf", "-inf", "nan"], "b": 3, "c": [2.0, True],
                   "d": [[0, 1, 2], [3, 4, 5]], "e": "nan", "7": "s"}
    json.dumps(out, allow_nan=False)
    assert type(out["b"]) is int


def test_to_jsonable_fast_path_keeps_float32_values():
    arr = np.array([[0.1, 2.5]], dtype=np.float32)
    assert to_jsonable(arr) == [[float(np.float32(0.1)), 2.5]]


BOX = gs.Box(np.array([-1, 0, 0], np.float32), np.array([1, 1, 1], np.float32))


@pytest.mark.parametrize("raw, expected, invalid", [
    ([0.5, 0.2, 0.0], [0.5, 0.2, 0.0], False),
    ([2.0, -1.0, 0.5], [1.0, 0.0, 0.5], True),        # clipped
    (0.5, [0.5, 0.5, 0.5], True),                     # broadcast from a scalar
    ([1, 0, 0], [1.0, 0.0, 0.0], False),              # ints are numbers
    ("0.5", [0.0, 0.0, 0.0], True),                   # strings are not
    (None, [0.0, 0.0, 0.0], True),
    ([0.1, 0.2], [0.0, 0.0, 0.0], True),              # wrong length, not broadcastable
    ([[0.1, 0.2, 0.3]], [0.0, 0.0, 0.0], True),       # too deep
    ([True, 0.0, 0.0], [0.0, 0.0, 0.0], True),
    ([float("nan"), 0.0, 0.0], [0.0, 0.0, 0.0], True),
    ([1e300, 0.0, 0.0], [1.0, 0.0, 0.0], True),       # beyond float32 but finite: clipped, as the reference
    ([float("inf"), 0.0, 0.0], [0.0, 0.0, 0.0], True),  # not a number to clip
    ({"steer": 0}, [0.0, 0.0, 0.0], True),
])
def test_box_coercion(raw, expected, invalid):
    action, bad = coerce_action(BOX, raw)
    assert action.dtype == np.float32 and action.shape == (3,)
    assert action.tolist() == pytest.approx(expected)
    assert bad is invalid
    assert BOX.contains(action)


@pytest.mark.parametrize("raw, expected, invalid", [
    (2, 2, False), (2.0, 2, False), (7, 4, True), (-3, 0, True), (2.7, 2, True),
    (True, 0, True), ("2", 0, True), (None, 0, True), ([1], 0, True), (float("inf"), 0, True),
    (10**400, 4, True), (np.int64(3), 3, False),
])
def test_discrete_coercion(raw, expected, invalid):
    action, bad = coerce_action(gs.Discrete(5), raw)
    assert action == expected and bad is invalid


def test_discrete_with_start():
    assert coerce_action(gs.Discrete(3, start=-1), -5) == (-1, True)
    assert coerce_action(gs.Discrete(3, start=-1), "x") == (-1, True)


def test_multidiscrete_and_multibinary():
    md = gs.MultiDiscrete([3, 4])
    action, bad = coerce_action(md, [5, 1])
    assert action.tolist() == [2, 1] and bad
    assert coerce_action(md, [1, 2])[1] is False
    assert coerce_action(md, [0.5, 1])[0].tolist() == [0, 0]
    mb = gs.MultiBinary(3)
    action, bad = coerce_action(mb, [1, 0, 2])
    assert action.tolist() == [1, 0, 1] and bad
    assert coerce_action(mb, [1, 0, 1])[1] is False


def test_dict_and_tuple_recursive():
    space = gs.Dict({"a": gs.Discrete(2), "b": gs.Box(-1, 1, (2,), np.float32)})
    action, bad = coerce_action(space, {"a": 1, "b": [0.5, -0.5]})
    assert action["a"] == 1 and action["b"].tolist() == [0.5, -0.5] and not bad
    action, bad = coerce_action(space, {"a": 1, "b": [3, 0], "extra": 1})
    assert bad and action["b"].tolist() == [1.0, 0.0]
    action, bad = coerce_action(space, [1, 2])
    assert bad and action["a"] == 0 and action["b"].tolist() == [0.0, 0.0]
    tup = gs.Tuple([gs.Discrete(2), gs.Discrete(3)])
    assert coerce_action(tup, [1, 2]) == ((1, 2), False)
    assert coerce_action(tup, [1]) == ((0, 0), True)


def _deep(depth):
    node = 0.0
    for _ in range(depth):
        node = [node]
    return node


@pytest.mark.parametrize("raw", [
    _deep(100_000), [0.0] * 2_000_000, "x" * 1_000_000, {"k" * 10: [0.0] * 10}, [[0.0] * 3] * 3,
    [None, None, None], [[], [], []], object(), float("-inf"),
])
def test_hostile_values_never_raise(raw):
    for space in (BOX, gs.Discrete(4), gs.MultiDiscrete([2, 2]), gs.MultiBinary(2),
                  gs.Dict({"a": BOX}), gs.Tuple([BOX])):
        action, bad = coerce_action(space, raw)
        assert bad is True
        assert space.contains(action)


def test_coerced_box_is_stepable_float32_even_for_float64_input():
    space = gs.Box(-2.0, 2.0, (7,), np.float32)
    action, bad = coerce_action(space, [math.pi] * 7)
    assert action.dtype == np.float32 and bad and float(action.max()) == 2.0


@pytest.mark.parametrize("space", [
    gs.Box(-np.inf, np.inf, (40,), np.float64), gs.Box(0, 255, (7, 7, 3), np.uint8),
    gs.Dict({"a": gs.Discrete(3, start=2), "b": gs.Tuple([gs.MultiBinary(2), gs.Text(5)])}),
])
def test_schemas_round_trip_through_strict_json(space):
    schema = space_schema(space)
    assert json.loads(json.dumps(schema, allow_nan=False)) == schema


def _same(a, b) -> bool:
    (x, bad_x), (y, bad_y) = a, b
    return bad_x == bad_y and type(x) is type(y) and np.array_equal(np.asarray(x), np.asarray(y)) and \
        getattr(x, "dtype", None) == getattr(y, "dtype", None)


COERCER_SPACES = [gs.Discrete(4), gs.Discrete(3, start=-1), gs.Box(-1.0, 1.0, (3,), np.float32),
                  gs.Box(np.array([-np.inf, 0.0]), np.array([np.inf, 2.0]), (2,), np.float64),
                  gs.Box(0, 255, (2,), np.uint8), gs.Box(-2.0, 2.0, (2, 2), np.float32), gs.MultiDiscrete([2, 3])]


@pytest.mark.parametrize("space", COERCER_SPACES, ids=[str(s) for s in COERCER_SPACES])
def test_action_coercer_agrees_with_coerce_action(space):
    """The per-episode fast paths return exactly what coerce_action returns for the JSON
    value of the answer, for JSON values and for arrays that crossed raw."""
    from evogym.spaces import action_coercer
    rng = np.random.default_rng(0)
    coerce = action_coercer(space)
    values = [0, 3, -1, 7, 1.0, 2.5, True, None, "x", [0.5, -0.5, 0.25], [0.5, 2.0, -3.0], [1, 0, 0],
              [float("nan"), 0.0, 0.0], ["nan", 0.0, 0.0], [[0.1, 0.2], [0.3, 0.4]], [0.0, 1.0], [1e39, 0.0]]
    arrays = [np.asarray(v) for v in ([0.5, -0.5, 0.25], [0.5, 2.0, -3.0], [float("inf"), 0.0, 1.0], [0.0, 1.0],
                                      [[0.1, 0.2], [0.3, 0.4]], [1, 2], 2.0, [1e39, 0.0], [True, False])]
    arrays += [rng.uniform(-2, 2, size=space.shape or ()).astype(dt) for dt in (np.float32, np.float64)
               for _ in range(20)]
    for raw in values:
        assert _same(coerce(raw, False), coerce_action(space, raw)), raw
    for arr in arrays:
        assert _same(coerce(arr, True), coerce_action(space, to_jsonable(arr))), arr


def test_a_finite_value_beyond_float32_is_clipped_to_the_bound_not_zeroed():
    """1e39 rounds to inf in float32: it was taken for a non-finite answer (zeros, and a
    RuntimeWarning in the host log each step); it is out of bounds, so clipped, as documented."""
    import warnings
    space = gs.Box(-2.0, 2.0, shape=(3,), dtype=np.float32)
    coerce = action_coercer(space)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for raw, is_array in (([1e39, -1e39, 0.5], False), (np.array([1e39, -1e39, 0.5]), True)):
            action, invalid = coerce(raw, is_array)
            assert action.tolist() == [2.0, -2.0, 0.5] and invalid, (raw, action)
        assert coerce_action(space, [1e39, 0.0, 0.0])[0].tolist() == [2.0, 0.0, 0.0]
    for raw in ([float("nan"), 0.0, 0.0], [float("inf"), 0.0, 0.0], [10 ** 400, 0, 0]):  # no number: no action
        action, invalid = coerce(raw, False)
        assert action.tolist() == [0.0, 0.0, 0.0] and invalid, raw
