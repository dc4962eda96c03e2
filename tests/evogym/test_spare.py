"""Pre-started sandboxes (`evogym.sandbox.spare`): what a submit gets from a spare is what it
got from a cold start, and nothing crosses from one submit's sandbox to the next.

Run under bubblewrap; they FAIL (never skip) when it is missing. The hostile cases of
test_hostile.py run in pre-started sandboxes too.
"""
from __future__ import annotations

import json
import marshal
import os
import signal
import textwrap
import time
from pathlib import Path

import pytest

from evogym.host import Host, make_config
from evogym.sandbox import Limits, PolicyProcess
from evogym.sandbox.spare import STAGE_PREFIX, Spare, predict_preload, shadowed

pytestmark = pytest.mark.sandbox

NEIGHBOUR = Path(__file__).with_name("hostile") / "p23_spare_neighbour.py"

PLAIN = """
import sys

PRELOADED = sorted(m for m in ("numpy", "scipy.special") if m in sys.modules)  # before any import of ours

class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        print("preloaded", PRELOADED)

    def reset(self, episode_index):
        pass

    def act(self, obs):
        return 0
"""


def open_host(tmp_path: Path, name: str = "run", budget: int = 8, **kw) -> Host:
    prestart, auto = kw.pop("prestart", True), kw.pop("auto_finalize", True)
    return Host(tmp_path / name, make_config("gym/acrobot", "quick", budget=budget, max_steps=5, **kw),
                prestart=prestart, auto_finalize=auto)


def submit(host: Host, source: str, ids=(0,), **files) -> dict:
    (host.run.system / "policy.py").write_text(textwrap.dedent(source))
    for rel, text in files.items():
        (host.run.system / rel).write_text(textwrap.dedent(text))
    status, body = host.judge.submit({"env_instances": list(ids)})
    assert status == 200, body
    return body


def episode_file(host: Host, body: dict, name: str, episode: int = 0) -> str:
    first = body["summary"]["first_global_episode"]
    ep = host.run.feedback / host.run.submit_name(body["submit_id"]) / "episodes" / f"ep_{first + episode:03d}"
    return (ep / name).read_text()


def sandbox_kinds(host: Host) -> list[str]:
    rows = [json.loads(line) for line in host.run.events_path.read_text().splitlines()]
    return [r["sandbox"] for r in rows if r["event"] == "submit.snapshot"]


def waiting(spare: Spare) -> PolicyProcess:
    proc = spare.waiting(timeout=120)
    assert proc is not None, spare.last_failure
    return proc


