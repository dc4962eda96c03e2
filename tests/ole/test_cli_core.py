"""The `ole` CLI through its entry point: the release/rollback walk-through, errors, --json."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
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


def ole(root: Path, *args: str, capsys) -> tuple[int, str, str]:
    code = main(["--root", str(root), *args])
    out, err = capsys.readouterr()
    return code, out, err


def ole_json(root: Path, *args: str, capsys):
    code, out, err = ole(root, *args, "--json", capsys=capsys)
    assert code == 0, err
    return json.loads(out)


def test_child_release_rollback_and_history_all_from_the_cli(root, tmp_path, capsys):
    child = tmp_path / "child.yaml"
    child.write_text((root / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.5"))
    code, out, _ = ole(root, "bundle", "validate", str(child), capsys=capsys)
    assert code == 0 and out.startswith("ok")
    reg = ole_json(root, "bundle", "register", str(child), "--parent", "1", "--note", "bigger steps", capsys=capsys)
    assert reg == {"ref": "coder@2", "status": "registered", "content_hash": reg["content_hash"], "deduplicated": False,
                   "first_version": False}
    code, tree, _ = ole(root, "lineage", "show", "coder", capsys=capsys)
    assert "coder@1 [active] seed (scope general)" in tree
    assert "└── coder@2 [registered] manual (scope general) — bigger steps" in tree
    graph = ole_json(root, "lineage", "show", capsys=capsys)
    assert {"parent": "coder@1", "child": "coder@2", "kind": "manual", "position": 0} in graph["edges"]
    code, mermaid, _ = ole(root, "lineage", "show", "--format", "mermaid", "--png", str(tmp_path / "l.png"),
                           capsys=capsys)
    assert "n_coder_1 -->|manual| n_coder_2" in mermaid and (tmp_path / "l.png").stat().st_size > 0
    assert ole_json(root, "release", "coder@2", "--reason", "manual test", capsys=capsys)["released"] == "coder@2"
    shown = ole_json(root, "champion", "show", capsys=capsys)
    assert shown == {"channel": "default", "active": "coder@1", "pending": "coder@2", "scopes": [],
                     "canary": None, "stage": None}
    assert ole_json(root, "champion", "activate", capsys=capsys)["active"] == "coder@2"
    back = ole_json(root, "rollback", "--reason", "regressed", capsys=capsys)
    assert (back["from"], back["to"]) == ("coder@2", "coder@1")
    assert ole_json(root, "champion", "activate", capsys=capsys)["active"] == "coder@1"
    history = ole_json(root, "champion", "history", capsys=capsys)
    assert [(t["ref"], t["cause"], t["reason"]) for t in history["tenures"]] == [
        ("coder@1", "default", ""), ("coder@2", "release", "manual test"), ("coder@1", "rollback", "regressed")]
    events = ole_json(root, "events", capsys=capsys)
    assert [(e["kind"], f"{e['name']}@{e['version']}") for e in events] == [
        ("registration", "coder@1"), ("registration", "coder-llm@1"), ("registration", "coder@2"),
        ("release", "coder@2"), ("activation", "coder@2"), ("rollback", "coder@1"), ("activation", "coder@1")]
    code, text, _ = ole(root, "champion", "history", capsys=capsys)
    assert "rollback #6: regressed" in text
    listed = ole_json(root, "bundle", "list", "coder", capsys=capsys)
    assert [(b["ref"], b["status"]) for b in listed] == [("coder@1", "active"), ("coder@2", "rolled_back")]
    diff = ole_json(root, "bundle", "diff", "coder@1", "coder@2", capsys=capsys)
    assert diff["changes"] == [{"component": "action", "field": "step_size", "old": 0.3, "new": 0.5}]
    shown = ole_json(root, "bundle", "show", "coder@2", capsys=capsys)
    assert [e["kind"] for e in shown["events"]] == ["registration", "release", "activation", "rollback", "activation"]
    code, out, _ = ole(root, "fsck", capsys=capsys)
    assert code == 0 and out.startswith("clean: 3 versions, 7 events")


def test_registering_the_same_content_twice_records_nothing(root, capsys):
    again = ole_json(root, "bundle", "register", str(root / "coder.yaml"), capsys=capsys)
    assert again["deduplicated"] and again["ref"] == "coder@1"


def test_a_file_whose_own_parents_contradict_its_identical_twin_is_refused(root, tmp_path, capsys):
    """Identical content whose file names other parents was accepted as "already registered"."""
    import yaml
    doc = yaml.safe_load((root / "coder.yaml").read_text())
    doc.setdefault("provenance", {})["parents"] = [99]
    doc["provenance"]["edge"] = "manual"
    claim = tmp_path / "claim.yaml"
    claim.write_text(yaml.safe_dump(doc))
    code, _, err = ole(root, "bundle", "register", str(claim), capsys=capsys)
    assert code != 0 and "but the file names parents [99]" in err, err


@pytest.mark.parametrize("args, message", [
    (["bundle", "show", "coder@9"], "no version 9 of bundle `coder`; versions: 1–1"),
    (["bundle", "show", "codr"], "did you mean `coder`"),
    (["bundle", "show", "Coder@x"], "bad bundle reference"),
    (["release", "coder", "--reason", "x"], "needs an explicit version"),
    (["release", "coder@1", "--reason", "x"], "already the release of channel `default`"),
    (["rollback", "--reason", "x"], "nothing served channel `default` before coder@1"),
    (["champion", "history", "--at", "yesterday"], "bad time"),
])
def test_errors_are_one_line_with_exit_2(root, capsys, args, message):
    code, out, err = ole(root, *args, capsys=capsys)
    assert code == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and message in err and err.startswith("ole: error: ")


HOSTILE = {
    "python_tag": "name: coder\nloop_policy: !!python/object/apply:os.system ['echo hi']\n",
    "duplicate": "name: coder\nname: coder2\nloop_policy: {}\n",
    "coercion": "name: coder\nloop_policy:\n  memory:\n    carry_lessons: no\n",
    "unknown_key": "name: coder\nloop_policy: {}\nextra: 1\n",
    "alias": "name: coder\nloop_policy: &p {}\napplicability: *p\n",
    "deep": "name: coder\nx: " + "[" * 5000 + "]" * 5000 + "\n",
    "list": "- name: coder\n",
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_bundle_files_are_rejected_and_nothing_is_written(root, tmp_path, capsys, case):
    path = tmp_path / f"{case}.yaml"
    path.write_text(HOSTILE[case])
    with Registry(root) as reg:
        before = reg.events()
    code, _, err = ole(root, "bundle", "register", str(path), capsys=capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and str(path) in err
    code, out, _ = ole(root, "bundle", "validate", str(path), capsys=capsys)
    assert code == 2 and out.startswith("invalid")
    with Registry(root) as reg:
        assert reg.events() == before and reg.fsck().ok


def test_debug_shows_the_traceback_and_json_reports_the_error(root, capsys):
    code, _, err = ole(root, "bundle", "show", "coder@9", "--debug", capsys=capsys)
    assert code == 2 and "Traceback" in err
    code, out, _ = ole(root, "bundle", "show", "coder@9", "--json", capsys=capsys)
    assert json.loads(out.splitlines()[0])["kind"] == "NotFound"


def test_entry_point_runs_as_a_process_with_ole_root(root):
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "OLE_ROOT": str(root)}
    run = subprocess.run([sys.executable, "-m", "ole.cli", "bundle", "list", "--json"], env=env,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    assert [b["ref"] for b in json.loads(run.stdout)] == ["coder@1", "coder-llm@1"]
    wrong = subprocess.run([sys.executable, "-m", "ole.cli", "bundle", "lst"], env=env, capture_output=True,
                           text=True, timeout=60)
    assert wrong.returncode == 2 and "did you mean `list`?" in wrong.stderr
    assert len(wrong.stderr.strip().splitlines()) == 1
    fsck = subprocess.run([sys.executable, "-m", "ole.cli", "fsck"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert fsck.returncode == 0 and fsck.stdout.startswith("clean")


def test_fsck_exits_1_on_damage(root, capsys):
    with Registry(root) as reg:
        blob = reg.blob_path(reg.get("coder@1").blob_hash)
    os.chmod(blob, 0o644)
    blob.write_text("name: tampered\n")
    code, out, _ = ole(root, "fsck", capsys=capsys)
    assert code == 1 and "PROBLEMS" in out and "quarantined" in out


def test_an_empty_root_is_refused_not_the_per_user_one(capsys, monkeypatch, tmp_path):
    """`--root ""` fell back to the per-user root silently (and created ~/.local/share/ole)."""
    from ole.cli import main
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    assert main(["--root", "", "bundle", "list"]) == 2
    assert "registry root is empty" in capsys.readouterr().err
    assert not (tmp_path / "xdg").exists()


@pytest.mark.parametrize("env", ["", ","])
def test_run_with_no_env_id_is_a_clear_error(root, capsys, env):
    """`ole run --env ""` or `--env ,` was an internal IndexError after the runs."""
    code, _, err = ole(root, "run", "--env", env, capsys=capsys)
    assert code == 2 and "--env needs an env id" in err and "internal error" not in err


def test_a_reason_cannot_forge_an_event_line_or_drive_the_terminal(root, tmp_path, capsys):
    """A reason with a newline printed a fake `#99 ... release` line in `ole events`; ESC
    sequences reached the terminal. Stored as given (JSON keeps it), printed escaped."""
    child = tmp_path / "child.yaml"
    child.write_text((root / "coder.yaml").read_text().replace("step_size: 0.3", "step_size: 0.8"))
    assert ole(root, "bundle", "register", str(child), "--parent", "1", capsys=capsys)[0] == 0
    reason = "ok\n#99  2026-01-01  release  coder@9  forged\x1b[2J\x1b]0;title\x07"
    assert ole(root, "release", "coder@2", "--reason", reason, capsys=capsys)[0] == 0
    for args in (["events"], ["champion", "history"], ["bundle", "show", "coder@2"]):
        code, out, _ = ole(root, *args, capsys=capsys)
        assert code == 0 and "\x1b" not in out and "\x07" not in out, args
        assert not any(line.startswith("#99") for line in out.splitlines()), (args, out)
    code, out, _ = ole(root, "events", "--json", capsys=capsys)
    assert reason in [e["payload"].get("reason") for e in json.loads(out)]


@pytest.mark.parametrize("args", [["run", "--env", "gym/acrobot", "--seed", "-1"],
                                  ["evolve", "--mode", "offline", "--seed", "-1", "--estimate-only"],
                                  ["evolve", "--mode", "offline", "--agent-seeds", "0,-1", "--estimate-only"]])
def test_negative_seeds_are_refused_up_front(root, capsys, args):
    """`ole run --seed -1` started a host, then the agent died on the seed (no_ok_submit, exit 1)."""
    code, _, err = ole(root, *args, capsys=capsys)
    assert code == 2 and "a seed must be >= 0, got -1" in err and len(err.strip().splitlines()) == 1


def test_negative_seeds_are_refused_by_the_records_too():
    from pydantic import ValidationError as PydanticError

    from ole.evolve import EvolveConfig
    from ole.gate import GateConfig
    from ole.trace import RunCondition
    for make in (lambda: RunCondition(host="builtin", seed=-1), lambda: GateConfig(seed=-5),
                 lambda: EvolveConfig(seed=-1), lambda: EvolveConfig(agent_seeds=(0, -1)),
                 lambda: EvolveConfig(agent_seeds=(1, 1))):
        with pytest.raises(PydanticError):
            make()


def _child(root: Path, tmp_path: Path, step: str, parent: str, capsys) -> str:
    path = tmp_path / f"child-{step}.yaml"
    path.write_text((root / "coder.yaml").read_text().replace("step_size: 0.3", f"step_size: {step}"))
    return ole_json(root, "bundle", "register", str(path), "--parent", parent, capsys=capsys)["ref"]


def test_rollback_goes_back_to_what_served_never_to_an_unvetted_parent(root, tmp_path, capsys):
    """Issue 30: after releasing coder@3 (parent coder@2, never gated nor released) a rollback goes back
    to coder@1, which served before; the parent only when asked, and then only with --force."""
    two = _child(root, tmp_path, "0.5", "1", capsys)
    three = _child(root, tmp_path, "0.7", "2", capsys)
    assert (two, three) == ("coder@2", "coder@3")
    ole_json(root, "release", three, "--reason", "by hand", capsys=capsys)
    ole_json(root, "champion", "activate", capsys=capsys)
    code, _, err = ole(root, "rollback", "--to-parent", "--reason", "x", capsys=capsys)
    assert code == 2 and "coder@2 was never released nor passed a gate" in err and "--force" in err
    back = ole_json(root, "rollback", "--reason", "harm", capsys=capsys)
    assert back["to"] == "coder@1" and back["from"] == "coder@3"
    assert ole_json(root, "champion", "activate", capsys=capsys)["active"] == "coder@1"
    forced = ole_json(root, "rollback", "--to", "coder@2", "--force", "--reason", "operator", capsys=capsys)
    assert forced["to"] == "coder@2" and forced["forced"] is True


def test_a_canary_is_ended_or_promoted_from_the_cli_and_show_says_what_staging_does(root, tmp_path, capsys):
    two = _child(root, tmp_path, "0.5", "1", capsys)
    ole_json(root, "release", two, "--exposure", "0.5", "--reason", "staged", capsys=capsys)
    code, text, _ = ole(root, "champion", "show", capsys=capsys)
    assert code == 0 and "runs as a canary on 50%" in text and "becomes active at the next" not in text
    ole_json(root, "champion", "activate", capsys=capsys)  # the task boundary: the canary starts
    with Registry(root) as reg:
        assert reg.canaries() and reg.champion().ref == "coder@1"
    ended = ole_json(root, "rollback", "--reason", "stop it", capsys=capsys)
    assert ended["ended"] == two and ended["stage"] == "rolled_back"
    with Registry(root) as reg:
        assert not reg.canaries() and reg.champion().ref == "coder@1" and reg.get(two).status == "rolled_back"
    three = _child(root, tmp_path, "0.7", "1", capsys)
    ole_json(root, "release", three, "--exposure", "0.25", "--reason", "staged", capsys=capsys)
    ole_json(root, "champion", "activate", capsys=capsys)
    assert ole_json(root, "champion", "promote", "--reason", "looks good", capsys=capsys)["promoted"] == three
    with Registry(root) as reg:
        assert reg.champion().ref == three and not reg.canaries()
    code, _, err = ole(root, "champion", "promote", "--reason", "again", capsys=capsys)
    assert code != 0 and "no canary runs" in err
