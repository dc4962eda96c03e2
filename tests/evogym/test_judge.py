"""Submit lifecycle through the live host: verdicts, charging, feedback invariants, canaries."""
import json
import time

import numpy as np
import pytest

from conftest import ZERO_POLICY
from evogym.pools import pools_for
from evogym.sandbox import Limits

BROKEN = {
    "missing_policy": None,
    "no_class": "def Policy():\n    pass\n",
    "import_only": "from collections import OrderedDict as Policy\n",
    "syntax": "class Policy:\n    def __init__(self, o, a, m):\n        return (\n",
    "import_raises": "raise RuntimeError('at import')\nclass Policy: pass\n",
    "missing_module": "import gymnasium\nclass Policy:\n    def __init__(self, o, a, m): pass\n",
    "denied": "import requests\nclass Policy:\n    def __init__(self, o, a, m): pass\n",
    "init_raises": "class Policy:\n    def __init__(self, o, a, m):\n        raise ValueError('bad init')\n",
    "init_hangs": "import time\nclass Policy:\n    def __init__(self, o, a, m):\n        time.sleep(60)\n",
}
VERDICT = {"missing_policy": "missing_policy", "no_class": "missing_policy", "import_only": "missing_policy",
           "syntax": "import_error", "import_raises": "import_error", "missing_module": "import_error",
           "denied": "denied_import", "init_raises": "init_error", "init_hangs": "init_error"}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_policy_verdicts_are_charged(live_host, case):
    live = live_host(budget=6, limits=Limits(init_wall_s=2.0, episode_wall_s=5.0))
    if BROKEN[case] is not None:
        live.write_policy(BROKEN[case])
    status, body = live.submit([0, 1])
    assert status == 200 and body["status"] == VERDICT[case]
    s = body["summary"]
    assert s["n_episodes"] == 2 and s["remaining_budget"] == 4 and s["mean_return"] is None
    fb = live.workspace / "feedback" / "submit_000"
    errors = [json.loads(line) for line in (fb / "errors.txt").read_text().splitlines()]
    assert errors and errors[0]["schema_version"] == "0.1"
    assert sorted(p.name for p in fb.iterdir()) == ["errors.txt", "summary.json"]  # no episodes/ folder
    assert (live.run_dir / "checkpoints" / "submit_000" / "metrics.json").exists()


EPISODE_ERRORS = """
class Policy:
    def __init__(self, o, a, m): self.i = 0
    def reset(self, i):
        self.i = i
        if i == 1: raise KeyError('reset boom')
    def act(self, obs):
        if self.i == 2: raise ValueError('act boom')
        return 0
"""


def test_episode_errors_keep_the_submit_ok(live_host):
    live = live_host(budget=8)
    live.write_policy(EPISODE_ERRORS)
    status, body = live.submit([0, 1, 2, 3])
    s = body["summary"]
    assert status == 200 and body["status"] == "ok"
    assert s["errors"] == [1, 2] and s["episode_lengths"][1] == 0 and s["episode_lengths"][2] == 1
    assert s["returns"][0] == -500.0 and s["mean_return"] is not None
    ep1 = live.workspace / "feedback" / "submit_000" / "episodes" / "ep_001"
    assert json.loads((ep1 / "error.txt").read_text().splitlines()[0])["category"] == "reset_error"
    assert (ep1 / "trajectory.jsonl").read_text() == ""


def test_episode_timeout_is_rollout_timeout_and_next_episode_runs(live_host):
    live = live_host(budget=8, limits=Limits(init_wall_s=10.0, episode_wall_s=1.0))
    live.write_policy("""
import time
class Policy:
    def __init__(self, o, a, m): self.i = 0
    def reset(self, i): self.i = i
    def act(self, obs):
        if self.i == 0: time.sleep(30)
        return 0
""")
    status, body = live.submit([0, 1])
    s = body["summary"]
    assert body["status"] == "rollout_timeout" and s["timeouts"] == [0] and s["errors"] == [0]
    assert s["episode_lengths"][1] == 500


