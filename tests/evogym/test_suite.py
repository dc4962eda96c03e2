"""Suite runner and leaderboard: smoke through the host, rank-normalized scores, a real small suite run."""
import json
import subprocess
import sys

import pytest

from evogym import leaderboard
from leaderboard_rules import validate_results, validate_suite_coverage

EVOGYM = [sys.executable, "-m", "evogym.cli"]


def test_rank_scores_and_ties():
    assert leaderboard.rank_scores({"a": 3.0, "b": 2.0, "c": 1.0}) == {"a": 1.0, "b": 0.5, "c": 0.0}
    s = leaderboard.rank_scores({"a": 1.0, "b": 1.0, "c": 0.0})
    assert s["a"] == s["b"] == 1.0 and s["c"] == 0.0


def test_board_against_paper_rows():
    board = leaderboard.build({"gym/acrobot": -80.0, "gym/continuouscar": -40.0, "gymnasium/CartPole-v1": 500.0})
    rows = {r["env"]: r for r in board["rows"]}
    assert rows["gym/acrobot"]["rank_score"]["ours"] == 1.0          # beats GPT-5.5's -84.69
    assert rows["gym/continuouscar"]["rank_score"]["ours"] == 0.0    # below random (-33.4)
    assert "rank_score" not in rows["gymnasium/CartPole-v1"]        # outside the paper: no rank
    assert board["mean_rank_score"]["ours"] == 0.5
    md = leaderboard.markdown(board)
    assert "| gym/acrobot | -80 |" in md and "GPT-5.5" in md


@pytest.mark.heavy
def test_smoke_cheap_envs():
    out = subprocess.run(EVOGYM + ["suite", "smoke", "--envs", "gym/acrobot", "gym/reacher5",
                                   "gymnasium/MiniGrid-FourRooms-v0", "gymnasium/CartPole-v1"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "smoke: 4/4 environments ok" in out.stdout


@pytest.mark.slow
def test_smoke_all_16():
    out = subprocess.run(EVOGYM + ["suite", "smoke"], capture_output=True, text=True, timeout=900)
    assert "smoke: 16/16 environments ok" in out.stdout, out.stdout


AGENT = r'''
import json, os, urllib.request
api = os.environ["EVOPOLICYGYM_API"]
open("system/policy.py", "w").write("class Policy:\n    def __init__(self, o, a, m): self.n = a.get('n', 1)\n"
                                    "    def reset(self, i): pass\n    def act(self, obs): return self.n - 1\n")
req = urllib.request.Request(api + "/submit", data=b'{"env_instances": "0-1"}',
                             headers={"Content-Type": "application/json",
                                      "Authorization": "Bearer " + os.environ["EVOPOLICYGYM_TOKEN"]})
urllib.request.urlopen(req).read()
'''


@pytest.mark.heavy
def test_suite_run_writes_leaderboard_and_curves(tmp_path):
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    out = subprocess.run(EVOGYM + ["suite", "run", "--envs", "gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0",
                                   "--agent", f"{sys.executable} {agent}", "--profile", "quick", "--budget", "2",
                                   "--out", str(tmp_path / "suite")], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads((tmp_path / "suite" / "leaderboard.json").read_text())
    assert {r["env"] for r in data["board"]["rows"]} == {"gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"}
    assert all(r["status"] == "completed" for r in data["runs"].values())
    results = json.loads((tmp_path / "suite" / "results.json").read_text())
    validate_results(results, "results.json")  # EvoPolicyGym main's validator rules (leaderboard_rules.py)
    validate_suite_coverage("suite", results, "results.json")
    (config,) = results["test_configurations"]
    assert config["id"] == "quick-2" and config["parameters"]["episode_budget"] == 2
    assert config["parameters"]["finish_budget_policy"] == "allow_early"
    assert [e["id"] for e in results["environments"]] == ["gym/acrobot", "gymnasium/MiniGrid-FourRooms-v0"]
    assert {e["primary_metric"] for e in results["environments"]} == {"assessment_mean_return"}
    (entry,) = results["entries"]
    assert entry["id"] == "ours" and entry["harness"] == "command" and entry["kind"] == "agent"
    assert entry["scores"] == {r["env"]: {"quick-2": r["final_score"]} for r in data["runs"].values()}
    assert (tmp_path / "suite" / "curves.png").stat().st_size > 1000


@pytest.mark.parametrize("spelling", [["--envs", "gym/acrobot", "gym/pusher5"], ["--envs", "gym/acrobot,gym/pusher5"],
                                      ["--env", "gym/acrobot", "--envs", "gym/pusher5"]])
def test_suite_envs_take_the_one_list_convention(spelling):
    from evogym.cli import build_parser
    assert build_parser().parse_args(["suite", "run", *spelling, "--agent", "x"]).envs == ["gym/acrobot", "gym/pusher5"]
