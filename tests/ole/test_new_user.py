"""Every defect a new user hit (issue "A library people use"), one regression test each.

Each test runs the command the new-user report ran (through `ole.cli.main` in this process, or
the entry point in a subprocess where the environment or a mount matters) and asserts what a
user should see. Defects whose fix lies in files this issue's session could not change are
`xfail(strict=True)` with the change they need: they fail today, and the marker must go with the fix.
"""
from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import ole.jobs as jobs
from ole.cli import main
from ole.registry import Registry
from synthetic import fake_evaluate

PROJECT = Path(__file__).resolve().parents[2]
SEED = PROJECT / "bundles" / "coder.yaml"


@pytest.fixture
def root(tmp_path) -> Path:
    target = tmp_path / "bundles"
    target.mkdir()
    shutil.copy(SEED, target / "coder.yaml")
    return target


def ole(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def cli(*args: str, cwd: Path, env: dict | None = None, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    """`ole ARGS` in a fresh interpreter (its own environment and working directory)."""
    return subprocess.run([*prefix, sys.executable, "-m", "ole.cli", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={**os.environ, "PYTHONPATH": str(PROJECT), **(env or {})})


def one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.startswith("ole: error:")]
    assert len(lines) == 1 and "internal error" not in lines[0], err
    return lines[0]


# ----- medium ---------------------------------------------------------------------------------------

def test_a_bundles_folder_of_other_yaml_is_not_taken_for_a_registry(tmp_path):
    """Any `bundles/` with any `*.yaml` above the working directory became the registry and got a
    database written into it."""
    foreign = tmp_path / "home" / "bundles"
    foreign.mkdir(parents=True)
    (foreign / "deploy.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\n")
    work = tmp_path / "home" / "work"
    work.mkdir()
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "OLE_ROOT": ""}
    done = cli("bundle", "list", "--json", cwd=work, env=env)
    assert done.returncode == 0, done.stderr
    assert not (foreign / ".registry").exists() and sorted(os.listdir(foreign)) == ["deploy.yaml"]
    assert (tmp_path / "data" / "ole" / "bundles" / ".registry").is_dir()  # the per-user root served it
    shutil.copy(SEED, foreign / "coder.yaml")  # an OLE seed makes it a project
    assert cli("bundle", "list", cwd=work, env=env).returncode == 0 and (foreign / ".registry").is_dir()


def test_an_agent_under_a_harness_is_told_it_fell_back_to_the_per_user_root(tmp_path):
    """`ole agent work` under `evogym suite run --out ELSEWHERE` runs in the workspace, finds no project and
    used the per-user registry without a word."""
    workspace = tmp_path / "elsewhere" / "workspace"
    workspace.mkdir(parents=True)
    env = {"XDG_DATA_HOME": str(tmp_path / "data"), "OLE_ROOT": "", "EVOPOLICYGYM_WORKSPACE": str(workspace)}
    done = cli("bundle", "list", cwd=workspace, env=env)
    assert done.returncode == 0
    assert "ole: warning: registry" in done.stderr and "per-user root" in done.stderr and "OLE_ROOT" in done.stderr
    named = cli("--root", str(tmp_path / "data" / "ole" / "bundles"), "bundle", "list", cwd=workspace, env=env)
    assert named.returncode == 0 and "per-user root" not in named.stderr  # a named root needs no warning


def test_evogym_run_starts_an_agent_script_of_the_current_folder(tmp_path):
    (tmp_path / "my_agent.py").write_text("import os, pathlib\n"
                                          "pathlib.Path(os.environ['EVOPOLICYGYM_WORKSPACE'], 'ran').touch()\n")
    subprocess.run([sys.executable, "-m", "evogym.cli", "run", "--env", "gym/acrobot", "--run-dir", "runs/demo",
                    "--profile", "quick", "--budget", "2", "--isolation", "none", "--quiet", "--", sys.executable,
                    "my_agent.py"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                   env={**os.environ, "PYTHONPATH": str(PROJECT)})
    assert (tmp_path / "runs" / "demo" / "workspace" / "ran").exists()


@pytest.mark.heavy
@pytest.mark.sandbox
def test_a_read_only_registry_runs_a_task_when_nothing_is_pending(root, tmp_path):
    with Registry(root):
        pass  # seeded while writable
    done = cli("--root", str(root), "run", "--env", "gym/acrobot", "--budget", "2", "--isolation", "none", "--quiet",
               cwd=tmp_path, prefix=("bwrap", "--dev-bind", "/", "/", "--ro-bind", str(root), str(root)))
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_install_docs_say_the_mlflow_ui_needs_the_full_mlflow():
    text = " ".join((PROJECT / "docs" / "install.md").read_text().split())
    assert "mlflow-skinny" in text and "mlflow ui --backend-store-uri ./mlruns" in text
    assert "pip install 'mlflow>=3,<4'" in text


def test_the_evolution_docs_say_the_mlflow_ui_needs_the_full_mlflow():
    text = " ".join((PROJECT / "docs" / "evolution.md").read_text().split())
    at = text.index("mlflow ui --backend-store-uri")
    assert "full `mlflow`" in text[at - 300: at + 300] or "pip install mlflow" in text[at - 300: at + 300]


# ----- low ------------------------------------------------------------------------------------------

def test_a_folder_given_as_a_bundle_file_is_a_one_line_error(root, tmp_path, capsys):
    folder = tmp_path / "drafts"
    folder.mkdir()
    for argv in (["bundle", "validate", str(folder)], ["bundle", "register", str(folder)],
                 ["bundle", "import", str(folder)], ["bundle", "diff", "coder@1", str(folder)]):
        code, out, err = ole(capsys, "--root", str(root), *argv)
        said = err + out  # validate lists its errors on stdout
        assert code == 2 and "internal error" not in said and re.search(r"is a (directory|folder)", said), (argv, said)


@pytest.mark.heavy
@pytest.mark.sandbox
def test_ole_report_in_a_read_only_folder_is_a_one_line_error(root, tmp_path):
    here = tmp_path / "ro"
    here.mkdir()
    done = cli("--root", str(root), "report", cwd=here,
               prefix=("bwrap", "--dev-bind", "/", "/", "--ro-bind", str(here), str(here)))
    assert done.returncode == 2 and "--out runs/report is not writable" in one_error_line(done.stderr)


def test_hints_keep_the_root_they_were_given(root, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(jobs, "run_job", fake_evaluate)
    monkeypatch.chdir(tmp_path)
    draft = tmp_path / "mine.yaml"
    draft.write_text(SEED.read_text().replace("step_size: 0.3", "step_size: 0.1"))
    code, out, _ = ole(capsys, "--root", str(root), "bundle", "register", str(draft), "--parent", "1")
    assert code == 0 and f"next: ole --root {root} gate coder@2" in out
    code, out, _ = ole(capsys, "--root", str(root), "evolve", "--mode", "offline", "--envs", "gym/acrobot",
                       "--budget", "8", "--search-pools", "101", "--gate-pools", "201,202,203,204",
                       "--gate-budgets", "8", "--population", "1", "--generations", "1", "--workers", "1")
    assert code == 0, _
    assert f"`ole --root {root} lineage show`" in out and f"`ole --root {root} rollback" in out


@pytest.mark.heavy
@pytest.mark.sandbox
def test_ole_run_names_its_trace_archive_and_the_lessons_it_read(root, tmp_path):
    """The hint after a run dropped --traces-dir (`ole trace show ID` then found nothing), and repeated
    runs in one folder differed through .ole/lessons.jsonl without saying so."""
    lessons = tmp_path / ".ole" / "lessons.jsonl"
    lessons.parent.mkdir()
    lessons.write_text(json.dumps({"signature": "obs=Box[6]|act=Box[1]", "mechanism": "pd", "env": "gym/acrobot",
                                   "score": 1.0, "created_at": "2026-01-01T00:00:00Z"}) + "\n")
    done = cli("--root", str(root), "run", "--env", "gym/acrobot", "--budget", "2", "--isolation", "none",
               "--traces-dir", "my-traces", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    shown = re.search(r"next: `(ole trace show \S+ --traces-dir my-traces)`", done.stdout)
    assert shown, done.stdout
    assert cli(*shown.group(1).split()[1:], cwd=tmp_path).returncode == 0  # the hint works as written
    assert "read 1 lessons from .ole/lessons.jsonl" in done.stdout and "--no-lessons" in done.stdout
    quiet = cli("--root", str(root), "run", "--env", "gym/acrobot", "--budget", "2", "--isolation", "none",
                "--no-lessons", "--json", cwd=tmp_path)
    assert quiet.returncode == 0 and json.loads(quiet.stdout)["lessons_read"] == 0
    assert len(lessons.read_text().splitlines()) == 2  # the first run added its lesson; --no-lessons added none


def test_fsck_gives_one_verdict_whatever_the_working_directory(root, tmp_path):
    with Registry(root) as reg:
        reg.record_evaluation("coder@1", {"stage": "manual", "trace_ids": ["gone"]})
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "traces").mkdir(parents=True)
    verdicts = {cli("--root", str(root), "fsck", "--no-repair", cwd=tmp_path / d).returncode for d in ("a", "b")}
    assert len(verdicts) == 1


def test_the_estimate_counts_no_tokens_for_the_random_and_tpe_proposers(root, capsys):
    for proposer, tokens in (("random", 0), ("tpe", 0), ("builtin", 0)):
        code, out, _ = ole(capsys, "--root", str(root), "evolve", "--mode", "offline", "--proposer", proposer,
                           "--estimate-only", "--json")
        assert code == 0 and json.loads(out)["estimate"]["tokens"] == tokens, proposer


def test_the_progress_bar_ends_full_when_the_evolve_spends_less_than_estimated():
    """The estimate counts the gates; an evolve that gates nothing ended with its bar stuck at 4/24 and an ETA."""
    pytest.importorskip("tqdm")
    from ole.cli.evolve import _Progress

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    class Meter:
        episodes = 4

    screen = Terminal()
    progress = _Progress(24, stream=screen)
    progress.meter = Meter()  # type: ignore[assignment]
    progress("generation 1: nothing to gate")
    progress.close(finished=True)
    drawn = re.findall(r"evolve: (\d+/\d+) episodes", screen.getvalue())
    assert drawn[0] == "0/24" and drawn[-1] == "4/4", drawn  # it ends full at what was spent


def test_an_empty_or_repeated_env_list_is_refused(root, capsys):
    for envs, message in (("", "names no env"), ("gym/acrobot,gym/acrobot", "gym/acrobot more than once")):
        code, out, err = ole(capsys, "--root", str(root), "evolve", "--mode", "offline", "--envs", envs,
                             "--estimate-only")
        assert code == 2 and message in one_error_line(err) and out == "", envs


def test_gate_settings_that_can_never_release_are_refused(root, capsys):
    code, _, err = ole(capsys, "--root", str(root), "evolve", "--mode", "offline", "--envs", "gym/acrobot",
                       "--gate-pools", "201", "--gate-budgets", "32", "--estimate-only")
    line = one_error_line(err)
    assert code == 2 and "at most 5 pairs" in line and "min_pairs 6" in line and "--gate-pools" in line
    code, _, err = ole(capsys, "--root", str(root), "evolve", "--mode", "offline", "--envs", "gym/acrobot,gym/pusher5",
                       "--gate-pools", "201", "--gate-budgets", "32", "--estimate-only")
    assert code == 0 and "a scope of one env gets at most 5 gate pairs < min_pairs 6" in err


def test_register_without_parent_does_not_silently_start_a_second_root(root, tmp_path, capsys):
    draft = tmp_path / "mine.yaml"
    draft.write_text(SEED.read_text().replace("step_size: 0.3", "step_size: 0.1"))
    code, _, err = ole(capsys, "--root", str(root), "bundle", "register", str(draft))
    assert code == 2 and "--parent 1" in one_error_line(err) and "second lineage root" in err
    code, out, _ = ole(capsys, "--root", str(root), "bundle", "register", str(draft), "--no-parent", "--json")
    assert code == 0 and json.loads(out)["ref"] == "coder@2"
    with Registry(root) as reg:
        assert reg.get("coder@2").bundle.provenance.parents == ()


def test_importing_into_an_empty_registry_says_the_import_became_the_champion(root, tmp_path, capsys):
    assert ole(capsys, "--root", str(root), "bundle", "export", "coder@1", "-o", str(tmp_path / "c.yaml"))[0] == 0
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, _ = ole(capsys, "--root", str(empty), "bundle", "import", str(tmp_path / "c.yaml"))
    assert code == 0 and "first version of this registry, so it is the champion" in out and "without any gate" in out
    other = tmp_path / "other"
    other.mkdir()
    code, out, _ = ole(capsys, "--root", str(other), "bundle", "register", str(SEED))
    assert code == 0 and "so it is the champion" in out


def test_importing_a_parent_after_its_child_names_the_child(root, tmp_path, capsys):
    draft = tmp_path / "mine.yaml"
    draft.write_text(SEED.read_text().replace("step_size: 0.3", "step_size: 0.1"))
    assert ole(capsys, "--root", str(root), "bundle", "register", str(draft), "--parent", "1")[0] == 0
    for ref in ("coder@1", "coder@2"):
        assert ole(capsys, "--root", str(root), "bundle", "export", ref, "-o", str(tmp_path / f"{ref}.yaml"))[0] == 0
    target = tmp_path / "target"
    target.mkdir()
    (target / "other.yaml").write_text(SEED.read_text().replace("name: coder", "name: other"))  # not empty
    assert ole(capsys, "--root", str(target), "bundle", "import", str(tmp_path / "coder@2.yaml"))[0] == 0
    code, out, _ = ole(capsys, "--root", str(target), "bundle", "import", str(tmp_path / "coder@1.yaml"), "--json")
    assert code == 0 and json.loads(out)["children"] == ["coder@1"]  # the child came first: it is coder@1 here


def test_importing_a_parent_after_its_child_relinks_them(root, tmp_path, capsys):
    draft = tmp_path / "mine.yaml"
    draft.write_text(SEED.read_text().replace("step_size: 0.3", "step_size: 0.1"))
    ole(capsys, "--root", str(root), "bundle", "register", str(draft), "--parent", "1")
    for ref in ("coder@1", "coder@2"):
        ole(capsys, "--root", str(root), "bundle", "export", ref, "-o", str(tmp_path / f"{ref}.yaml"))
    target = tmp_path / "target"
    target.mkdir()
    ole(capsys, "--root", str(target), "bundle", "import", str(tmp_path / "coder@2.yaml"))
    ole(capsys, "--root", str(target), "bundle", "import", str(tmp_path / "coder@1.yaml"))
    code, out, _ = ole(capsys, "--root", str(target), "lineage", "show", "--json")
    assert {"parent": "coder@2", "child": "coder@1"} in [{k: e[k] for k in ("parent", "child")}
                                                         for e in json.loads(out)["edges"]]


def test_a_command_agent_that_does_not_exist_is_refused_before_a_host_starts(root, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _, err = ole(capsys, "--root", str(root), "run", "--env", "gym/acrobot", "--agent", "command", "--",
                       "nosuchbinary-ole-test")
    assert code == 2 and "`nosuchbinary-ole-test` is not on PATH" in one_error_line(err)
    code, _, err = ole(capsys, "--root", str(root), "run", "--env", "gym/acrobot", "--agent", "command", "--",
                       "./missing.sh")
    assert code == 2 and "./missing.sh does not exist" in one_error_line(err)
    assert not (tmp_path / "runs").exists()


def test_no_install_line_or_hint_names_a_package_no_index_has():
    """`pip install openloopevolve` (and every `openloopevolve[X]` hint) failed: no index has it yet."""
    texts = {p: p.read_text() for p in [PROJECT / "README.md", PROJECT / "docs" / "install.md",
                                        *(PROJECT / "ole").rglob("*.py"), *(PROJECT / "evogym").rglob("*.py")]}
    for path, text in texts.items():
        for line in text.splitlines():
            named = line.replace("openloopevolve-0.1.0-py3-none-any.whl", "")  # a wheel file installs
            if "pip install" in named and "openloopevolve" in named and "fails" not in line and "--force" not in line:
                raise AssertionError(f"{path}: {line.strip()}")


def test_the_report_docs_cite_the_measured_evolve():
    readme = " ".join((PROJECT / "README.md").read_text().split())
    released = re.findall(r"`(coder@\d+)` =", readme)
    report = " ".join((PROJECT / "docs" / "report.md").read_text().split())
    assert released and all(ref in report for ref in released), released


def test_the_report_shows_the_note_given_with_register(root, tmp_path, capsys):
    from ole.report.collect import collect
    draft = tmp_path / "mine.yaml"
    draft.write_text(SEED.read_text().replace("step_size: 0.3", "step_size: 0.1"))
    ole(capsys, "--root", str(root), "bundle", "register", str(draft), "--parent", "1", "--note", "smaller steps")
    with Registry(root) as reg:
        version = next(v for v in collect(reg).versions if v.ref == "coder@2")
    assert version.note == "smaller steps"


def test_the_registry_docs_give_the_exit_status_of_a_read_only_refusal():
    text = " ".join((PROJECT / "docs" / "registry.md").read_text().split())
    at = text.index("every write is refused with a one-line error")
    assert "exit 1" in text[at: at + 200]


@pytest.mark.heavy
def test_ole_agent_work_leaves_no_temporary_folder(root, tmp_path):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(PROJECT), "TMPDIR": str(scratch)}
    done = subprocess.run([sys.executable, "-m", "evogym.cli", "run", "--env", "gym/acrobot", "--run-dir", "runs/a",
                           "--profile", "quick", "--budget", "2", "--isolation", "none", "--quiet", "--",
                           sys.executable, "-m", "ole.cli", "--root", str(root), "agent", "work"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600, env=env)
    log = tmp_path / "runs" / "a" / "logs" / "agent.log"
    assert done.returncode == 0, (done.stdout[-1500:], done.stderr[-1500:], log.read_text()[-3000:] if log.exists() else "")
    assert list(scratch.glob("ole-agent-*")) == []