@pytest.mark.heavy
def test_endless_act_costs_the_act_deadline_and_the_other_episodes_run(live_host):
    live = live_host(budget=8)  # quick profile: act_wall_s 5 s, episode_wall_s 600 s
    assert live.get("/info")[1]["resource_limits"]["act_wall_s"] == 5.0
    live.write_policy("""
import signal
class Policy:
    def __init__(self, o, a, m):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        self.i = 0
    def reset(self, i): self.i = i
    def act(self, obs):
        while self.i == 1:
            pass
        return 0
""")
    t0 = time.monotonic()
    status, body = live.submit([0, 1, 2])
    wall = time.monotonic() - t0
    s = body["summary"]
    assert body["status"] == "rollout_timeout" and s["timeouts"] == [1] and s["episode_lengths"] == [500, 0, 500]
    assert 5.0 <= wall < 5.0 + 10.0, wall
    ep1 = live.workspace / "feedback" / "submit_000" / "episodes" / "ep_001"
    error = json.loads((ep1 / "error.txt").read_text().splitlines()[0])
    assert error["category"] == "act_timeout" and "act_wall_s=5.0" in error["message"]


def test_budget_conservation_and_feedback_invariants(live_host):
    live = live_host(budget=10, max_per_submit=4)
    live.write_policy(ZERO_POLICY)
    live.submit([0, 1])
    live.submit("9999")              # Phase-1 reject, free
    live.write_policy("class Policy:\n    def __init__(self, o, a, m): raise RuntimeError\n")
    live.submit([3])                 # charged failure
    live.write_policy(ZERO_POLICY)
    live.submit("5,5,5")             # duplicates count
    fb = sorted((live.workspace / "feedback").iterdir())
    summaries = [json.loads((d / "summary.json").read_text()) for d in fb]
    assert [s["submit_index"] for s in summaries] == list(range(len(fb)))                     # F1 contiguous
    assert sum(s["n_episodes"] for s in summaries) + summaries[-1]["remaining_budget"] == 10  # conservation
    for s, d in zip(summaries, fb):
        if s["status"] == "ok":
            eps = sorted((d / "episodes").iterdir())
            first = s["first_global_episode"]
            assert [e.name for e in eps] == [f"ep_{first + i:03d}" for i in range(s["n_episodes"])]
            for e, n in zip(eps, s["episode_lengths"]):
                lines = (e / "trajectory.jsonl").read_text().splitlines()
                assert len(lines) == n
                obs_file = e / "observations.npy"
                if obs_file.exists():
                    assert np.load(obs_file).shape[0] == n and json.loads(lines[0])["obs"] is None
                assert (e / "stdout.txt").exists() and (e / "stderr.txt").exists()
        else:
            assert (d / "errors.txt").exists()
    assert summaries[-1]["first_global_episode"] == 3  # numbered by budget used (2 + 1 charged failure)


def test_policy_gets_env_meta_and_output_is_captured(live_host):
    live = live_host(budget=4)
    live.write_policy("""
import json, sys
class Policy:
    def __init__(self, o, a, m):
        print('INIT', json.dumps(sorted(m)))
    def reset(self, i): print('RESET', i)
    def act(self, obs):
        print('x' * 100000, file=sys.stderr)
        return 0
""")
    live.submit([0])
    ep = live.workspace / "feedback" / "submit_000" / "episodes" / "ep_000"
    out = (ep / "stdout.txt").read_text()
    assert out.startswith("INIT") and "RESET 0" in out and "remaining_budget_after" in out
    assert "seed" not in out.lower()
    assert len((ep / "stderr.txt").read_bytes()) < 70 * 1024


