"""Driver steps: one typed key, one commit (write the registry event under the step's key, then mark)."""
from __future__ import annotations

import pytest

from ole.evolve.store import EvaluationStore, step


def test_a_step_key_is_the_spelling_stored_runs_hold():
    """Workdirs written before the typed key resume: the key is the same text."""
    assert str(step("gate", "offline", "coder@2", "coder@1")) == "gate|offline|coder@2|coder@1"
    assert str(step("monitor", 7, "t-1")) == "monitor|7|t-1" and str(step("round", 3)) == "round|3"
    assert step("look", 1, 2) == step("look", 1, 2) and step("look", 1, 2) != step("look", 2, 1)


def test_commit_writes_under_the_steps_key_then_marks_and_a_failed_write_marks_nothing(tmp_path):
    store = EvaluationStore(tmp_path / "store.sqlite")
    done, keys = step("release", "offline", "coder@2"), []
    assert store.commit(done, {"ref": "coder@2"}, keys.append) == {"ref": "coder@2"}
    assert keys == [store.key(done)] and store.step(done) == {"ref": "coder@2"}
    assert store.key(done).endswith("|release|offline|coder@2")

    failed = step("release", "offline", "coder@3")

    def refuse(key: str) -> None:
        raise RuntimeError("registry down")
    with pytest.raises(RuntimeError):
        store.commit(failed, {"ref": "coder@3"}, refuse)
    assert store.step(failed) is None  # not marked: a resume writes it again (idempotent under its key)
    store.commit(failed, {"ref": "coder@3"}, keys.append)
    assert keys[-1] == store.key(failed) and store.step(failed) == {"ref": "coder@3"}
