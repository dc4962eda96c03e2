"""Failures that used to look like successes (issue 20) fail loudly: one line, non-zero exit,
nothing archived, and checked before any work starts.

Real CLI entry points on temporary roots; `ole evolve` runs on the synthetic evaluator
(`synthetic.fake_evaluate`), `evogym run` and the read-only registry on the real host and
a real bubblewrap mount.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ole.jobs as jobs
from ole.cli import build_parser, main
from ole.extras import EXTRAS
from ole.trace import TraceArchive
from synthetic import fake_evaluate

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(tmp_path) -> Path:
    target = tmp_path / "bundles"
    target.mkdir()
    shutil.copy(PROJECT / "bundles" / "coder.yaml", target / "coder.yaml")
    return target


def ole(root: Path, capsys, *args: str) -> tuple[int, str, str]:
    code = main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith(("ole: error:", "ole evolve: error:")), err
    return lines[0]


# ----- missing extras, proposer typos, unwritable folders: refused before anything runs -----------

def test_a_live_llm_without_the_llm_extra_is_refused_before_the_task(root, tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(EXTRAS, "llm", "litellm_is_not_installed_here")
    monkeypatch.chdir(tmp_path)
    code, out, err = ole(root, capsys, "run", "--env", "gym/acrobot", "--agent", "llm", "--model", "openai/gpt-4o-mini")
    line = _one_error_line(err)
    # a hint that installs today (openloopevolve is on no package index yet): the extra's own package
    assert code == 2 and "install the `llm` extra: pip install 'litellm<2,>=1.50'" in line and out == ""
    assert "pip install '.[llm]'" in line and "openloopevolve[" not in line
    assert not (tmp_path / "runs").exists() and not (tmp_path / "traces").exists()  # nothing ran, nothing archived
    code, _, err = ole(root, capsys, "evolve", "--mode", "offline", "--host", "llm", "--model", "openai/gpt-4o-mini",
                       "--estimate-only")
    assert code == 2 and "`llm` extra" in _one_error_line(err)
    from ole.llm import LLMClient
    from ole.extras import MissingExtra
    with pytest.raises(MissingExtra):  # the same refusal wherever an agent or proposer builds its client
        LLMClient.from_model_string("openai/gpt-4o-mini")


@pytest.mark.parametrize("spec, message", [
    ("ranom", "unknown --proposer `ranom` (hint: did you mean `random`?)"),
    ("buitlin", "did you mean `builtin`?"),
    ("gpt4", "a live model as PROVIDER/MODEL"),
    ("scripted:/nonexistent/script.json", "no file /nonexistent/script.json"),
])
def test_a_mistyped_proposer_is_refused_with_the_closest_name(root, capsys, spec, message):
    code, out, err = ole(root, capsys, "evolve", "--mode", "offline", "--proposer", spec, "--estimate-only")
    assert code == 2 and message in _one_error_line(err) and out == ""


def test_a_live_proposer_needs_the_llm_extra_and_tpe_the_baselines_extra(root, capsys, monkeypatch):
    monkeypatch.setitem(EXTRAS, "llm", "litellm_is_not_installed_here")
    monkeypatch.setitem(EXTRAS, "baselines", "optuna_is_not_installed_here")
    for spec, extra in (("openai/gpt-4o-mini", "llm"), ("tpe", "baselines")):
        code, _, err = ole(root, capsys, "evolve", "--mode", "offline", "--proposer", spec, "--estimate-only")
        assert code == 2 and f"install the `{extra}` extra" in _one_error_line(err)


@pytest.mark.parametrize("flag", ["--traces-dir", "--runs-dir"])
def test_an_unwritable_output_folder_is_refused_before_the_task(root, tmp_path, capsys, monkeypatch, flag):
    monkeypatch.chdir(tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    code, _, err = ole(root, capsys, "run", "--env", "gym/acrobot", flag, str(blocker / "out"))
    assert code == 2 and f"{flag} {blocker / 'out'} is not writable" in _one_error_line(err)
    assert not list(tmp_path.glob("runs/*")) and not list(tmp_path.glob("traces/*"))  # no task ran


def test_evolve_refuses_an_unwritable_workdir_before_it_runs(root, tmp_path, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, _, err = ole(root, capsys, "evolve", "--mode", "offline", "--workdir", str(blocker / "w"),
                       "--envs", "gym/acrobot", "--population", "2", "--generations", "1")
    assert code == 2 and "--workdir" in _one_error_line(err) and "not writable" in err


def test_evolve_exits_1_when_every_llm_proposal_failed(root, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(jobs, "run_job", fake_evaluate)
    script = tmp_path / "silent.json"
    script.write_text("[]")  # a model that never answers: every proposal is an `LLM call failed`
    code, out, err = ole(root, capsys, "evolve", "--mode", "offline", "--envs", "gym/acrobot",
                         "gymnasium/MiniGrid-FourRooms-v0", "--budget", "8", "--search-pools", "101",
                         "--gate-pools", "201", "202", "--gate-budgets", "8", "--population", "2", "--generations", "1",
                         "--workers", "1", "--workdir", str(tmp_path / "work"), "--traces", str(tmp_path / "traces"),
                         "--proposer", f"scripted:{script}")
    assert code == 1, err[-2000:]
    assert re.search(r"error: all \d+ proposals failed before a candidate existed: LLM call failed", out), out


# ----- damaged traces: listed, named, quarantined by fsck ----------------------------------------

@pytest.fixture
def traces(tmp_path) -> tuple[Path, str, Path]:
    """An archive with one good trace and one truncated file."""
    from types import SimpleNamespace
    from ole.bundle import load_bundle_yaml
    from ole.trace import RunCondition, TaskSpec
    archive = TraceArchive(tmp_path / "traces")
    bundle = load_bundle_yaml(PROJECT / "bundles" / "coder.yaml")
    for seed in (0, 1):
        job = SimpleNamespace(task=TaskSpec(env="gym/acrobot", budget=8, pool_seed=101), bundle_ref="coder@1",
                              bundle_hash=bundle.content_hash, bundle=bundle,
                              condition=RunCondition(host="builtin", seed=seed))
        archive.append(fake_evaluate(job))
    good, bad = sorted(archive.root.glob("*.json"))
    bad.write_bytes(bad.read_bytes()[:200])
    return archive.root, good.stem, bad


def test_trace_ls_lists_a_damaged_file_by_name_and_the_readable_ones(root, traces, capsys):
    folder, good, bad = traces
    code, out, err = ole(root, capsys, "trace", "ls", "--traces-dir", str(folder))
    assert code == 0 and good in out and "DAMAGED" in out and bad.stem in out and "see `ole fsck`" in out
    code, out, _ = ole(root, capsys, "trace", "ls", "--traces-dir", str(folder), "--json")
    rows = json.loads(out)
    assert [r.get("status") for r in rows] == [None, "damaged"] and rows[1]["file"] == str(bad)
    code, _, err = ole(root, capsys, "trace", "show", bad.stem, "--traces-dir", str(folder))
    line = _one_error_line(err)
    assert code == 1 and f"trace file {bad} is damaged" in line and "internal error" not in line


def test_fsck_sees_a_damaged_trace_and_quarantines_it(root, traces, capsys):
    folder, good, bad = traces
    code, out, _ = ole(root, capsys, "fsck", "--traces-dir", str(folder), "--no-repair")
    assert code == 1 and f"problem: trace {bad} is damaged" in out and bad.is_file()
    code, out, _ = ole(root, capsys, "fsck", "--traces-dir", str(folder), "--json")
    report = json.loads(out)
    moved = folder / "quarantine" / bad.name
    assert code == 1 and not report["ok"] and report["quarantined"] == [str(moved)] and report["traces"] == 2
    assert moved.is_file() and not bad.exists()
    code, out, _ = ole(root, capsys, "fsck", "--traces-dir", str(folder))
    assert code == 0 and out.startswith("clean:") and "1 traces" in out
    assert [t.trace_id for t in TraceArchive(folder)] == [good]
    code, _, err = ole(root, capsys, "fsck", "--traces-dir", str(folder / "missing"))
    assert code == 2 and "is not a directory" in _one_error_line(err)


# ----- an empty root, a read-only root ------------------------------------------------------------

def test_an_empty_root_says_nothing_is_registered(tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = ole(empty, capsys, "champion", "show")
    line = _one_error_line(err)
    assert code == 2 and "no bundle is registered" in line and "IndexError" not in line
    code, out, err = ole(empty, capsys, "champion", "show", "--json")
    assert code == 2 and json.loads(out)["kind"] == "NotFound"
    assert ole(empty, capsys, "bundle", "list")[0] == 0


@pytest.mark.sandbox
def test_a_read_only_registry_can_be_listed_and_refuses_writes(root, capsys):
    assert ole(root, capsys, "bundle", "list")[0] == 0  # created and seeded while writable
    if shutil.which("bwrap") is None:
        pytest.fail("bubblewrap is missing: `apt-get install bubblewrap`")

    def run_ro(*args: str) -> subprocess.CompletedProcess:
        command = ["bwrap", "--dev-bind", "/", "/", "--ro-bind", str(root), str(root),
                   sys.executable, "-m", "ole.cli", "--root", str(root), *args]
        env = {**os.environ, "PYTHONPATH": str(PROJECT)}
        return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)

    listed = run_ro("bundle", "list")
    assert listed.returncode == 0, listed.stderr
    assert "coder@1" in listed.stdout and "is read-only here" in listed.stderr
    assert run_ro("champion", "show").returncode == 0
    refused = run_ro("bundle", "register", str(PROJECT / "bundles" / "coder-llm.yaml"))
    assert refused.returncode == 1 and "is read-only: register needs write access" in refused.stderr
    assert run_ro("fsck", "--no-repair").returncode == 0


# ----- argument conventions ----------------------------------------------------------------------

def test_list_flags_take_spaces_commas_and_repeats_alike():
    parser = build_parser()
    for argv in (["--envs", "gym/acrobot", "gym/pusher5"], ["--envs", "gym/acrobot,gym/pusher5"],
                 ["--envs", "gym/acrobot", "--envs", "gym/pusher5"], ["--env", "gym/acrobot", "--env", "gym/pusher5"]):
        args = parser.parse_args(["evolve", "--mode", "offline", *argv, "--gate-pools", "201,202", "203"])
        assert args.envs == ("gym/acrobot", "gym/pusher5") and args.gate_pools == (201, 202, 203)
    for argv in (["--env", "gym/acrobot", "gym/pusher5"], ["--env", "gym/acrobot,gym/pusher5"],
                 ["--env", "gym/acrobot", "--env", "gym/pusher5"], ["--envs", "gym/acrobot", "--env", "gym/pusher5"]):
        assert parser.parse_args(["run", *argv]).env == ("gym/acrobot", "gym/pusher5")


def test_a_bad_list_item_is_one_line_naming_the_flag(capsys):
    assert main(["evolve", "--mode", "offline", "--gate-pools", "201,x"]) == 2
    err = capsys.readouterr().err
    assert "argument --gate-pools: `x` is not an integer" in err and "_ints" not in err and "invalid" not in err


def test_ole_version():
    done = subprocess.run([sys.executable, "-m", "ole.cli", "--version"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(PROJECT)}, timeout=120)
    assert done.returncode == 0 and done.stdout.startswith("ole (openloopevolve) 0.1.0")


# ----- evogym run: an agent that failed and submitted nothing is not a success -------------------

def test_evogym_run_exits_1_when_the_agent_failed_without_a_submit(tmp_path):
    done = subprocess.run([sys.executable, "-m", "evogym.cli", "run", "--env", "gym/acrobot", "--run-dir",
                           str(tmp_path / "run"), "--profile", "quick", "--isolation", "none", "--quiet", "--",
                           sys.executable, "-c", "import sys; sys.exit(3)"],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert done.returncode == 1, done.stderr[-2000:]
    assert "the agent exited 3 and submitted nothing" in done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1])["agent_exit"] == 3