@pytest.mark.heavy
def test_hidden_seeds_never_leak(live_host):
    """H5: no validation/held-out/train seed appears in any response, feedback file, or the workspace."""
    live = live_host(budget=4)
    live.write_policy("""
import os, gc
class Policy:
    def __init__(self, o, a, m):
        found = []
        for root in ('/', '/tmp', '/policy', '/proc/1'):
            try: found.append(os.listdir(root))
            except Exception as e: found.append(str(e))
        print(found)
        print(os.environ)
    def reset(self, i): pass
    def act(self, obs): return 0
""")
    texts = [json.dumps(live.get("/info")[1]), live.get("/task")[1], json.dumps(live.submit([0, 1])[1])]
    live.finish_and_wait()
    for path in live.workspace.rglob("*"):
        if path.is_file():
            texts.append(path.read_bytes().decode("latin-1"))
    blob = "\n".join(texts)
    pools = pools_for("gym/acrobot", "quick")
    for seed in pools.valid + pools.heldout + pools.train[:8]:
        assert str(seed) not in blob


def test_snapshot_skips_symlinks_fifos_and_caches(live_host, tmp_path):
    import os
    live = live_host(budget=4)
    live.write_policy(ZERO_POLICY)
    system = live.workspace / "system"
    secret = tmp_path / "outside.txt"
    secret.write_text("outside")
    os.symlink(secret, system / "link.txt")
    os.mkfifo(system / "pipe")
    (system / "__pycache__").mkdir()
    (system / "__pycache__" / "x.pyc").write_bytes(b"\0")
    status, body = live.submit([0])
    assert status == 200 and body["status"] == "ok"
    ckpt = live.run_dir / "checkpoints" / "submit_000"
    assert sorted(p.name for p in ckpt.iterdir()) == ["metrics.json", "policy.py"]


def test_snapshot_digest_is_a_function_of_the_copied_tree(tmp_path):
    from evogym.judge import snapshot

    def tree(name, files, dirs=()):
        root = tmp_path / name
        for rel, text in files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        for d in dirs:
            (root / d).mkdir(parents=True, exist_ok=True)
        return root

    def digest(src):
        dst = tmp_path / f"dst-{src.name}-{len(list(tmp_path.iterdir()))}"
        dst.mkdir()
        return snapshot(src, dst)

    base = {"policy.py": "class Policy: pass\n", "lib/a.py": "X = 1\n"}
    a = digest(tree("a", base))
    assert a == digest(tree("b", base)) == digest(tree("a2", {**base, "__pycache__/x.pyc": "junk"}))
    assert a != digest(tree("c", {**base, "lib/a.py": "X = 2\n"}))                 # one byte
    assert a != digest(tree("d", {"policy.py": base["policy.py"], "lib/b.py": "X = 1\n"}))  # a rename
    assert a != digest(tree("e", base, dirs=("empty",)))                           # an empty directory
    assert a != digest(tree("f", {"policy.py": "class Policy: pass\nX = 1\n"}))     # bytes moved between files


def _snapshot_events(live):
    rows = [json.loads(x) for x in (live.run_dir / "events.jsonl").read_text().splitlines()]
    return [r for r in rows if r["event"] == "submit.snapshot"]


def test_a_resubmitted_tree_reuses_its_static_results_and_gets_the_same_verdict_and_metrics(live_host):
    """A retest of the same program skips parsing it again; what it writes and decides is what a
    fresh computation gives (metrics.json, code_metrics/, the verdict), and any change recomputes."""
    live = live_host(budget=12)
    live.write_policy(ZERO_POLICY)
    first = live.submit([0])[1]
    again = live.submit([1])[1]
    live.write_policy(ZERO_POLICY + "\n# changed\n")
    changed = live.submit([2])[1]
    live.write_policy(BROKEN["denied"])
    denied = [live.submit([3])[1], live.submit([4])[1]]
    assert [e.get("static") for e in _snapshot_events(live)] == [None, "cached", None, None, "cached"]
    assert first["status"] == again["status"] == changed["status"] == "ok"
    assert [b["status"] for b in denied] == ["denied_import", "denied_import"]
    ckpts = live.run_dir / "checkpoints"  # submits 0 and 3 were measured afresh, 1 and 4 reused them
    assert json.loads((ckpts / "submit_002" / "metrics.json").read_text())["tree_hash"] != \
        json.loads((ckpts / "submit_001" / "metrics.json").read_text())["tree_hash"]
    assert (ckpts / "submit_000" / "metrics.json").read_bytes() == (ckpts / "submit_001" / "metrics.json").read_bytes()
    assert (live.run_dir / "code_metrics" / "submit_000.json").read_bytes() == \
        (live.run_dir / "code_metrics" / "submit_001.json").read_bytes()
    assert (ckpts / "submit_003" / "metrics.json").read_bytes() == (ckpts / "submit_004" / "metrics.json").read_bytes()


