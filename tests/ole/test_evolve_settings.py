"""An evolve you can name, replay and list: `ole evolve --config FILE`, WORKDIR/evolve.yaml, `ole evolve ls`.

Runs are `synthetic.fake_evaluate` (one worker, in this process): the tests are about which
settings an evolve ran with and what it left in its workdir, not about the host.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

import ole.jobs as jobs
from ole.cli import main
from ole.evolves import EvolveSettings, load_settings
from synthetic import fake_evaluate

PROJECT = Path(__file__).resolve().parents[2]
SMALL = {"mode": "offline", "envs": ["gym/acrobot", "gym/pusher5"], "budget": 8, "search_pools": [101],
         "gate_pools": [201, 202, 203], "gate_budgets": [8], "population": 2, "generations": 1, "workers": 1,
         "seed": 1}


@pytest.fixture
def here(tmp_path, monkeypatch) -> Path:
    monkeypatch.setattr(jobs, "run_job", fake_evaluate)
    (tmp_path / "bundles").mkdir()
    shutil.copy(PROJECT / "bundles" / "coder.yaml", tmp_path / "bundles" / "coder.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def ole(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def config(here: Path, **changes) -> Path:
    path = here / "evolve.yaml"
    path.write_text(yaml.safe_dump({**SMALL, **changes}))
    return path


def test_an_evolve_from_a_config_file_is_resumed_from_the_copy_in_its_workdir(here, capsys):
    code, out, err = ole(capsys, "evolve", "--config", str(config(here)), "--json")
    assert code == 0, err
    first = json.loads(out)
    assert first["config"]["suite"]["envs"] == ["gym/acrobot", "gym/pusher5"] and "run coder@1" in err
    work = here / "runs" / "evolve-offline"
    resolved = load_settings(work / "evolve.yaml")
    # every setting the mode reads is written, paths absolute; the gate config is the copy beside it
    assert resolved.mode == "offline" and resolved.envs == ("gym/acrobot", "gym/pusher5")
    assert resolved.eta == 3 and resolved.max_scopes == 3 and resolved.ablate is True and resolved.proposer == "builtin"
    assert resolved.tasks is None and resolved.every_k is None  # online's: not read offline, not written
    assert Path(resolved.workdir) == work.resolve() and Path(resolved.root) == (here / "bundles").resolve()
    assert Path(resolved.gate_config) == (work / "gate.yaml").resolve()
    outcome = json.loads((work / "outcome.json").read_text())
    assert outcome["summary"]["candidates"] == first["candidates"]
    # the copy resumes it from anywhere: nothing is run again, the same summary comes back
    elsewhere = here / "elsewhere"
    elsewhere.mkdir()
    import os
    os.chdir(elsewhere)
    code, out, err = ole(capsys, "evolve", "--config", str(work / "evolve.yaml"), "--json")
    assert code == 0, err
    again = json.loads(out)
    assert "run coder@" not in err and again["candidates"] == first["candidates"] and again["gates"] == first["gates"]


def test_a_flag_wins_over_its_file_and_the_file_is_strict(here, capsys):
    path = config(here, population=3)
    code, out, _ = ole(capsys, "evolve", "--config", str(path), "--population", "5", "--estimate-only", "--json")
    assert code == 0
    runs = json.loads(out)["estimate"]["runs"]
    code, out, _ = ole(capsys, "evolve", "--config", str(path), "--estimate-only", "--json")
    assert json.loads(out)["estimate"]["runs"] < runs  # 3 candidates cost less than the 5 the flag asked for
    for bad, message in (({"gate_pool": [201]}, "gate_pool"), ({"budget": "8"}, "budget"),
                         ({"mode": "online"}, "--population, --generations only apply to --mode offline")):
        code, out, err = ole(capsys, "evolve", "--config", str(config(here, **bad)), "--estimate-only")
        assert code == 2 and message in err and out == "", (bad, err)
    code, _, err = ole(capsys, "evolve", "--config", str(here / "missing.yaml"), "--estimate-only")
    assert code == 2 and "no such file" in err
    code, _, err = ole(capsys, "evolve", "--estimate-only")
    assert code == 2 and "needs a mode" in err


def test_evolve_ls_lists_the_evolves_of_this_root_with_their_outcome(here, capsys):
    assert ole(capsys, "evolve", "--config", str(config(here)), "--workdir", "runs/first")[0] == 0
    # an interrupted one: its settings are written, its outcome never is
    unfinished = here / "runs" / "second"
    unfinished.mkdir(parents=True)
    resolved = load_settings(here / "runs" / "first" / "evolve.yaml")
    (unfinished / "evolve.yaml").write_text(resolved.model_copy(update={"workdir": str(unfinished)}).dump_yaml())
    # another registry's evolve is not this root's
    other = here / "runs" / "other"
    other.mkdir()
    (other / "evolve.yaml").write_text(EvolveSettings(mode="offline", root=str(here / "another")).dump_yaml())
    code, out, _ = ole(capsys, "evolve", "ls", "--json")
    listed = json.loads(out)
    assert code == 0 and [Path(e["workdir"]).name for e in listed["evolves"]] == ["first", "second"]
    assert [e["status"] for e in listed["evolves"]] == ["finished", "unfinished"]
    assert any("another registry" in s for s in listed["skipped"])
    code, out, _ = ole(capsys, "evolve", "ls")
    assert "finished" in out and "resume one: ole evolve --config WORKDIR/evolve.yaml" in out
    code, out, _ = ole(capsys, "evolve", "ls", "--in", str(here / "runs" / "first"), "--json")
    assert [Path(e["workdir"]).name for e in json.loads(out)["evolves"]] == ["first"]
    code, _, err = ole(capsys, "evolve", "ls", "--in", str(here / "nowhere"))
    assert code == 2 and "is not a directory" in err
