"""Caller mistakes on the `ole` CLI: one line, a hint, exit 2, and nothing written (issue 13)."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ole.cli import main
from ole.registry import Registry

PROJECT = Path(__file__).resolve().parents[2]


@pytest.fixture
def root(tmp_path) -> Path:
    target = tmp_path / "bundles"
    target.mkdir()
    for seed in (PROJECT / "bundles").glob("*.yaml"):
        shutil.copy(seed, target / seed.name)
    return target


@pytest.fixture
def cwd(tmp_path, monkeypatch) -> Path:
    """An empty working directory: commands that write relative paths would write here."""
    where = tmp_path / "cwd"
    where.mkdir()
    monkeypatch.chdir(where)
    return where


def refused(root: Path, capsys, *args: str) -> str:
    """Run `ole`; assert exit 2, one stderr line with a hint, nothing on stdout; return stderr."""
    code = main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("ole"), err
    assert "(hint: " in err, err
    return err


@pytest.mark.parametrize("args, message", [
    (["--mode", "online", "--every-k", "0"], "bad --every-k"),
    (["--mode", "online", "--tasks", "0"], "bad --tasks"),
    (["--mode", "offline", "--envs", "gym/acrobt"], "did you mean `gym/acrobot`"),
    (["--mode", "offline", "--profile", "quik"], "unknown profile 'quik'"),
    (["--mode", "offline", "--gate-config", "no/such/gate.yaml"], "no file no/such/gate.yaml"),
    (["--mode", "offline", "--proposer", "scripted:no/such.json"], "--proposer scripted:no/such.json: no file"),
    (["--mode", "offline", "--proposer", "replay:no/such.jsonl"], "no file no/such.jsonl"),
    (["--mode", "offline", "--host", "llm"], "--host llm needs --model"),
    (["--mode", "offline", "--host", "llm", "--model", "replay:none.jsonl"], "--model replay:none.jsonl"),
    (["--mode", "offline", "--profil", "quick"], "unrecognized arguments: --profil"),
    # a flag the mode never reads (they were accepted and ignored)
    (["--mode", "online", "--generations", "3", "--eta", "2"], "--generations, --eta only apply to --mode offline"),
    (["--mode", "online", "--max-scopes", "2"], "--max-scopes only applies to --mode offline"),
    (["--mode", "offline", "--tasks", "9"], "--tasks only applies to --mode online"),
    # what the real run refuses before it starts (an estimate said nothing)
    (["--mode", "offline", "--workdir", "/dev/null/w"], "--workdir /dev/null/w is not writable"),
    (["--mode", "offline", "--traces", "/dev/null/t"], "--traces /dev/null/t is not writable"),
])
def test_evolve_estimate_refuses_what_a_run_would_refuse(root, cwd, capsys, args, message):
    err = refused(root, capsys, "evolve", *args, "--estimate-only")
    assert message in err and "internal error" not in err
    assert list(cwd.iterdir()) == []


def test_evolve_estimate_only_still_succeeds_on_good_flags(root, cwd, capsys):
    assert main(["--root", str(root), "evolve", "--mode", "online", "--every-k", "2", "--estimate-only"]) == 0
    assert "episodes" in capsys.readouterr().err
    assert list(cwd.iterdir()) == []


def test_ole_run_with_a_typo_exits_2_once_and_leaves_no_run_folder(root, cwd, capsys):
    err = refused(root, capsys, "run", "--env", "gym/acrobt", "--runs-dir", "runs")
    assert "did you mean `gym/acrobot`" in err and err.count("hint") == 1
    assert not (cwd / "runs").exists() and not (cwd / "traces").exists()
    refused(root, capsys, "run", "--env", "gym/acrobot", "--profile", "quik")
    refused(root, capsys, "run", "--env", "gym/acrobot", "--budget", "0")
    assert list(cwd.iterdir()) == []


def test_lineage_png_into_a_missing_folder_is_a_caller_mistake(root, tmp_path, capsys):
    err = refused(root, capsys, "lineage", "show", "--png", str(tmp_path / "no" / "such" / "x.png"))
    assert "does not exist" in err


def test_events_kind_typo_names_the_option_not_a_command(root, capsys):
    err = refused(root, capsys, "events", "--kind", "gate_decison")
    assert "unknown --kind `gate_decison`" in err and "did you mean `gate_decision`" in err
    assert "command" not in err


@pytest.mark.parametrize("verb", ["show", "history", "activate"])
def test_champion_of_an_unknown_channel_is_refused(root, capsys, verb):
    err = refused(root, capsys, "champion", verb, "--channel", "defualt")
    assert "no channel `defualt`" in err and "did you mean `default`" in err
    with Registry(root) as reg:
        assert [e.kind for e in reg.events()] == ["registration", "registration"]


def test_a_channel_with_a_release_is_known(root, tmp_path, capsys):
    child = tmp_path / "child.yaml"
    child.write_text((root / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.5"))
    assert main(["--root", str(root), "bundle", "register", str(child), "--parent", "1"]) == 0
    assert main(["--root", str(root), "release", "coder@2", "--reason", "r", "--channel", "classic"]) == 0
    capsys.readouterr()
    assert main(["--root", str(root), "champion", "show", "--channel", "classic"]) == 0
    assert "active coder@1" in capsys.readouterr().out


@pytest.mark.parametrize("argv, shows", [([], "COMMAND"), (["bundle"], "validate"), (["champion"], "history")])
def test_bare_command_or_noun_prints_help(root, capsys, argv, shows):
    assert main(["--root", str(root), *argv]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: ole") and shows in out and err == ""


def test_option_prefixes_are_refused(root, capsys):
    err = refused(root, capsys, "bundle", "list", "--jso")
    assert "--jso" in err


def test_unknown_command_keeps_its_did_you_mean(root, capsys):
    err = refused(root, capsys, "bundle", "lst")
    assert "unknown command `lst`" in err and "did you mean `list`" in err


@pytest.mark.parametrize("argv, message", [(["bundle", "register"], "required: FILE"),
                                           (["release", "coder@1"], "required: --reason"),
                                           (["bundle", "show", "coder", "--root"], "expected one argument")])
def test_missing_arguments_are_one_line_with_a_hint(root, capsys, argv, message):
    assert message in refused(root, capsys, *argv)