def test_a_host_fault_making_the_feedback_folder_is_refunded_and_a_keyed_retry_runs(live_host):
    """The feedback folder is made after the charge: a fault there (here feedback/ is a file; a
    full disk would do the same) is the host's, refunded like any other, and an Idempotency-Key
    does not pin the 503 (it says nothing was charged: the retry must run)."""
    live = live_host(budget=8)
    live.write_policy(ZERO_POLICY)
    feedback = live.workspace / "feedback"
    feedback.rmdir()
    feedback.write_text("not a folder")
    key = {"Idempotency-Key": "k1"}
    status, body = live.submit([0, 1], headers=key)
    assert status == 503 and body["status"] == "host_interrupted", body
    assert "not charged" in body["error"]["message"] or "did not charge" in body["error"]["message"]
    assert live.get("/info")[1]["state"]["remaining_budget"] == 8  # refunded
    feedback.unlink()
    feedback.mkdir()
    status, body = live.submit([0, 1], headers=key)  # the same key and body: runs now
    assert status == 200 and body["status"] == "ok", body
    assert live.get("/info")[1]["state"]["remaining_budget"] == 6
    assert live.submit([0, 1], headers=key) == (status, body)  # an answer that ran is replayed, free
    assert live.get("/info")[1]["state"]["remaining_budget"] == 6


def test_a_linked_system_folder_is_not_followed_and_copies_are_never_looser_than_their_source(live_host, tmp_path):
    """`system` itself a symbolic link (to the run's 0700 control folder with its credential, or
    anywhere): os.walk followed a linked top folder, so the checkpoint held copies of what it
    named, made 0644. Now the submit is refused (charged, import_error, nothing copied); and a
    file of system/ (e.g. a hard link to the token) is copied no looser than it is."""
    import os
    live = live_host(budget=4)
    system = live.workspace / "system"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "policy.py").write_text(ZERO_POLICY)
    real = live.workspace / "system.real"
    system.rename(real)
    os.symlink(outside, system)
    status, body = live.submit([0])
    assert status == 200 and body["status"] == "import_error", body
    ckpt = live.run_dir / "checkpoints" / "submit_000"
    assert [p.name for p in ckpt.iterdir() if p.name != "metrics.json"] == []
    errors = (live.workspace / "feedback" / "submit_000" / "errors.txt").read_text()
    assert "system/ is a symbolic link" in errors
    system.unlink()
    real.rename(system)
    live.write_policy(ZERO_POLICY)
    (system / "open.txt").write_text("x")
    os.chmod(system / "open.txt", 0o644)
    os.link(live.host.run.control / "token", system / "token_copy")
    status, body = live.submit([0])
    assert status == 200 and body["status"] == "ok", body
    ckpt = live.run_dir / "checkpoints" / "submit_001"
    assert (ckpt / "token_copy").stat().st_mode & 0o777 == 0o600
    assert (ckpt / "open.txt").stat().st_mode & 0o077 == (system / "open.txt").stat().st_mode & 0o077


def test_an_episode_the_host_cap_ends_says_it_was_truncated(live_host):
    """The host's step cap (here --max-steps 5; a registered env with no discoverable limit gets
    1000) ended episodes with `terminated` and `truncated` both false on the last step."""
    live = live_host(budget=2, max_steps=5)
    live.write_policy(ZERO_POLICY)
    status, body = live.submit([0])
    assert status == 200 and body["summary"]["episode_lengths"] == [5]
    ep = next((live.workspace / "feedback" / "submit_000" / "episodes").iterdir())
    rows = [json.loads(line) for line in (ep / "trajectory.jsonl").read_text().splitlines()]
    assert [r["truncated"] for r in rows] == [False] * 4 + [True] and not any(r["terminated"] for r in rows)
