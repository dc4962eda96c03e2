"""Command agents are evolvable: the command line travels in the run condition of every job.

`ole run --agent command` and `ole evolve --host command` share one path (`RunCondition.command`
-> `ole.runner.run_bundle`); the loop policy reaches the external agent only as instructions,
and the scripted agent here obeys them, so two bundles make it behave differently.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ole.errors import ValidationError
from ole.evolve import Suite
from ole.registry import Registry
from ole.runner import run_task
from ole.trace import RunCondition, TaskSpec, TraceArchive

ROOT = Path(__file__).resolve().parents[2]
AGENT = str(Path(__file__).resolve().parents[2] / "experiments" / "agents" / "instructed_agent.py")
COMMAND = (sys.executable, AGENT)


def tiny_gate_yaml() -> str:
    """The default gate with room for one- or two-pair samples and no adaptive extension."""
    import yaml

    from ole.gate import load_config
    cfg = load_config().model_copy(update={"min_pairs": 2, "min_families": 1, "max_pairs": None})
    return yaml.safe_dump(cfg.model_dump(mode="json"))


@pytest.fixture
def registry_root(tmp_path):
    root = tmp_path / "reg"
    root.mkdir()
    shutil.copy(ROOT / "bundles" / "coder.yaml", root)
    return root


def _submit_sizes(trace) -> list[int]:
    return [len(it.submitted_indices) for it in trace.history if it.submit_id is not None]


@pytest.mark.heavy
def test_the_brief_changes_what_the_command_agent_does(tmp_path, registry_root):
    with Registry(registry_root) as reg:
        champ = reg.champion()
        lp = champ.bundle.loop_policy
        child = reg.register(champ.bundle.model_copy(update={"loop_policy": lp.model_copy(update={
            "action": lp.action.model_copy(update={"episodes_per_submit": 2})})}), parents=[1])
    cond = RunCondition(host="command", command=COMMAND)
    sizes = {}
    for ref in ("coder@1", child.ref):
        trace = run_task(TaskSpec(env="gym/acrobot", budget=4), ref, "command", cond, root=registry_root,
                         runs_dir=tmp_path / "runs", traces_dir=tmp_path / "traces", isolation="none")
        assert trace.verified and trace.condition.command == COMMAND
        sizes[ref] = _submit_sizes(trace)
    assert sizes == {"coder@1": [4], child.ref: [2, 2]}


def test_a_command_suite_needs_its_command_and_only_it_takes_one():
    with pytest.raises(ValueError, match="needs a command line"):
        Suite(host="command")
    with pytest.raises(ValueError, match="only it takes one"):
        Suite(host="builtin", command=("x",))
    assert Suite(host="command", command=COMMAND).instances([1], [0])[0][1].command == COMMAND


def test_cli_refuses_a_command_host_without_a_command(capsys):
    from ole.cli import main
    assert main(["evolve", "--mode", "offline", "--host", "command", "--estimate-only"]) == 2
    assert "needs a command" in capsys.readouterr().err
    with pytest.raises(ValidationError):
        from ole.cli.common import agent_command
        agent_command("builtin", ["--", "python", "x.py"], example="")


@pytest.mark.heavy
@pytest.mark.sandbox
def test_ole_evolve_with_a_command_host_end_to_end(tmp_path, registry_root):
    """Tiny offline run: bootstrap, one candidate, gate; every run is the command agent obeying its bundle."""
    gate = tmp_path / "gate.yaml"
    gate.write_text(tiny_gate_yaml())
    out = subprocess.run(
        [sys.executable, "-m", "ole.cli", "--root", str(registry_root), "evolve", "--mode", "offline", "--json",
         "--host", "command", "--envs", "gym/acrobot", "--budget", "4", "--search-pools", "101",
         "--gate-pools", "201", "--population", "1", "--generations", "1", "--workers", "1",
         "--gate-config", str(gate), "--workdir", str(tmp_path / "work"), "--traces", str(tmp_path / "traces"),
         "--", *COMMAND], capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    data = json.loads(out.stdout)
    assert len(data["candidates"]) == 1
    gated = data["verdict"] is not None  # None: the candidate lost its search pair, nothing to gate
    assert data["verdict"] in (("release", "reject", "indecisive") if gated else (None,))
    traces = list(TraceArchive(tmp_path / "traces"))
    assert len(traces) == (4 if gated else 2)  # champion and candidate on the search (and gate) instance
    with Registry(registry_root) as reg:
        assert [e.kind for e in reg.events()].count("gate_decision") == int(gated)
        for t in traces:
            assert t.condition.host == "command" and t.condition.command == COMMAND
            k = reg.get(f"{t.bundle_name}@{t.bundle_version}").bundle.loop_policy.action.episodes_per_submit
            sizes = _submit_sizes(t)
            assert sizes and all(n == min(k, 4 - sum(sizes[:i])) for i, n in enumerate(sizes)), (k, sizes)
