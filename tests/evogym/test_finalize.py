"""Finalization: validation selection, tie-break, shared evaluation of identical trees, determinism."""
import json
import os
import pytest

from conftest import ZERO_POLICY
from evogym.finalize import select
from evogym.rollout import EpisodeJob, run_episodes
from evogym.sandbox import Limits

SWING = """
class Policy:
    def __init__(self, o, a, m): pass
    def reset(self, i): pass
    def act(self, obs):
        return 0 if obs[4] > 0 else 2
"""


def test_select_tie_breaks():
    assert select({0: (1.0, 0), 1: (2.0, 3), 2: (2.0, 3)}) == 2       # ties to the latest
    assert select({0: (2.0, 0), 1: (2.0, 1)}) == 0                    # then fewer failures first
    assert select({3: (-5.0, 0), 1: (-1.0, 9)}) == 1                  # the mean decides first


def _events(live, name):
    rows = [json.loads(x) for x in (live.run_dir / "events.jsonl").read_text().splitlines()]
    return [r for r in rows if r["event"] == name]


@pytest.mark.heavy
def test_best_validation_wins_and_identical_trees_share_evaluation(live_host):
    live = live_host(budget=12)
    live.write_policy(ZERO_POLICY)
    live.submit([0])
    live.write_policy(SWING)
    live.submit([1])
    live.write_policy(ZERO_POLICY)
    live.submit([2])
    doc = live.finish_and_wait()
    out = doc["outcome"]
    assert out["status"] == "completed" and out["best_submit_index"] == 1
    assert set(out["val_scores"]) == {"0", "1", "2"} and out["val_scores"]["0"] == out["val_scores"]["2"]
    assert out["final_score"] > -300 and len(out["heldout_returns"]) == 16
    assert len(_events(live, "eval.run")) == 2            # three ok checkpoints, two distinct programs
    assert (live.workspace / "system" / "policy.py").read_text() == SWING.lstrip("\n") or \
        "obs[4] > 0 else 2" in (live.workspace / "system" / "policy.py").read_text()
    aux = out["auxiliary"]
    assert aux["episodes_used"] == 3 and aux["n_successful_submits"] == 3
    assert aux["edit_kinds"] == {"0": "synthesis", "1": "synthesis", "2": "synthesis"}
    assert doc["versions"]["packages"]["gymnasium"] == "1.4.0" and doc["isolation"]["level"] == "bwrap"


@pytest.mark.heavy
def test_whatever_the_agent_left_at_the_mirror_names_the_run_is_scored(live_host):
    """The workspace is the agent's: a file or a link at `.system.final` / `.system.old` (the
    names the final mirror uses) once made the finalize fail after the held-out episodes ran,
    leaving the run unscored (status error)."""
    import os
    for name, make in ((".system.final", "file"), (".system.old", "file"), (".system.old", "link")):
        live = live_host(budget=4)
        live.write_policy(SWING)
        live.submit([0])
        target = live.workspace / name
        if make == "file":
            target.write_text("the agent's")
        else:
            os.symlink(live.workspace / "system", target)
        out = live.finish_and_wait()["outcome"]
        assert out["status"] == "completed" and out["final_score"] is not None, (name, make, out)
        assert "obs[4] > 0 else 2" in (live.workspace / "system" / "policy.py").read_text()
        assert not os.path.lexists(live.workspace / ".system.old") and _events(live, "workspace.mirror")


def test_no_ok_submit(live_host):
    live = live_host(budget=4)
    live.write_policy("class Policy:\n    def __init__(self, o, a, m): raise RuntimeError\n")
    live.submit([0])
    doc = live.finish_and_wait()
    assert doc["outcome"]["status"] == "no_ok_submit" and doc["outcome"]["final_score"] == 0.0


def test_same_checkpoint_same_seeds_same_returns(tmp_path):
    (tmp_path / "policy.py").write_text(SWING)
    job = EpisodeJob("gym/acrobot", str(tmp_path), (11, 22), {"env": "gym/acrobot"}, Limits(), "bwrap", record=False)
    assert run_episodes(job).returns == run_episodes(job).returns