def marked(marker: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker in (entry / "cmdline").read_bytes().decode(errors="replace"):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


# -- static helpers -------------------------------------------------------------------


def test_predict_preload_reads_numpy_and_scipy_imports_only(tmp_path):
    assert predict_preload(None) == ("numpy",)
    (tmp_path / "policy.py").write_text("import math, numpy as np\nfrom scipy import special, optimize\n"
                                        "import scipy.linalg\nfrom .x import y\nimport requests\n")
    (tmp_path / "broken.py").write_text("def f(:\n")
    assert predict_preload(tmp_path) == ("numpy", "scipy", "scipy.special", "scipy.optimize", "scipy.linalg")


def test_shadowed_names_any_entry_a_module_could_load_from(tmp_path):
    for name in ("random.py", "numpy", "json.cpython-311-x86_64-linux-gnu.so", "re.txt", "policy.py", "numpyx.py"):
        (tmp_path / name).mkdir() if "." not in name else (tmp_path / name).write_text("")
    assert shadowed(tmp_path, ["numpy", "random", "json", "re", "os"]) == [
        "json.cpython-311-x86_64-linux-gnu.so", "numpy", "random.py", "re.txt"]


# -- the process level ----------------------------------------------------------------


def test_a_spare_gets_the_cold_limits_argv_and_worker_setup(tmp_path):
    limits = Limits(init_wall_s=20.0, memory_bytes=300 << 20, max_pids=17, file_bytes=3 << 20)
    code = tmp_path / "cold"
    code.mkdir()
    (code / "policy.py").write_text(PLAIN)
    cold = PolicyProcess(code, limits=limits)
    assert cold.start({}, {"type": "Discrete", "n": 3}, {}).ok
    spare = Spare(tmp_path, "bwrap", limits)
    spare.refill()
    warm = spare.take()
    stage = warm.code_dir
    (warm.code_dir / "policy.py").write_text(PLAIN)
    os.rename(warm.code_dir, tmp_path / "warm")
    warm.rebind(tmp_path / "warm")
    assert warm.start({}, {"type": "Discrete", "n": 3}, {}).ok
    try:
        for proc in (cold, warm):
            assert proc._h.cgroup is not None, "this machine offers cgroups: both must use them"
        assert (warm._h.cgroup.memory / "memory.limit_in_bytes").read_text() == \
               (cold._h.cgroup.memory / "memory.limit_in_bytes").read_text() == str(300 << 20) + "\n"
        assert (warm._h.cgroup.pids / "pids.max").read_text() == (cold._h.cgroup.pids / "pids.max").read_text()
        for key in ("seccomp", "rlimits", "pid", "dumpable", "isolation", "memory_limit", "policy_packages"):
            assert warm.report[key] == cold.report[key], key

        def argv(proc, code_path):  # the bwrap command line, paths and ids normalized
            words = Path("/proc", str(proc._h.proc.pid), "cmdline").read_bytes().decode().split("\0")
            words = [w.replace(str(code_path), "CODE").replace(proc.sandbox_id, "ID") for w in words]
            config = marshal.loads(bytes.fromhex(words[-3]))  # the worker's config: fd numbers differ by nature
            assert {config.pop(k) for k in ("memfd", "req_fd", "resp_fd")} and words[-2:] == ["sandbox=ID", ""]
            assert config.pop("sandbox_id") == proc.sandbox_id
            return words[:-3] + [str(sorted(config.items()))]

        assert argv(warm, stage) == argv(cold, code)
        assert "CODE" in argv(cold, code) and argv(cold, code)[0].endswith("bwrap")
    finally:
        cold.close()
        warm.close()
        spare.close()


def test_start_gets_a_fresh_init_deadline_after_a_long_idle_wait(tmp_path):
    spare = Spare(tmp_path, "bwrap", Limits(init_wall_s=2.0))
    spare.refill()
    proc = spare.take()
    try:
        time.sleep(2.5)  # idle longer than init_wall_s: a spare may wait minutes for its submit
        (proc.code_dir / "policy.py").write_text(PLAIN)
        result = proc.start({}, {}, {})
        assert result.ok, result
    finally:
        proc.close()
        spare.close()


def test_an_idle_spare_sleeps(tmp_path):
    spare = Spare(tmp_path, "bwrap", Limits())
    spare.refill()
    proc = waiting(spare)
    try:
        pids = proc._h.cgroup.members()
        assert pids

        def cpu() -> int:  # utime + stime of every sandbox process, in clock ticks
            return sum(sum(int(x) for x in Path("/proc", str(pid), "stat").read_text().rsplit(")", 1)[1].split()[11:13])
                       for pid in pids)
        before = cpu()
        time.sleep(1.0)
        assert cpu() - before <= 2, "an idle spare must block, not poll"  # 2 ticks = 20 ms
    finally:
        spare.close()
    assert not marked(proc.sandbox_id)


@pytest.mark.heavy
def test_rebind_refuses_another_directory(tmp_path):
    spare = Spare(tmp_path, "bwrap", Limits())
    spare.refill()
    proc = spare.take()
    try:
        (tmp_path / "other").mkdir()
        with pytest.raises(Exception, match="not the directory bound"):
            proc.rebind(tmp_path / "other")
    finally:
        proc.close()
        spare.close()


# -- the judge level --------------------------------------------------------------------


def test_consecutive_submits_share_no_sandbox_state(tmp_path):
    """P19 with spares: submit 2's sandbox was started while submit 1's policy ran."""
    host = open_host(tmp_path)
    try:
        neighbour = NEIGHBOUR.read_text()
        first = submit(host, neighbour, ids=(0, 1))
        second = submit(host, neighbour, ids=(2,))
        one = json.loads(episode_file(host, first, "stdout.txt").splitlines()[-1])
        two = json.loads(episode_file(host, second, "stdout.txt").splitlines()[-1])
        assert sandbox_kinds(host) == ["prestarted", "prestarted"]
        assert one["marker_seen"] is False and two["marker_seen"] is False, (one, two)
        assert one["pid"] == two["pid"] == 1 and one["pids"] == two["pids"] == [1]
        assert one["ns"] != two["ns"], "a fresh pid and mount namespace per submit"
        assert sorted(two["policy"]) == ["metrics.json", "policy.py"] and two["policy_parent"] == two["root"]
        assert not any(STAGE_PREFIX in p for p in one["found"] + two["found"]), (one, two)
        assert one["killed_others"] == two["killed_others"] == []
        assert first["status"] == second["status"] == "ok"
    finally:
        host.close()


def test_feedback_is_byte_for_byte_what_a_cold_start_gives(tmp_path):
    import hashlib

    def digests(host, body):
        tree = host.run.feedback / host.run.submit_name(body["submit_id"])
        out = {}
        for p in sorted(tree.rglob("*")):
            if p.is_file():
                data = p.read_bytes()
                if p.name == "summary.json":
                    doc = json.loads(data)
                    for k in ("submit_started_at", "submit_completed_at", "wall_time_seconds"):
                        doc.pop(k)
                    data = json.dumps(doc, sort_keys=True).encode()
                out[p.relative_to(tree).as_posix()] = hashlib.sha256(data).hexdigest()
        return out

    source = """
    import numpy as np

    class Policy:
        def __init__(self, obs_space, action_space, env_meta):
            print("init", env_meta["submit_index"], action_space)
        def reset(self, episode_index):
            print("reset", episode_index)
        def act(self, obs):
            return int(np.argmax(obs)) % 3
    """
    warm, cold = open_host(tmp_path, "warm"), open_host(tmp_path, "cold", prestart=False)
    try:
        a, b = submit(warm, source, ids=(0, 1, 2)), submit(cold, source, ids=(0, 1, 2))
        assert sandbox_kinds(warm) == ["prestarted"] and sandbox_kinds(cold) == ["cold"]
        assert digests(warm, a) == digests(cold, b)
    finally:
        warm.close()
        cold.close()


def test_a_spare_that_died_idle_is_replaced_transparently(tmp_path):
    host = open_host(tmp_path)
    try:
        victim = waiting(host.judge.spare)
        for pid in victim._h.cgroup.members():
            os.kill(pid, signal.SIGKILL)
        victim._h.proc.wait(10)
        body = submit(host, PLAIN)
        assert body["status"] == "ok" and sandbox_kinds(host) == ["cold"]
        assert host.judge.spare.counts["died_idle"] == 1
        assert waiting(host.judge.spare).alive(), "the next spare is started as usual"
        assert submit(host, PLAIN)["status"] == "ok" and sandbox_kinds(host) == ["cold", "prestarted"]
    finally:
        host.close()


def test_a_spare_that_cannot_preload_falls_back_without_a_verdict(tmp_path):
    """11 MiB: enough for the interpreter and a stdlib policy (8 MiB is), not for numpy (16 MiB is)."""
    host = open_host(tmp_path, limits=Limits(memory_bytes=11 << 20, act_wall_s=5.0))
    try:
        body = submit(host, PLAIN.replace("import sys", "import sys, math"))
        assert body["status"] == "ok", body
        spare = host.judge.spare
        assert spare.counts["failed"] == 1 and "oom" in spare.last_failure and spare.preload is False
        proc = waiting(spare)  # the next spare preloads nothing, and starts
        assert proc.report["preloaded"] == []
        assert submit(host, PLAIN)["status"] == "ok" and sandbox_kinds(host) == ["cold", "prestarted"]
    finally:
        host.close()


def test_a_snapshot_that_could_shadow_a_preloaded_module_starts_cold(tmp_path):
    host = open_host(tmp_path)
    source = """
    import numpy

    class Policy:
        def __init__(self, obs_space, action_space, env_meta):
            print("numpy is", numpy.WHO)
        def reset(self, episode_index):
            pass
        def act(self, obs):
            return 0
    """
    try:
        body = submit(host, source, **{"numpy.py": "WHO = 'the helper'\n"})
        assert body["status"] == "ok" and sandbox_kinds(host) == ["cold"]
        assert "numpy is the helper" in episode_file(host, body, "stdout.txt")
    finally:
        host.close()


def test_later_spares_preload_what_the_last_checkpoint_imports(tmp_path):
    host = open_host(tmp_path)
    try:
        first = submit(host, PLAIN + "\nimport scipy.special\n")  # imported after PRELOADED is taken
        assert "preloaded ['numpy']" in episode_file(host, first, "stdout.txt")
        # the next spare was started when the host opened; the one after is predicted from `first`
        assert "preloaded ['numpy']" in episode_file(host, submit(host, PLAIN), "stdout.txt")
        assert "preloaded ['numpy', 'scipy.special']" in episode_file(host, submit(host, PLAIN), "stdout.txt")
    finally:
        host.close()


def test_finish_kills_the_unused_spares_and_removes_their_staging_dirs(tmp_path):
    host = open_host(tmp_path)
    submit(host, PLAIN)
    spare = host.judge.spare
    markers = [f.result(timeout=120).sandbox_id for f in list(spare._slots)]
    assert len(markers) == spare.depth == 2 and all(marked(m) for m in markers)
    assert host.finish()[0] == 200 and host.done.wait(300)
    assert not any(marked(m) for m in markers)
    assert not [p for p in host.run.checkpoints.iterdir() if p.name.startswith(STAGE_PREFIX)]
    assert host.judge.spare.take() is None  # and none is started again


def test_no_prestart_starts_every_sandbox_with_its_submit(tmp_path):
    host = open_host(tmp_path, prestart=False)
    try:
        assert host.judge.spare is None
        assert submit(host, PLAIN)["status"] == "ok" and sandbox_kinds(host) == ["cold"]
    finally:
        host.close()


def test_no_more_spares_than_the_budget_has_submits_left(tmp_path):
    host = open_host(tmp_path, budget=3, auto_finalize=False)  # (a closing run starts one for its held-out)
    try:
        spare = host.judge.spare
        assert len(spare._slots) == 2
        submit(host, PLAIN, ids=(0, 1))  # 1 episode left: one more submit at most
        spare.settle(120)
        assert len(spare._slots) == 1 and spare.counts["prepared"] == 2
        submit(host, PLAIN, ids=(2,))  # budget spent: nothing started for a submit that cannot come
        assert spare.counts["prepared"] == 2 and sandbox_kinds(host) == ["prestarted", "prestarted"]
    finally:
        host.close()


VIEW = """
import hashlib, os

def _view(root="/policy"):
    h = hashlib.sha256()
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        for name in sorted(files):
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode())
            with open(path, "rb") as f:
                h.update(f.read())
    return h.digest()

class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        self.digest = _view()  # the whole tree the policy reads, host files included

    def reset(self, episode_index):
        self.k = 0

    def act(self, obs):
        self.k += 1
        return self.digest[self.k % len(self.digest)] % 3
"""


def final_sandbox(host: Host) -> str:
    rows = [json.loads(line) for line in host.run.events_path.read_text().splitlines()]
    return next(r["sandbox"] for r in rows if r["event"] == "eval.record" and r["kind"] == "final")


@pytest.mark.heavy
def test_the_held_out_runs_in_a_spare_and_scores_what_a_cold_start_does(tmp_path):
    """The spare kept at /finish takes the held-out episodes: its /policy is the selected
    checkpoint byte for byte (the policy's actions depend on a digest of every file it can read),
    so the run's outcome equals that of a host that starts every sandbox cold."""
    outcomes = []
    for name, prestart in (("warm", True), ("cold", False)):
        host = open_host(tmp_path, name, prestart=prestart)
        try:
            submit(host, VIEW, ids=(0, 1))
            submit(host, VIEW.replace("% 3", "% 2"), ids=(2,))
            markers = [f.result(timeout=120).sandbox_id for f in list(host.judge.spare._slots)] if prestart else []
            assert host.finish()[0] == 200 and host.done.wait(300)
            out = json.loads(host.run.run_json.read_text())["outcome"]
            assert out["status"] == "completed" and len(out["heldout_returns"]) == 16
            assert final_sandbox(host) == ("prestarted" if prestart else "cold")
            assert not any(marked(m) for m in markers), "the spares die with the run"
            assert not [p for p in host.run.checkpoints.iterdir() if p.name.startswith(STAGE_PREFIX)]
            outcomes.append({k: out[k] for k in ("best_submit_index", "val_scores", "heldout_returns",
                                                 "heldout_failures", "final_score")})
        finally:
            host.close()
    assert outcomes[0] == outcomes[1]


def test_a_held_out_checkpoint_that_could_shadow_a_preloaded_module_starts_cold(tmp_path):
    host = open_host(tmp_path)
    source = """
    import numpy

    class Policy:
        def __init__(self, obs_space, action_space, env_meta):
            assert numpy.WHO == "the helper"
        def reset(self, episode_index):
            pass
        def act(self, obs):
            return 0
    """
    try:
        submit(host, source, **{"numpy.py": "WHO = 'the helper'\n"})
        assert host.finish()[0] == 200 and host.done.wait(300)
        out = json.loads(host.run.run_json.read_text())["outcome"]
        assert final_sandbox(host) == "cold" and out["heldout_failures"] == 0 and len(out["heldout_returns"]) == 16
    finally:
        host.close()


@pytest.mark.parametrize("auto", [False, True])
def test_the_budget_spent_frees_the_spares_and_the_close_starts_one_for_the_held_out(tmp_path, auto):
    host = open_host(tmp_path, budget=2, auto_finalize=auto)
    try:
        spare = host.judge.spare
        markers = [f.result(timeout=120).sandbox_id for f in list(spare._slots)]
        submit(host, PLAIN, ids=(0, 1))  # budget spent: the waiting spare is discarded
        if not auto:
            spare.settle(120)
            assert len(spare._slots) == 0 and spare.counts["prepared"] == 2
            deadline = time.monotonic() + 60  # the keeper kills the discarded spare off the request's path
            while marked(markers[1]) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not marked(markers[1])
            assert host.finish()[0] == 200
        assert host.done.wait(300)
        # closing at once (auto) hands the waiting spare to the held-out; a later /finish starts one
        assert spare.counts["prepared"] == (2 if auto else 3) and spare.counts["taken"] == 2
        assert final_sandbox(host) == "prestarted" and not any(marked(m) for m in markers)
    finally:
        host.close()
