"""Strict YAML: hostile documents (reliability.md B1-B4) are rejected cleanly and fast."""
from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ole.errors import ValidationError
from ole.yamlio import MAX_BYTES, MAX_DEPTH, dump_yaml, load_yaml

HOSTILE = {
    "python_tag": ("a: !!python/object/apply:os.system ['touch /tmp/pwned']", "explicit tag"),
    "local_tag": ("a: !custom 1", "explicit tag"),
    "str_tag": ("a: !!str 1", "explicit tag"),
    "duplicate_key": ("version: 1\nname: x\nversion: 2\n", "duplicate key `version` (first at line 1)"),
    "bool_no": ("enabled: no", "`no` is ambiguous"),
    "bool_on": ("enabled: On", "`On` is ambiguous"),
    "octal": ("seed: 012", "`012` is ambiguous"),
    "hex": ("seed: 0x1f", "`0x1f` is ambiguous"),
    "underscore_int": ("seed: 1_000", "`1_000` is ambiguous"),
    "sexagesimal": ("t: 190:20:30", "`190:20:30` is ambiguous"),
    "date": ("date: 2024-01-02", "`2024-01-02` is ambiguous"),
    "nan": ("x: .nan", "`.nan` is ambiguous"),
    "inf": ("x: -.inf", "`-.inf` is ambiguous"),
    "float_overflow": ("x: 1e999", "overflows"),
    "alias_bomb": ('a: &a ["x","x","x","x","x","x","x","x","x"]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n'
                   'c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\nd: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n', "anchors and aliases"),
    "merge_key": ("base: &b {x: 1}\nother:\n  <<: *b\n", "anchors and aliases"),
    "plain_merge": ("<<: 1", "ambiguous"),
    "deep": ("[" * 10_000 + "]" * 10_000, f"deeper than {MAX_DEPTH}"),
    "huge_int": ("x: " + "9" * 5000, "integer with 5000 digits"),
    "huge_doc": ("x: '" + "a" * (MAX_BYTES + 10) + "'", "bytes (at most"),
    "bom": ("\ufeffa: 1", "byte-order mark"),
    "nul": ("a: 1\x00", "NUL byte"),
    "tabs": ("a:\n\tb: 1", "not valid YAML"),
    "two_documents": ("a: 1\n---\nb: 2\n", "more than one YAML document"),
    "top_level_list": ("- 1\n- 2\n", "top level is a list"),
    "top_level_scalar": ("hello", "top level is a str"),
    "empty": ("", "empty document"),
    "only_comment": ("# nothing\n", "empty document"),
    "null_doc": ("~", "empty document"),
    "int_key": ("1: a", "mapping key 1 is not a string"),
    "complex_key": ("? [a, b]\n: c\n", "is not a string"),
    "unterminated": ("a: [1, 2", "not valid YAML"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_documents_are_rejected_with_a_clear_error(case):
    text, expected = HOSTILE[case]
    start = time.perf_counter()
    with pytest.raises(ValidationError) as info:
        load_yaml(text, source="t.yaml")
    assert expected in info.value.message
    assert info.value.message.startswith("t.yaml")
    assert info.value.hint
    assert time.perf_counter() - start < 2.0


def test_invalid_utf8_bytes_are_rejected():
    with pytest.raises(ValidationError, match="not valid UTF-8 at byte 3"):
        load_yaml(b"a: \xff\xfe")


def test_python_tag_has_no_side_effect(tmp_path):
    marker = tmp_path / "pwned"
    with pytest.raises(ValidationError):
        load_yaml(f"a: !!python/object/apply:os.system ['touch {marker}']")
    assert not marker.exists()


@pytest.mark.parametrize("text, value", [
    ("a: true", True), ("a: False", False), ("a: null", None), ("a: ~", None), ("a:", None),
    ("a: 0", 0), ("a: -12", -12), ("a: 1.10", 1.1), ("a: 1e3", 1000.0), ("a: 2.5e-3", 0.0025),
    ("a: 'no'", "no"), ('a: "012"', "012"), ("a: '2024-01-02'", "2024-01-02"), ("a: hello world", "hello world"),
    ("a: |\n  two\n  lines\n", "two\nlines\n"),
])
def test_unambiguous_scalars_read_as_yaml_1_2_core(text, value):
    assert load_yaml(text) == {"a": value}


def test_dump_quotes_strings_that_would_read_back_as_something_else():
    data = {"s": ["no", "1e3", "012", "", "null", "true", "2024-01-02", "x: y", "plain", "a\nb"],
            "n": [0, -1, 0.5, 1e-06, 1800.0], "b": [True, False], "z": None, "nested": {"k": []}}
    text = dump_yaml(data)
    assert load_yaml(text) == data
    assert "- 'no'" in text and "- '1e3'" in text


_scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**15, 10**15),
                     st.floats(allow_nan=False, allow_infinity=False, width=64),
                     st.text(st.characters(blacklist_categories=("Cs", "Cc")), max_size=20))
_keys = st.text(st.characters(whitelist_categories=("Ll", "Nd"), whitelist_characters="_-"), min_size=1, max_size=8)
_trees = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                        st.dictionaries(_keys, inner, max_size=4)), max_leaves=20)


@settings(max_examples=80, deadline=None)
@given(st.dictionaries(_keys, _trees, min_size=1, max_size=5))
def test_dump_then_load_is_the_identity(data):
    assert load_yaml(dump_yaml(data)) == data


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=200))
def test_arbitrary_text_either_loads_or_raises_validation_error(text):
    try:
        load_yaml(text)
    except ValidationError:
        pass