def test_select_among_named_candidates_ties_to_the_first_named():
    assert select({0: (2.0, 0), 1: (2.0, 0)}, named=(0, 1)) == 0
    assert select({0: (2.0, 0), 1: (2.0, 0)}, named=(1, 0)) == 1
    assert select({0: (1.0, 0), 1: (2.0, 0)}, named=(0, 1)) == 1


def test_a_candidate_whose_evaluation_raises_fails_alone(live_host, monkeypatch):
    """Whatever makes a candidate's hidden evaluation raise, finalization still scores the others
    (issue 18: one forged frame used to turn the whole run into `status: error`)."""
    import evogym.finalize as fin
    live = live_host(budget=4, finalize_jobs=1)
    live.write_policy(SWING)
    live.submit([0])
    live.write_policy(ZERO_POLICY)
    live.submit([1])
    doomed = str(live.run_dir / "checkpoints" / "submit_000")
    real = fin.run_episodes

    def raising(job, *args, **kw):
        if job.code_dir == doomed:
            raise TypeError("unhashable type: 'list'")
        return real(job, *args, **kw)
    monkeypatch.setattr(fin, "run_episodes", raising)
    out = live.finish_and_wait()["outcome"]
    assert out["status"] == "completed" and out["best_submit_index"] == 1 and set(out["val_scores"]) == {"1"}
    assert out["final_score"] == -500.0


REFUSES_TO_START = """
class Policy:
    def __init__(self, o, a, m):
        raise RuntimeError("not in hidden evaluation")
"""


def test_a_policy_that_cannot_start_in_hidden_evaluation_scores_the_env_without_it(tmp_path):
    """A start failure in a play-out job (hidden evaluation) gives every episode played out with
    sampled actions (about random's -499 on Acrobot), never an empty batch that finalize scored
    0.0, better than any Acrobot policy. Train submits (no play-out) still run no episode."""
    (tmp_path / "policy.py").write_text(REFUSES_TO_START)
    job = EpisodeJob("gym/acrobot", str(tmp_path), (11, 22, 33), {"env": "gym/acrobot"}, Limits(), "bwrap",
                     record=False, play_out=True)
    batch = run_episodes(job)
    assert batch.start_failure is not None and batch.failures == 3
    assert all(e.length == 500 and e.ret < -400 for e in batch.episodes), [(e.length, e.ret) for e in batch.episodes]
    assert run_episodes(job).returns == batch.returns  # seeded: the same play-out every time
    train = EpisodeJob("gym/acrobot", str(tmp_path), (11,), {"env": "gym/acrobot"}, Limits(), "bwrap")
    assert run_episodes(train).episodes == []


def test_a_restart_refused_after_a_crash_is_played_out_too(tmp_path):
    """After a fatal episode the policy restarts; a restart that fails made every later hidden
    episode an empty 0-return one (helper probe: held-out [-500, 0 x 15])."""
    import time
    deadline = time.time() + 3.0
    (tmp_path / "policy.py").write_text(f"""
import os, time
class Policy:
    def __init__(self, o, a, m):
        if time.time() > {deadline}:
            raise RuntimeError("a restart: refuse")
    def reset(self, i): pass
    def act(self, obs):
        if time.time() > {deadline}:
            os._exit(1)
        time.sleep(0.01)
        return 0
""")
    job = EpisodeJob("gym/acrobot", str(tmp_path), (11, 22, 33), {"env": "gym/acrobot"}, Limits(), "bwrap",
                     record=False, play_out=True)
    batch = run_episodes(job)
    assert batch.failures == 3
    if batch.start_failure is None:  # else the machine was too loaded to start within 3 s: all played out anyway
        assert batch.episodes[0].error_category == "policy_crashed"
        assert [e.error_category for e in batch.episodes[1:]] == ["init_error", "init_error"]
    assert all(e.length == 500 and e.ret < -300 for e in batch.episodes), [(e.length, e.ret) for e in batch.episodes]


