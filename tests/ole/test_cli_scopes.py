"""Scoped champions from the command line: `ole champion show --env`, per-scope release and
rollback, `ole lineage show`, and routing / `--force` in `ole run` and `ole agent work` against a
real host."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ole import runner
from ole.agents.base import AgentResult, HostAgent
from ole.cli import main
from ole.registry import Registry
from ole.trace import TraceArchive

PROJECT = Path(__file__).resolve().parents[2]
FOURROOMS = "gymnasium/MiniGrid-FourRooms-v0"


@pytest.fixture
def root(tmp_path) -> Path:
    target = tmp_path / "bundles"
    target.mkdir()
    for name in ("coder.yaml", "coder-llm.yaml"):
        shutil.copy(PROJECT / "bundles" / name, target / name)
    return target


def ole(root: Path, *args: str, capsys) -> tuple[int, str, str]:
    code = main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


def ole_json(root: Path, *args: str, capsys):
    code, out, err = ole(root, *args, "--json", capsys=capsys)
    assert code == 0, err
    return json.loads(out)


def refused(root: Path, *args: str, capsys) -> str:
    code, out, err = ole(root, *args, capsys=capsys)
    assert code == 2 and out == "", err
    assert len(err.strip().splitlines()) == 1 and err.startswith("ole") and "(hint: " in err, err
    return err


def scoped_file(tmp_path: Path, root: Path, families: str = "[minigrid]", step: str = "0.5") -> Path:
    text = (root / "coder.yaml").read_text().replace("step_size: 0.3", f"step_size: {step}")
    path = tmp_path / f"scoped-{step}.yaml"
    path.write_text(text.replace("env_families: []", f"env_families: {families}"))
    return path


def test_scoped_release_routing_and_rollback_from_the_cli(root, tmp_path, capsys):
    reg = ole_json(root, "bundle", "register", str(scoped_file(tmp_path, root)), "--parent", "1",
                   "--edge", "specialization", capsys=capsys)
    assert reg["ref"] == "coder@2"
    released = ole_json(root, "release", "coder@2", "--reason", "better on minigrid", capsys=capsys)
    assert (released["scope"], released["channel"]) == ("families=minigrid", "default")
    with Registry(root) as registry:
        before = len(registry.events())
    shown = ole_json(root, "champion", "show", "--env", FOURROOMS, capsys=capsys)
    assert (shown["ref"], shown["scope"], shown["task"]["family"], shown["task"]["budget"]) == (
        "coder@2", "families=minigrid", "minigrid", 32)
    assert "pending: release" in shown["reason"] and shown["matched"] == ["families=minigrid", "general"]
    code, text, _ = ole(root, "champion", "show", "--env", "gym/acrobot", "--budget", "128", capsys=capsys)
    assert code == 0 and text.startswith("gym/acrobot on channel default: coder@1 (scope general)")
    assert "why: no scope champion on channel `default` matches gym/acrobot" in text
    with Registry(root) as registry:
        assert len(registry.events()) == before  # show never activates
    listing = ole_json(root, "champion", "show", capsys=capsys)
    assert listing["scopes"] == [{"channel": "default", "scope": "families=minigrid", "active": None,
                                  "inherited": False, "pending": "coder@2", "pending_removal": False,
                                  "evidence": "released #4 without gate evidence: no gate decision: released on a "
                                              "person's word, not bounded by evidence",
                                  "canary": None, "stage": None}]
    changes = ole_json(root, "champion", "activate", capsys=capsys)["changes"]
    assert changes == {"families=minigrid": [None, "coder@2"]}
    code, text, _ = ole(root, "champion", "show", capsys=capsys)
    assert "families=minigrid" in text and "coder@2" in text
    code, tree, _ = ole(root, "lineage", "show", "coder", capsys=capsys)
    assert "└── coder@2 [active] specialization (scope families=minigrid)" in tree
    back = ole_json(root, "rollback", "--scope", "families=minigrid", "--reason", "regressed", capsys=capsys)
    assert back["removed"] and back["from"] == "coder@2" and back["to"] is None
    assert ole_json(root, "champion", "activate", capsys=capsys)["changes"] == {"families=minigrid": ["coder@2", None]}
    history = ole_json(root, "champion", "history", "--scope", "families=minigrid", capsys=capsys)
    assert [(t["ref"], t["reason"]) for t in history["tenures"]] == [("coder@2", "better on minigrid")]
    assert [e["kind"] for e in history["events"]] == ["release", "activation", "rollback", "activation"]
    assert ole_json(root, "champion", "history", capsys=capsys)["tenures"][-1]["ref"] == "coder@1"
    code, out, _ = ole(root, "fsck", capsys=capsys)
    assert code == 0 and out.startswith("clean")


@pytest.mark.parametrize("args, message", [
    (["champion", "show", "--env", "gym/acrobt"], "did you mean `gym/acrobot`"),
    (["champion", "show", "--env", "gym/acrobot", "--channel", "defualt"], "did you mean `default`"),
    (["champion", "show", "--channel", "defualt"], "did you mean `default`"),
    (["champion", "show", "--budget", "32"], "--budget describes a task and needs --env"),
    (["champion", "show", "--env", "gym/acrobot", "--profile", "quik"], "unknown profile"),
    (["rollback", "--scope", "colour=red", "--reason", "x"], "bad scope `colour=red`"),
    (["rollback", "--scope", "families=minigrid", "--reason", "x"], "scope `families=minigrid` has no champion"),
    (["champion", "history", "--scope", "envs=x;families=y"], "fields must come in the order"),
    (["run", "--env", "gym/acrobot", "--force"], "--force only applies to an explicit --bundle"),
    (["run", "--env", "gym/acrobot", "--bundle", "coder-llm@1"], "host builtin is not in hosts [llm]"),
    (["run", "--env", "gym/acrobot", "--channel", "nightly"], "no channel `nightly`"),
])
def test_scope_mistakes_are_one_line_errors(root, tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    err = refused(root, *args, capsys=capsys)
    assert message in err
    assert not (tmp_path / "runs").exists()  # refused before any host or run folder


class Idle(HostAgent):
    """Submits nothing: the run finalizes at once (not scored), enough to see the selection."""

    def work(self, ctx):
        return AgentResult(finish_reason="finished_early")


def test_ole_run_routes_to_the_scope_champion_and_records_forcing(root, tmp_path, monkeypatch, capsys):
    ole_json(root, "bundle", "register", str(scoped_file(tmp_path, root, "[curated]")), "--parent", "1",
             "--edge", "specialization", capsys=capsys)
    ole_json(root, "release", "coder@2", "--reason", "curated gain", capsys=capsys)
    monkeypatch.setattr(runner, "get_agent", lambda name, **kw: Idle())
    common = ["--budget", "4", "--isolation", "none", "--runs-dir", str(tmp_path / "runs"),
              "--traces-dir", str(tmp_path / "traces"), "--lessons", str(tmp_path / "l.jsonl"), "--json"]
    code, out, err = ole(root, "run", "--env", "gym/acrobot", *common, capsys=capsys)
    routed = json.loads(out)
    assert (routed["bundle"], routed["scope"], routed["forced"]) == ("coder@2", "families=curated", False)
    assert "bundle coder@2: coder@2 is the champion of scope `families=curated`" in err
    code, out, err = ole(root, "run", "--env", "gym/acrobot", "--bundle", "coder-llm@1", "--force", *common,
                         capsys=capsys)
    forced = json.loads(out)
    assert (forced["bundle"], forced["scope"], forced["forced"]) == ("coder-llm@1", "hosts=llm;budget=8-", True)
    assert "FORCED outside its scope" in err and "host builtin is not in hosts [llm]" in forced["why"]


@pytest.mark.heavy
def test_a_forced_scored_run_keeps_its_selection_in_the_archive(root, tmp_path):
    from ole.registry.scopes import task_context  # noqa: F401  (the registry resolves families the same way)
    from ole.trace import RunCondition, TaskSpec
    trace = runner.run_task(TaskSpec(env="gym/acrobot", budget=4), "coder-llm@1", "builtin",
                            RunCondition(host="builtin"), root=root, runs_dir=tmp_path / "runs",
                            traces_dir=tmp_path / "traces", isolation="none", force=True)
    assert trace.verified and trace.selection.forced and trace.selection.ref == "coder-llm@1"
    assert TraceArchive(tmp_path / "traces").get(trace.trace_id).selection == trace.selection


def _harness(tmp_path: Path, root: Path, name: str, *agent_args: str) -> subprocess.CompletedProcess:
    agent = [sys.executable, "-m", "ole.cli", "--root", str(root), "agent", "work", "--log-dir",
             str(tmp_path / f"logs-{name}"), *agent_args]
    return subprocess.run([sys.executable, "-m", "evogym.cli", "run", "--env", "gym/acrobot", "--run-dir",
                           str(tmp_path / f"run-{name}"), "--budget", "4", "--isolation", "none", "--", *agent],
                          capture_output=True, text=True, timeout=600, cwd=PROJECT)


@pytest.mark.heavy
def test_agent_work_refuses_an_out_of_scope_bundle_unless_forced(root, tmp_path):
    refused_run = _harness(tmp_path, root, "refused", "--bundle", "coder-llm@1")
    assert json.loads(refused_run.stdout.strip().splitlines()[-1])["agent_exit"] == 2
    said = (tmp_path / "run-refused" / "logs" / "agent.log").read_text()
    assert "does not apply to gym/acrobot" in said and "--force" in said and "Traceback" not in said
    assert not (tmp_path / "logs-refused" / "iterations.jsonl").exists()
    forced_run = _harness(tmp_path, root, "forced", "--bundle", "coder-llm@1", "--force")
    assert forced_run.returncode == 0, forced_run.stdout + forced_run.stderr
    selection = json.loads((tmp_path / "logs-forced" / "selection.json").read_text())
    assert (selection["ref"], selection["forced"]) == ("coder-llm@1", True)
    assert (tmp_path / "logs-forced" / "iterations.jsonl").read_text().strip()
