"""`ole gate`: the paired evaluation and the gate for a version a person wrote (ole.challenge).

The runs are `synthetic.fake_evaluate` (one worker: serial in this process), whose score moves
with the loop policy: more retest episodes +15 % on every instance. That makes the verdict known
in advance, so the tests can follow a hand-written version from `bundle register` through the
gate to a release bounded by the gate's pairs. The real host runs in tests/ole/test_api.py (the
docs/python.md example gates a hand-written version on it).
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import ole.jobs as jobs
from ole.cli import main
from ole.registry import Registry
from synthetic import fake_evaluate

PROJECT = Path(__file__).resolve().parents[2]
ENVS = "gym/acrobot,gym/pusher5"  # two families: the default gate's min_families 2 can hold


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    """A project folder (bundles/ with the seed) as the working directory; every run is fake_evaluate."""
    monkeypatch.setattr(jobs, "run_job", fake_evaluate)
    (tmp_path / "bundles").mkdir()
    shutil.copy(PROJECT / "bundles" / "coder.yaml", tmp_path / "bundles" / "coder.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def ole(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def draft(here: Path, retests: int = 6, envs: list[str] | None = None) -> Path:
    """A version written by hand: the seed with more retest episodes (and, optionally, a narrower scope)."""
    text = (PROJECT / "bundles" / "coder.yaml").read_text().replace("retest_episodes: 4", f"retest_episodes: {retests}")
    if envs is not None:
        text = text.replace("  env_ids: []", "  env_ids: [" + ", ".join(envs) + "]", 1)
    path = here / f"mine-{retests}.yaml"
    path.write_text(text)
    return path


def test_a_hand_written_version_is_gated_recorded_and_released_within_its_evidence(here, capsys):
    code, out, _ = ole(capsys, "bundle", "register", str(draft(here)), "--parent", "1", "--note", "more retests")
    assert code == 0 and "next: ole gate coder@2" in out
    code, out, err = ole(capsys, "gate", "coder@2", "--envs", ENVS, "--budgets", "32", "--pools", "201,202,203",
                         "--json")
    assert code == 0, err
    decision = json.loads(out)
    assert (decision["challenger"], decision["champion"], decision["verdict"]) == ("coder@2", "coder@1", "release")
    assert decision["stats"]["n_pairs"] == 6 and decision["bound"] == "hosts=builtin;envs=gym/acrobot,gym/pusher5;budget=32-32"
    assert "gate: coder@2 vs coder@1 on 6 unseen instances" in err
    with Registry(here / "bundles") as reg:  # recorded as an engine's decision: one gate_decision event
        events = reg.events(kind="gate_decision")
        assert [e.ref for e in events] == ["coder@2"] and events[0].payload["verdict"] == "release"
        assert reg.get("coder@2").status == "gated"
    code, out, _ = ole(capsys, "release", "coder@2", "--reason", "gated by hand", "--json")
    assert code == 0 and json.loads(out)["scope"] == "hosts=builtin;envs=gym/acrobot,gym/pusher5;budget=32-32"
    # released, it serves those tasks: a gate against "what serves them" has nothing to judge
    code, _, err = ole(capsys, "gate", "coder@2", "--envs", ENVS, "--budgets", "32", "--pools", "201,202,203")
    assert code == 2 and "coder@2 already serves these tasks" in err
    # the same gate again returns the stored decision: nothing is run, nothing recorded twice
    code, out, err = ole(capsys, "gate", "coder@2", "--vs", "coder@1", "--envs", ENVS, "--budgets", "32",
                         "--pools", "201,202,203")
    assert code == 0 and "run coder@" not in err and "-> RELEASE" in out
    with Registry(here / "bundles") as reg:
        assert len(reg.events(kind="gate_decision")) == 1
    # and the report shows it, as it shows an evolve's
    code, out, _ = ole(capsys, "report", "--out", str(here / "report"), "--json")
    summary = json.loads(out)
    assert code == 0 and summary["gates"] == 1
    assert [Path(w).parent.name for w in summary["workdirs"]] == ["gate"]  # its runs are read with it


def test_a_version_its_author_ran_on_a_gate_instance_is_judged_indecisive(here, capsys):
    """A run of the challenger outside any paired evaluation (`ole run --bundle coder@2 --pool-seed 201`)
    means its author could have tuned on that instance: a gate on it cannot release."""
    from ole.chosen import ChosenVersion
    from ole.jobs import EvalJob
    from ole.trace import RunCondition, TaskSpec, TraceArchive
    assert ole(capsys, "bundle", "register", str(draft(here)), "--parent", "1")[0] == 0
    with Registry(here / "bundles") as reg:
        mine = reg.get("coder@2")
    job = EvalJob(chosen=ChosenVersion(mine.ref, mine.bundle), task=TaskSpec(env="gym/acrobot", budget=32, pool_seed=201),
                  condition=RunCondition(host="builtin", seed=0), runs_root=str(here / "runs"))
    TraceArchive(here / "traces").append(fake_evaluate(job))
    code, out, err = ole(capsys, "gate", "coder@2", "--envs", ENVS, "--budgets", "32", "--pools", "201,202,203",
                         "--json")
    decision = json.loads(out)
    assert code == 0 and decision["verdict"] == "indecisive", err
    assert decision["stats"]["leaked_keys"] == ["gym/acrobot|pool201|seed0"]
    assert any("were seen by the proposer" in r for r in decision["reasons"])


def test_gate_refusals_before_anything_runs(here, capsys):
    assert ole(capsys, "bundle", "register", str(draft(here, envs=["gym/acrobot"])), "--parent", "1")[0] == 0
    cases = [
        (["gate", "coder"], "needs an explicit version"),
        (["gate", "coder@2", "--envs", "gym/pusher5", "--budgets", "32"], "does not apply to"),
        (["gate", "coder@2", "--envs", "gym/acrobot", "--budgets", "32", "--pools", "201"],
         "could judge at most 1 pairs"),
        (["gate", "coder@2", "--vs", "coder@2", "--envs", "gym/acrobot"], "the challenger itself"),
        (["gate", "coder@1", "--envs", "gym/acrobot"], "already serves these tasks"),
        (["gate", "coder@2", "--envs", ""], "names no env"),
        (["gate", "coder@2", "--envs", "gym/acrobot,gym/acrobot"], "more than once"),
        (["gate", "coder@9"], "no version 9 of bundle `coder`"),
    ]
    for argv, message in cases:
        code, out, err = ole(capsys, *argv)
        assert code == 2 and message in err and out == "", (argv, err)
    assert not (here / "runs").exists() and not (here / "traces").exists()


def test_gate_defaults_to_the_challengers_scope_and_the_champion_that_serves_it(here, capsys):
    """Without --envs a version scoped to acrobot is gated on acrobot; without --vs against the version
    the channel routes those tasks to (here a scope champion released earlier, not the general one)."""
    assert ole(capsys, "bundle", "register", str(draft(here, retests=6, envs=["gym/acrobot"])), "--parent", "1")[0] == 0
    with Registry(here / "bundles") as reg:
        reg.release("coder@2", reason="scope champion of acrobot", force=True)
        reg.activate_pending()
    assert ole(capsys, "bundle", "register", str(draft(here, retests=8, envs=["gym/acrobot"])), "--parent", "2")[0] == 0
    code, out, err = ole(capsys, "gate", "coder@3", "--budgets", "32", "--pools", "201,202,203,204,205,206", "--json")
    decision = json.loads(out)
    assert code == 0, err
    assert decision["champion"] == "coder@2" and {p["task"]["env"] for p in decision["pairs"]} == {"gym/acrobot"}