def test_a_held_out_evaluation_that_fails_outright_is_played_out(live_host, monkeypatch):
    """Held-out evaluation that raised on the trusted side (`_failed`: no episode) scored 0.0 as
    `completed`; its episodes are now played out without the policy."""
    import evogym.finalize as fin
    live = live_host(budget=4)
    live.write_policy(SWING)
    live.submit([0])
    real = fin.run_episodes

    def held_out_raises(job, *args, **kwargs):
        if len(job.seeds) == live.host.config.heldout_size:
            raise RuntimeError("the trusted side failed")
        return real(job, *args, **kwargs)

    monkeypatch.setattr(fin, "run_episodes", held_out_raises)
    out = live.finish_and_wait()["outcome"]
    assert out["status"] == "completed" and out["heldout_failures"] == live.host.config.heldout_size
    assert len(out["heldout_returns"]) == live.host.config.heldout_size and out["final_score"] < -400, out


def test_an_episode_that_ends_fatally_keeps_what_the_policy_wrote(tmp_path):
    """A crash, an act timeout: the process is dropped, and its output once went with it (the
    feedback's stdout.txt / stderr.txt of the episode were empty: the crash's reason hidden)."""
    for fatal, limits in (("os._exit(3)", Limits()), ("time.sleep(60)", Limits(act_wall_s=1.0))):
        (tmp_path / "policy.py").write_text(f"""
import os, sys, time
class Policy:
    def __init__(self, o, a, m): self.t = 0
    def reset(self, i): print("reset", i, flush=True)
    def act(self, obs):
        self.t += 1
        print("act", self.t, flush=True)
        print("err", self.t, file=sys.stderr, flush=True)
        if self.t == 3:
            {fatal}
        return 0
""")
        job = EpisodeJob("gym/acrobot", str(tmp_path), (11, 22), {"env": "gym/acrobot"}, limits, "bwrap")
        first, second = run_episodes(job).episodes
        assert first.error_category in ("policy_crashed", "act_timeout"), first.errors
        assert "reset 0" in first.stdout and "act 3" in first.stdout and "err 3" in first.stderr, (fatal, first.stdout)
        assert second.stdout.startswith("reset 1"), second.stdout  # the next process's own output


def test_what_the_agent_leaves_in_feedback_never_unscores_the_run(live_host):
    """feedback/ is in the agent's workspace: a folder of its own named submit_000_notes made the
    finalize fail (FileNotFoundError: status error, no score), and so did a summary it rewrote."""
    live = live_host(budget=4)
    live.write_policy(SWING)
    live.submit([0])
    live.submit([1])
    feedback = live.workspace / "feedback"
    (feedback / "submit_000_notes").mkdir()
    (feedback / "submit_000" / "summary.json").write_text("[]")
    out = live.finish_and_wait()["outcome"]
    assert out["status"] == "completed" and out["best_submit_index"] == 1 and out["final_score"] > -300, out
    skipped = _events(live, "finalize.skipped")
    assert {e["folder"] for e in skipped} == {"submit_000"}  # the stray folder is not a submit's: passed over
    from evogym.leaderboard import validation_curve  # the suite's curve reads the same folders
    xs, ys = validation_curve(live.run_dir)
    assert xs == [1] and len(ys) == 1  # submit_001 alone (submit_000's summary is unreadable): no crash


def test_a_fifo_or_an_endless_file_in_feedback_never_stalls_finalization(live_host):
    """A summary the agent swapped for a FIFO (whose reader would wait for a writer forever) or a link
    to /dev/zero (endless) is skipped unread by the finalization and the suite's curve."""
    live = live_host(budget=6)
    live.write_policy(SWING)
    for i in range(3):
        live.submit([i])
    feedback = live.workspace / "feedback"
    (feedback / "submit_000" / "summary.json").unlink()
    os.mkfifo(feedback / "submit_000" / "summary.json")
    (feedback / "submit_002" / "summary.json").unlink()
    (feedback / "submit_002" / "summary.json").symlink_to("/dev/zero")
    out = live.finish_and_wait()["outcome"]
    assert out["status"] == "completed" and out["best_submit_index"] == 1, out
    assert {e["folder"] for e in _events(live, "finalize.skipped")} == {"submit_000", "submit_002"}
    from evogym.leaderboard import validation_curve
    xs, _ = validation_curve(live.run_dir)
    assert xs == [1]
