"""`evogym` caller mistakes and HTTP rejections say why, and a refused command writes nothing (issue 13)."""
from __future__ import annotations

import json
import re
import socket
import subprocess
import sys

import pytest

from evogym.cli import main

EVOGYM = [sys.executable, "-m", "evogym.cli"]
POLICY = ("class Policy:\n    def __init__(self, o, a, m): pass\n    def reset(self, i): pass\n"
          "    def act(self, obs): return 0\n")


def refused(capsys, *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 2, err
    assert out == "" and len(err.strip().splitlines()) == 1 and err.startswith("evogym"), err
    assert "(hint: " in err and "Traceback" not in err, err
    return err


def test_serve_on_a_port_in_use_is_one_line_and_writes_no_run_dir(tmp_path, capsys):
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        port = busy.getsockname()[1]
        err = refused(capsys, "serve", "--env", "gym/acrobot", "--run-dir", str(tmp_path / "r"), "--port", str(port))
    finally:
        busy.close()
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port" in err
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("bind, message", [("0.0.0.0", "loopback only"), ("localhost", "not an IP address")])
def test_serve_refuses_a_non_loopback_bind_before_the_run_dir(tmp_path, capsys, bind, message):
    err = refused(capsys, "serve", "--env", "gym/acrobot", "--run-dir", str(tmp_path / "r"), "--bind", bind)
    assert message in err and not (tmp_path / "r").exists()


def test_data_make_refuses_an_unknown_env_and_writes_nothing(tmp_path, capsys):
    err = refused(capsys, "data", "make", "--env", "gym/acrobt", "--out", str(tmp_path / "d"))
    assert "did you mean `gym/acrobot`" in err and not (tmp_path / "d").exists()


def test_report_of_a_missing_run_says_so(tmp_path, capsys):
    err = refused(capsys, "report", str(tmp_path / "no" / "such" / "run"))
    assert "no run directory" in err and "not finalized" not in err
    (tmp_path / "plain").mkdir()
    assert "not a run directory" in refused(capsys, "report", str(tmp_path / "plain"))


@pytest.mark.parametrize("argv, shows", [([], "COMMAND"), (["data"], "make"), (["suite"], "smoke")])
def test_bare_command_or_noun_prints_help(capsys, argv, shows):
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert out.startswith("usage: evogym") and shows in out and err == ""


@pytest.mark.parametrize("argv, message", [
    (["serve", "--env", "gym/acrobot", "--run-dir", "r", "--profil", "quick"], "unrecognized arguments: --profil"),
    (["data", "mak"], "unknown command `mak` (hint: did you mean `make`?)"),
    (["sevre"], "unknown command `sevre` (hint: did you mean `serve`?)"),
    (["serve", "--env", "gym/acrobot", "--run-dir", "r", "--isolation", "bwarp"], "unknown --isolation `bwarp`"),
])
def test_parser_errors_name_no_internal_dest(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    err = refused(capsys, *argv)
    assert message in err
    for internal in ("cmd", "data_cmd", "suite_cmd", "command_name", "data_verb"):
        assert f" {internal}" not in err and f"{internal}:" not in err
    assert list(tmp_path.iterdir()) == []


def test_missing_required_subcommand_argument_names_the_flag(capsys):
    err = refused(capsys, "data", "make", "--out", "x")
    assert "--env" in err


def test_http_rejections_carry_the_reason_and_their_submit_id(live_host):
    live = live_host(budget=8)
    live.write_policy(POLICY)
    cases = [("0-99", "budget_invalid", "requested"), ([], "budget_invalid", "requested"),
             ([5000], "invalid_env_instance", "must lie in"), ([-1], "invalid_env_instance", None)]
    for index, (instances, status, words) in enumerate(cases):
        code, body = live.submit(instances)
        assert code == 400, body
        assert body["submit_id"] == index, body  # the number of the feedback folder it wrote
        assert body["error"]["message"], body
        assert body["status"] == status or body["status"] == "budget_invalid", body
        if words:
            assert words in body["error"]["message"], body
        assert (live.run_dir / "workspace" / "feedback" / f"submit_{index:03d}" / "summary.json").is_file()
    code, data = live.request("GET", "/submit")
    assert code == 405 and json.loads(data)["status"] == "method_not_allowed" and b"POST" in data
    live.close()


def test_info_obs_storage_matches_the_feedback_for_acrobot(live_host):
    live = live_host(budget=8)
    live.write_policy(POLICY)
    _, info = live.get("/info")
    code, body = live.submit([0])
    assert code == 200 and body["status"] == "ok", body
    episode = live.run_dir / "workspace" / "feedback" / "submit_000" / "episodes"
    files = {p.name for p in next(episode.iterdir()).iterdir()}
    assert info["env_meta"]["obs_storage"] == ("external" if "observations.npy" in files else "inline")
    assert info["env_meta"]["obs_storage"] == "external"  # action 0 never swings up: a 500-step episode
    live.close()


def test_envs_lists_core16_and_resolves_any_gymnasium_id(capsys):
    assert main(["envs", "--json", "gym/acrobot", "gymnasium/CartPole-v1"]) == 0
    rows = json.loads(capsys.readouterr().out)
    acrobot, cartpole = rows
    assert acrobot == {**acrobot, "env": "gym/acrobot", "family": "curated", "max_episode_steps": 500,
                       "random_baseline": -500.0, "paper_best_agent": "GPT-5.5", "obs": "Box(6,) float32",
                       "action": "Discrete(3)", "core16": True}
    assert cartpole["core16"] is False and cartpole["random_baseline"] is None and cartpole["action"] == "Discrete(2)"
    assert "did you mean" in refused(capsys, "envs", "gym/acrobt")


@pytest.mark.slow
def test_envs_table_lists_all_of_core16(capsys):
    from evogym.envs import CORE16
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert all(slug in out for slug in CORE16)


CHECK_CASES = {
    "ok": (POLICY, 0, "a submit would run its episodes"),
    "syntax": ("class Policy(\n", 1, "parse and class Policy: import_error"),
    "no_class": ("x = 1\n", 1, "class Policy"),
    "denied": ("import requests\n" + POLICY, 1, "imports: denied_import: requests"),
    "init_raises": (POLICY.replace("pass\n    def reset", "raise ValueError('bad init')\n    def reset", 1), 1,
                    "bad init"),
    "act_raises": (POLICY.replace("return 0", "raise RuntimeError('no act')"), 1, "no act"),
    "bad_action": (POLICY.replace("return 0", "return 'left'"), 1, "invalid_action"),
}


@pytest.mark.parametrize("case", sorted(CHECK_CASES))
def test_check_applies_the_submit_checks_without_budget(tmp_path, capsys, case):
    source, code, expected = CHECK_CASES[case]
    system = tmp_path / "system"
    system.mkdir()
    (system / "policy.py").write_text(source)
    assert main(["check", str(system), "--env", "gym/acrobot", "--isolation", "none"]) == code
    out = capsys.readouterr().out
    assert expected in out, out
    assert "no budget spent" in out


def test_check_needs_an_env_outside_a_workspace(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("EVOPOLICYGYM_API", raising=False)
    (tmp_path / "system").mkdir()
    assert "--env" in refused(capsys, "check", str(tmp_path / "system"))


def test_run_prints_progress_and_where_the_agent_log_is(tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text("import sys\nprint('agent starting')\nsys.exit(3)\n")
    run_dir = tmp_path / "run"
    out = subprocess.run(EVOGYM + ["run", "--env", "gym/acrobot", "--run-dir", str(run_dir), "--budget", "4",
                                   "--isolation", "none", "--", sys.executable, str(agent)],
                         capture_output=True, text=True, timeout=300)
    log = run_dir / "logs" / "agent.log"
    assert f"agent output goes to {log}" in out.stderr
    assert "agent exited 3: agent starting" in out.stderr
    assert "finalizing" in out.stderr and "run closed" in out.stderr
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    assert summary["agent_log"] == str(log) and summary["agent_exit"] == 3


@pytest.mark.heavy
def test_suite_run_where_every_agent_fails_exits_1_and_says_why(tmp_path):
    out = subprocess.run(EVOGYM + ["suite", "run", "--envs", "gym/acrobot", "--budget", "2", "--profile", "quick",
                                   "--isolation", "none", "--jobs", "1", "--out", str(tmp_path / "s"),
                                   "--agent", f"{sys.executable} -c 'import sys; sys.exit(\"unknown flag --bogus\")'"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "agent exited 1: unknown flag --bogus" in out.stderr
    assert "no run was scored" in out.stderr


@pytest.mark.heavy
def test_html_report_of_a_run(tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text(
        "import json, os, urllib.request\n"
        f"open(os.path.join(os.environ['EVOPOLICYGYM_SYSTEM'], 'policy.py'), 'w').write({POLICY!r})\n"
        "for _ in range(2):\n"
        "    req = urllib.request.Request(os.environ['EVOPOLICYGYM_SUBMIT_URL'], "
        "data=json.dumps({'env_instances': [0]}).encode(), headers={'Content-Type': 'application/json', "
        "'Authorization': 'Bearer ' + os.environ['EVOPOLICYGYM_TOKEN']})\n"
        "    urllib.request.urlopen(req).read()\n")
    run_dir = tmp_path / "run"
    subprocess.run(EVOGYM + ["run", "--env", "gym/acrobot", "--run-dir", str(run_dir), "--budget", "2",
                             "--isolation", "none", "--quiet", "--", sys.executable, str(agent)],
                   capture_output=True, text=True, timeout=300, check=True)
    assert main(["report", str(run_dir), "--html"]) == 0
    page = (run_dir / "report.html").read_text()
    assert page.count('<tr data-submit="') == 2 and 'class="chart"' in page
    assert re.findall(r'(?:src|href)="(?!data:|#)([^"]*)"', page) == []  # nothing outside the file
    assert "<script" not in page
    doc = json.loads((run_dir / "run.json").read_text())
    assert f"{doc['outcome']['final_score']:.4g}" in page
    text = subprocess.run(EVOGYM + ["report", str(run_dir)], capture_output=True, text=True).stdout
    assert "None" not in text


def test_text_report_prints_a_dash_for_missing_numbers(tmp_path):
    from evogym.report import report
    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text(json.dumps({
        "env": "gym/acrobot", "profile": "quick", "isolation": {"level": "none"},
        "outcome": {"status": "no_ok_submit", "final_score": None, "auxiliary": {
            "auc_in_loop": 12.5, "episodes_to_50pct": None, "episodes_to_80pct": None, "episodes_used": 4,
            "n_charged_submits": None, "n_successful_submits": 0, "edit_kinds": {}}}}))
    text = report(run)
    assert "None" not in text and "episodes to 50% -, to 80% -" in text


def test_a_no_early_finish_run_that_could_never_finish_is_refused_up_front(tmp_path, capsys):
    """`--budget 40 --max-submissions 1` with a per-submit cap of 32 left every submit refused
    (budget_allocation) and finish impossible (budget_remaining); upstream refuses it up front."""
    err = refused(capsys, "serve", "--env", "gym/acrobot", "--run-dir", str(tmp_path / "r"), "--budget", "40",
                  "--max-submissions", "1", "--no-early-finish", "--session")
    assert "can be exhausted within max_submissions" in err and "cannot spend 40" in err
    assert not (tmp_path / "r").exists()
