"""env_instances parsing: sizes from bounds, never expanded blindly (H1, H2)."""
import pytest

from evogym import instances as spec


@pytest.mark.parametrize("raw, count, ids", [
    ([0, 1, 2], 3, [0, 1, 2]), ("7-10,16", 5, [7, 8, 9, 10, 16]), ("5,5,5", 3, [5, 5, 5]),
    (" 1 , 3-4 ", 3, [1, 3, 4]), ([], 0, []), ("0", 1, [0]),
])
def test_parse_valid(raw, count, ids):
    req = spec.parse(raw, 1024)
    assert (req.count, req.ids, req.out_of_range) == (count, ids, False)


@pytest.mark.parametrize("raw", [[True, False], [-1], [1.5], ["3"], "٣", "", " ", "1,,2", "4-2", "a", "1-",
                                 "-3", None, 7, {"a": 1}, [[1]], "1.0"])
def test_parse_errors(raw):
    with pytest.raises(spec.ParseError):
        spec.parse(raw, 1024)


def test_huge_range_is_not_expanded():
    req = spec.parse("0-99999999999", 1024)
    assert req.count == 100000000000 and req.ids is None and req.out_of_range


def test_out_of_range_detected_from_bounds():
    assert spec.parse([1023], 1024).out_of_range is False
    assert spec.parse("1020-1024", 1024).out_of_range is True


@pytest.mark.parametrize("raw", ["1" + "0" * 5000, "0-" + "9" * 5000, "9" * 19])
def test_ids_with_too_many_digits_are_out_of_range_not_a_crash(raw):
    """int() refuses strings over 4300 digits; such an id is simply beyond every pool (issue 18)."""
    req = spec.parse(raw, 1024)
    assert req.out_of_range and req.count >= 1
