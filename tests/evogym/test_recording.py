"""Bulk recording (issue 12): the feedback tree is byte-for-byte what the per-step host
wrote before, and the per-episode pieces behave at their edges."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from evogym.feedback import episode_files, externalize
from evogym.recording import DictObsStore, EpisodeData, EpisodeRecorder, Formatter, ObsStore

from feedback_cases import CASES, tree_digest

GOLDEN = json.loads((Path(__file__).with_name("data") / "feedback_golden.json").read_text())


@pytest.mark.sandbox
@pytest.mark.parametrize("case", sorted(CASES))
def test_feedback_tree_is_byte_for_byte_the_golden_one(case, tmp_path):
    got, want = tree_digest(case, tmp_path), GOLDEN[case]
    assert sorted(got) == sorted(want)
    assert {k: v for k, v in got.items() if want[k] != v} == {}


def test_obs_store_grows_and_falls_back_to_a_list():
    store = ObsStore(capacity=3)
    for i in range(300):
        store.add(np.full(2, i, np.float32))
    assert store.values().shape == (300, 2) and store.values()[299, 0] == 299
    store.add(np.zeros(3, np.float32))  # the shape changed: everything becomes a list
    values = store.values()
    assert isinstance(values, list) and len(values) == 301 and values[0].tolist() == [0.0, 0.0]


def test_obs_store_copies_what_the_env_may_reuse():
    store, obs = ObsStore(8), np.zeros(2)
    store.add(obs)
    obs[:] = 7  # an env that writes its next observation into the same buffer
    store.add(obs)
    assert store.values().tolist() == [[0.0, 0.0], [7.0, 7.0]]


def test_dict_store_keeps_columns_until_the_keys_change():
    first = {"a": np.zeros(2), "b": 1}
    store = DictObsStore(4, first)
    store.add(first)
    store.add({"a": np.ones(2), "b": 2})
    assert list(store.values()) == ["a", "b"] and store.values()["b"] == [1, 2]
    store.add({"b": 3})
    rows = store.values()
    assert isinstance(rows, list) and [r["b"] for r in rows] == [1, 2, 3] and rows[1]["a"].tolist() == [1, 1]


def test_recorded_info_is_a_copy():
    rec, info = EpisodeRecorder(4), {"pos": np.zeros(1), "tags": [1]}
    rec.add(np.zeros(1), 0, 0.0, False, False, info, False)
    info["pos"][0], info["tags"][0] = 5.0, 9
    assert rec.steps[0][4]["pos"][0] == 0.0 and rec.steps[0][4]["tags"] == [1]


def test_empty_episode_files():
    files = episode_files(EpisodeData([], [], "out", "", []))
    assert files == {"trajectory.jsonl": b"", "stdout.txt": b"out", "stderr.txt": b""}
    assert externalize([]) is None and externalize({}) is None


@pytest.fixture
def helper_allowed(monkeypatch):
    """The helper process formats on any machine (CI has two cores, below `min_cores`)."""
    monkeypatch.setattr(Formatter, "min_cores", 1)


@pytest.mark.parametrize("cores", ["helper", "in_process"])
def test_formatter_writes_what_inline_formatting_makes(tmp_path, monkeypatch, cores):
    """With a spare core the helper makes the files while the caller goes on; without one they are
    made when asked for; both write exactly what `episode_files` makes."""
    monkeypatch.setattr(Formatter, "min_cores", 1 if cores == "helper" else 10_000)
    rec = EpisodeRecorder(600)
    for t in range(600):
        rec.add(np.full(3, t * 0.1, np.float32), t % 3, -1.0, False, t == 599, {"x": np.float64(t)}, t == 5)
    data = EpisodeData(rec.obs.values(), rec.steps, "o", "e", [])
    pending = Formatter.submit(data, tmp_path / "ep")
    assert (pending.future is not None) == (cores == "helper")
    if cores == "in_process":
        assert not (tmp_path / "ep").exists()  # nothing runs beside the caller's stepping
    names = pending.result()
    want = episode_files(data)
    assert sorted(names) == sorted(want) and {n: (tmp_path / "ep" / n).read_bytes() for n in names} == want


def test_formatter_does_not_recreate_an_aborted_tree(tmp_path, helper_allowed):
    data = EpisodeData(np.zeros((1, 2)), [(0, 0.0, True, False, {}, False)])
    with pytest.raises(OSError):
        Formatter.submit(data, tmp_path / "gone" / "ep").result()
    assert not (tmp_path / "gone").exists()


def test_files_made_after_the_episodes_are_shared_with_the_helper(tmp_path, monkeypatch):
    """Below `min_cores` nothing is made beside the stepping; `share` then hands every second
    episode to the helper and the caller makes the rest: the same files either way."""
    monkeypatch.setattr(Formatter, "min_cores", 10_000)
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1})
    datas = []
    for k in range(5):
        rec = EpisodeRecorder(50)
        for t in range(20 + k):
            rec.add(np.full(2, t + k, np.float64), [t * 0.5], 1.0, False, False, {}, False)
        datas.append(EpisodeData(rec.obs.values(), rec.steps, f"out{k}", "", []))
    pending = [Formatter.submit(d, tmp_path / f"ep{k}") for k, d in enumerate(datas)]
    assert all(p.future is None for p in pending)
    Formatter.share(pending)
    assert [p.future is not None for p in pending] == [False, True, False, True, False]
    for k, p in enumerate(pending):
        want = episode_files(datas[k])
        names = p.result()
        assert sorted(names) == sorted(want)
        assert {n: (tmp_path / f"ep{k}" / n).read_bytes() for n in names} == want


def test_error_lines_and_output_are_valid_utf8_whatever_the_policy_wrote():
    """An exception message with a lone surrogate was written as a `\\ud800` escape, which strict
    JSON parsers refuse; now it is replaced, and the line is plain UTF-8 JSON."""
    import json
    from evogym.feedback import cap_text, error_line
    line = error_line("act_error", "act_error: bad \ud800 value", "2026-12-02T00:00:00Z", "tb \udfff")
    assert "\\ud" not in line.lower() and json.loads(line)["message"] == "act_error: bad ? value"
    line.encode("utf-8")  # strict: no surrogate survives
    assert cap_text("x\ud800y") == "x?y" and cap_text("x\ud800y", dropped=3) == "x?y\n[truncated 3 bytes]"
