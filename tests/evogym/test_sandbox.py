"""The policy process: round trips, exact verdicts of broken policies, deadlines, cleanup.

Tests marked `sandbox` run under bubblewrap and FAIL (never skip) when it is missing.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from evogym import sandbox
from evogym.sandbox import cgroup
from evogym.sandbox import transport as frames
from evogym.errors import ConfigError, EvogymError, ProtocolError, SandboxUnavailable
from evogym.sandbox import POLICY_PACKAGES, Limits, PolicyProcess, probe_isolation, validate_snapshot
from evogym.spaces import to_jsonable

QUICK = Limits(init_wall_s=20.0, episode_wall_s=20.0, output_bytes=1024)
REPO = Path(__file__).resolve().parents[2]

HAPPY = """
import numpy as np
import scipy.special
from helper import GAIN

class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        print("init", env_meta["env"])
        self.n = action_space["n"]

    def reset(self, episode_index):
        self.episode = episode_index

    def act(self, obs):
        return np.int64(int(np.argmax(np.asarray(obs) * GAIN)) % self.n)
"""

IMPORT_PROBE = """
import importlib

class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        pass

    def reset(self, episode_index):
        pass

    def act(self, name):
        try:
            importlib.import_module(name)
            return "imported"
        except ImportError as exc:
            return type(exc).__name__
"""

POLICY_TEMPLATE = """
class Policy:
    def __init__(self, obs_space, action_space, env_meta):
        {init}

    def reset(self, episode_index):
        {reset}

    def act(self, obs):
        {act}
"""


def make_snapshot(tmp_path: Path, files: dict[str, str], name: str = "snap") -> Path:
    code = tmp_path / name
    code.mkdir()
    for rel, text in files.items():
        (code / rel).parent.mkdir(parents=True, exist_ok=True)
        (code / rel).write_text(textwrap.dedent(text))
    return code


def policy(init="pass", reset="pass", act="return 0", header="") -> str:
    return header + POLICY_TEMPLATE.format(init=init, reset=reset, act=act)


def marked_pids(*markers: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
            except OSError:
                continue
            if any(m in cmdline for m in markers):
                found.append(int(entry.name))
    return found


# -- static validation (no sandbox needed) ----------------------------------------------


@pytest.mark.parametrize("files, category, needle", [
    ({}, "missing_policy", "no regular file policy.py"),
    ({"policy.py": "class Other:\n    pass\n"}, "missing_policy", "no top-level `class Policy`"),
    ({"policy.py": "from helper import Policy\n", "helper.py": "class Policy:\n    pass\n"},
     "missing_policy", "an import or assignment does not count"),
    ({"policy.py": policy(), "tools/scratch.py": "def f(:\n"}, "import_error", "tools/scratch.py:1: SyntaxError"),
    ({"policy.py": policy(), "helper.py": "x = 1\nif x\n"}, "import_error", "helper.py:2: SyntaxError"),
])
def test_validate_snapshot_verdicts(tmp_path, files, category, needle):
    result = validate_snapshot(make_snapshot(tmp_path, files))
    assert result is not None and result.category == category and needle in result.message, result


def test_validate_snapshot_accepts_a_literal_class(tmp_path):
    assert validate_snapshot(make_snapshot(tmp_path, {"policy.py": policy()})) is None


def test_limits_reject_nonpositive_values():
    with pytest.raises(ConfigError, match="Limits.episode_wall_s must be > 0"):
        Limits(episode_wall_s=0)


def test_unknown_isolation_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="isolation must be 'bwrap' or 'none'"):
        PolicyProcess(tmp_path, isolation="docker")


def test_missing_bwrap_raises_with_the_fix(tmp_path, monkeypatch):
    fake = {**probe_isolation(), "bwrap": None, "userns": False}
    monkeypatch.setattr(sandbox.process, "probe_isolation", lambda: fake)
    proc = PolicyProcess(make_snapshot(tmp_path, {"policy.py": policy()}), isolation="bwrap", limits=QUICK)
    with pytest.raises(SandboxUnavailable) as info:
        proc.start({}, {}, {})
    assert "install bubblewrap" in info.value.hint and "--isolation none" in info.value.hint
    assert isinstance(info.value, EvogymError)
    proc.close()


# -- the sandbox -------------------------------------------------------------------------


@pytest.mark.sandbox
def test_probe_reports_a_usable_sandbox():
    info = probe_isolation()
    assert info["bwrap"] and info["userns"], f"bubblewrap sandbox unusable here: {info}"
    assert info["seccomp"], "pyseccomp/libseccomp missing: the sandbox would run without a syscall filter"
    assert tuple(info["policy_packages"]) == POLICY_PACKAGES


@pytest.mark.sandbox
def test_happy_round_trip(tmp_path):
    code = make_snapshot(tmp_path, {"policy.py": HAPPY, "helper.py": "GAIN = -1.0\n"})
    with PolicyProcess(code, isolation="bwrap", limits=QUICK) as proc:
        started = proc.start({"type": "Box"}, {"type": "Discrete", "n": 3}, {"env": "gym/x"})
        assert started.ok, started
        assert started.value["seccomp"] == "on" and proc.report["isolation"] == "bwrap"
        assert proc.reset(0).ok
        actions = [proc.act(obs).value for obs in ([0.0, 5.0, -1.0], [3.0, 1.0, 2.0])]
        assert actions == [2, 1]
        assert proc.take_output() == ("init gym/x\n", "")
        assert proc.take_output() == ("", "")
    assert not marked_pids(proc.sandbox_id, str(code))


@pytest.mark.sandbox
def test_only_stdlib_numpy_scipy_are_importable(tmp_path):
    code = make_snapshot(tmp_path, {"policy.py": IMPORT_PROBE})
    with PolicyProcess(code, isolation="bwrap", limits=QUICK) as proc:
        assert proc.start({}, {}, {}).ok
        verdicts = {name: proc.act(name).value for name in (
            "json", "numpy", "scipy.linalg", "gymnasium", "mujoco", "Box2D", "minigrid",
            "highway_env", "evogym", "ole", "litellm", "requests", "yaml", "pydantic")}
    allowed = {"json", "numpy", "scipy.linalg"}
    assert {n for n, v in verdicts.items() if v == "imported"} == allowed, verdicts
    assert all(v == "ModuleNotFoundError" for n, v in verdicts.items() if n not in allowed)


@pytest.mark.sandbox
def test_policy_importing_gymnasium_is_an_import_error(tmp_path):
    code = make_snapshot(tmp_path, {"policy.py": policy(header="import gymnasium\n")})
    with PolicyProcess(code, isolation="bwrap", limits=QUICK) as proc:
        result = proc.start({}, {}, {})
    assert result.category == "import_error" and "No module named 'gymnasium'" in result.message
    assert "policy.py" in result.traceback


BROKEN = [
    ("no_file", {"helper.py": "x = 1\n"}, "start", "missing_policy", "no regular file policy.py"),
    ("no_class", {"policy.py": "Policy = 3\n"}, "start", "missing_policy", "no top-level"),
    ("class_by_import", {"policy.py": "from helper import Policy\n", "helper.py": policy()},
     "start", "missing_policy", "does not count"),
    ("not_a_class", {"policy.py": policy() + "\nPolicy = 3\n"}, "start", "missing_policy",
     "must define class Policy or a function make_policy; found Policy = int"),
    ("helper_syntax", {"policy.py": policy(header="import helper\n"), "helper.py": "def f(\n"},
     "start", "import_error", "helper.py:1: SyntaxError"),
    ("import_raises", {"policy.py": policy(header="raise RuntimeError('boom at import')\n")},
     "start", "import_error", "RuntimeError: boom at import"),
    ("init_raises", {"policy.py": policy(init="raise ValueError('bad init')")}, "start", "init_error",
     "ValueError: bad init"),
    ("reset_raises", {"policy.py": policy(reset="raise KeyError('r')")}, "reset", "reset_error", "KeyError"),
    ("act_raises", {"policy.py": policy(act="return 1 / 0")}, "act", "act_error", "ZeroDivisionError"),
    ("act_non_json", {"policy.py": policy(act="return {1, 2}")}, "act", "act_error", "not JSON-encodable"),
    ("act_datetime64", {"policy.py": policy(header="import numpy as np\n",
                                            act="return np.array(['2020-01-01'], dtype='datetime64[D]')")},
     "act", "act_error", "returned a date, which is not JSON-encodable"),  # was: cannot include dtype 'M' in a buffer
    ("init_memory_error", {"policy.py": policy(init="raise MemoryError()")}, "start", "oom", "MemoryError"),
]


@pytest.mark.sandbox
@pytest.mark.parametrize("files, phase, category, needle", [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_policy_verdicts(tmp_path, files, phase, category, needle):
    with PolicyProcess(make_snapshot(tmp_path, files), isolation="bwrap", limits=QUICK) as proc:
        result = proc.start({}, {}, {})
        if phase != "start":
            assert result.ok, result
            result = proc.reset(0)
        if phase == "act":
            assert result.ok, result
            result = proc.act([0.0])
    assert (result.ok, result.category) == (False, category) and needle in result.message, result
    if category in ("init_error", "reset_error", "act_error", "import_error") and "SyntaxError" not in needle:
        assert result.traceback and "Traceback" in result.traceback and len(result.traceback) <= 64 << 10


@pytest.mark.sandbox
def test_nan_action_crosses_as_a_string_and_the_process_survives(tmp_path):
    code = make_snapshot(tmp_path, {"policy.py": policy(act="return [float('nan'), 0.5]")})
    with PolicyProcess(code, isolation="bwrap", limits=QUICK) as proc:
        assert proc.start({}, {}, {}).ok
        first, second = proc.act([float("inf")]), proc.act([1.0])
    assert first.ok and not first.array and first.value == ["nan", 0.5] and second.ok


@pytest.mark.sandbox
def test_frames_larger_than_a_pipe_buffer_cross_both_ways(tmp_path):
    code = make_snapshot(tmp_path, {"policy.py": policy(act="print('x' * 70000); return [v + 1 for v in obs]")})
    obs = list(range(96 * 96 * 3))  # an image-sized observation, ~160 KB of JSON
    with PolicyProcess(code, isolation="bwrap", limits=Limits(output_bytes=100)) as proc:
        assert proc.start({}, {}, {}).ok
        result = proc.act(obs)
        out, _ = proc.take_output()
    assert result.ok and result.value == [v + 1 for v in obs]
    assert out == "x" * 100 + "\n[truncated 69901 bytes]"


@pytest.mark.sandbox
def test_endless_output_cannot_stall_the_host(tmp_path):
    init = ("import os, threading\n        threading.Thread(target=lambda: [os.write(2, b'y' * 4096) "
            "for _ in iter(int, 1)], daemon=True).start()")
    act = "import sys\n        while True: sys.stdout.write('x' * 4096)"
    limits = Limits(episode_wall_s=1.0, output_bytes=64)
    with PolicyProcess(make_snapshot(tmp_path, {"policy.py": policy(init=init, act=act)}), isolation="bwrap",
                       limits=limits) as proc:
        assert proc.start({}, {}, {}).ok
        t0 = time.monotonic()
        err = ""
        while not err and time.monotonic() - t0 < 1.0:  # until the thread has started writing
            out, err = proc.take_output()  # the spamming thread never lets the pipe run dry
        assert err.startswith("y" * 64 + "\n[truncated ") and time.monotonic() - t0 < 2.0
        result = proc.act(0)
        assert result.category == "timeout" and time.monotonic() - t0 < 4.0, result
        out, _ = proc.take_output()
    assert out.startswith("x" * 64 + "\n[truncated ")


@pytest.mark.sandbox
def test_output_before_a_crash_is_kept(tmp_path):
    act = "import os; print('last words', flush=True); os._exit(3)"
    with PolicyProcess(make_snapshot(tmp_path, {"policy.py": policy(act=act)}), isolation="bwrap",
                       limits=QUICK) as proc:
        assert proc.start({}, {}, {}).ok
        result = proc.act(0)
        assert result.category == "crashed" and "exit status 3" in result.message, result
        assert proc.take_output() == ("last words\n", "")


@pytest.mark.sandbox
def test_episode_budget_spans_reset_and_act_and_dead_process_fails_fast(tmp_path):
    act = "import time; time.sleep(0.4); return 0"
    code = make_snapshot(tmp_path, {"policy.py": policy(act=act)})
    with PolicyProcess(code, isolation="bwrap", limits=Limits(episode_wall_s=1.0)) as proc:
        assert proc.start({}, {}, {}).ok
        proc.begin_episode()
        assert proc.reset(0).ok and proc.act(0).ok and proc.act(0).ok
        assert 0 < proc.remaining_s() < 0.3
        late = proc.act(0)
        assert late.category == "timeout" and "episode wall budget" in late.message
        t0 = time.monotonic()
        again = proc.act(0)
        assert again.category == "timeout" and time.monotonic() - t0 < 0.05
    assert not marked_pids(proc.sandbox_id, str(code))


@pytest.mark.sandbox
def test_fresh_reset_restarts_the_episode_clock(tmp_path):
    code = make_snapshot(tmp_path, {"policy.py": policy(act="import time; time.sleep(0.3); return 0")})
    with PolicyProcess(code, isolation="bwrap", limits=Limits(episode_wall_s=0.8)) as proc:
        assert proc.start({}, {}, {}).ok
        for episode in range(3):
            assert proc.reset(episode).ok and proc.act(0).ok and proc.act(0).ok


@pytest.mark.sandbox
def test_calls_before_start_are_a_host_error(tmp_path):
    proc = PolicyProcess(make_snapshot(tmp_path, {"policy.py": policy()}), isolation="bwrap", limits=QUICK)
    with pytest.raises(ProtocolError, match="before start"):
        proc.act(0)
    proc.close()


@pytest.mark.sandbox
def test_cgroup_removed_on_close(tmp_path):
    info = probe_isolation()
    if not info["cgroup_memory"]:
        pytest.skip("cgroup v1 memory controller not writable here")
    with PolicyProcess(make_snapshot(tmp_path, {"policy.py": policy()}), isolation="bwrap", limits=QUICK) as proc:
        assert proc.start({}, {}, {}).ok
        group = proc._h.cgroup.memory
        assert group.is_dir() and len(proc._h.cgroup.members()) >= 2  # bwrap + init + worker
    assert not group.exists()


@pytest.mark.sandbox
def test_host_and_sandbox_share_one_cpu_group(tmp_path):
    with PolicyProcess(make_snapshot(tmp_path, {"policy.py": policy()}), isolation="bwrap", limits=QUICK) as proc:
        assert proc.start({}, {}, {}).ok
        group = cgroup.share_cpu_group()
        if group is None:
            pytest.skip("no writable cgroup v1 cpu controller here")
        members = proc._h.cgroup.members() if proc._h.cgroup else [proc._h.proc.pid]
        lines = {Path(f"/proc/{pid}/cgroup").read_text() for pid in members} | {Path("/proc/self/cgroup").read_text()}
        cpu = {line.split(":", 2)[2] for text in lines for line in text.splitlines()
               if "cpu" in line.split(":")[1].split(",")}
        assert cpu == {"/" + group.relative_to(cgroup.ROOT / "cpu").as_posix()}, cpu
        assert cgroup.share_cpu_group() == group  # once per process


@pytest.mark.sandbox
def test_thread_bomb_hits_pids_max(tmp_path):
    if not probe_isolation()["cgroup_pids"]:
        pytest.skip("cgroup v1 pids controller not writable here")
    act = "import threading, time\n        for _ in range(200): threading.Thread(target=time.sleep, args=(5,), daemon=True).start()"
    with PolicyProcess(make_snapshot(tmp_path, {"policy.py": policy(act=act)}), isolation="bwrap",
                       limits=Limits(max_pids=16)) as proc:
        assert proc.start({}, {}, {}).ok
        result = proc.act(0)
    assert result.category == "act_error" and "can't start new thread" in result.message, result


@pytest.mark.sandbox
def test_without_cgroups_memory_falls_back_to_rlimit_as(tmp_path, monkeypatch):
    fake = {**probe_isolation(), "cgroup_memory": False, "cgroup_pids": False}
    monkeypatch.setattr(sandbox.process, "probe_isolation", lambda: fake)
    act = "self.hoard = [bytearray(64 << 20) for _ in range(64)]"
    with PolicyProcess(make_snapshot(tmp_path, {"policy.py": policy(act=act)}), isolation="bwrap",
                       limits=Limits(memory_bytes=512 << 20)) as proc:
        assert proc.start({}, {}, {}).ok and proc.report["memory_limit"] == "rlimit_as"
        assert proc.report["rlimits"]["as"] == 512 << 20
        result = proc.act(0)
    assert result.category == "oom" and "MemoryError" in result.message, result


PARENT = """
import sys, time
sys.path.insert(0, {repo!r})
from evogym.sandbox import Limits, PolicyProcess
proc = PolicyProcess({code!r}, isolation="bwrap", limits=Limits())
assert proc.start({{}}, {{}}, {{}}).ok
print(proc.sandbox_id, flush=True)
proc.act(0)
"""


@pytest.mark.sandbox
def test_sigkilled_parent_leaves_no_sandbox(tmp_path):
    code = make_snapshot(tmp_path, {"policy.py": policy(act="import time; time.sleep(3600)")})
    script = PARENT.format(repo=str(REPO), code=str(code))
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    sandbox_id = parent.stdout.readline().strip()
    assert sandbox_id and marked_pids(sandbox_id), "the sandbox never started"
    if probe_isolation()["cgroup_pids"] or probe_isolation()["cgroup_memory"]:
        # checked while the parent lives: once it is dead, any other host's sandbox start on this
        # machine may sweep the orphan group before this test looks
        assert cgroup.find_groups(sandbox_id), "the sandbox has no cgroup"
    time.sleep(0.2)  # the act() call is now sleeping inside the sandbox
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 5.0
    while marked_pids(sandbox_id, str(code)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not marked_pids(sandbox_id, str(code)), "sandbox processes outlived their SIGKILLed parent"
    cgroup.sweep_orphans()  # what the next PolicyProcess does before creating its own group
    assert not cgroup.find_groups(sandbox_id)


def test_isolation_none_runs_the_same_worker_unsandboxed(tmp_path):
    code = make_snapshot(tmp_path, {"policy.py": HAPPY, "helper.py": "GAIN = 1.0\n"})
    with PolicyProcess(code, isolation="none", limits=QUICK) as proc:
        started = proc.start({}, {"type": "Discrete", "n": 3}, {"env": "gym/x"})
        assert started.ok and proc.report["isolation"] == "none"
        assert proc.reset(0).ok and proc.act([0.0, 5.0, 1.0]).value == 1
    assert not marked_pids(proc.sandbox_id)


def test_isolation_none_enforces_the_init_deadline(tmp_path):
    code = make_snapshot(tmp_path, {"policy.py": policy(init="import time; time.sleep(60)")})
    t0 = time.monotonic()
    with PolicyProcess(code, isolation="none", limits=Limits(init_wall_s=0.8)) as proc:
        result = proc.start({}, {}, {})
    assert result.category == "timeout" and time.monotonic() - t0 < 5.0
    assert not marked_pids(proc.sandbox_id)


@pytest.mark.parametrize("body", ["[NaN]", '{"ok": true, "value": Infinity}', "-Infinity"])
def test_reply_decoder_rejects_non_finite_tokens(body):
    with pytest.raises(ValueError, match="non-finite"):
        frames.DECODER.decode(body)


def test_worker_repeats_the_wire_layout():
    from evogym.sandbox import channel as worker
    names = [n for n in dir(frames) if n.isupper() and n.split("_")[0] in
             ("CONTROL", "REQ", "RESP", "HOST", "WORKER", "MAX", "OP", "KIND", "STATUS", "FORMATS")]
    assert len(names) > 20
    for name in names:
        assert getattr(worker, name) == getattr(frames, name), name
    assert worker.SPIN_MIN_S == frames.SPIN_MIN_S and worker.PREEMPTED_S == frames.PREEMPTED_S
    assert worker.MAX_BACKOFF == frames.MAX_BACKOFF and worker.WAIT_SLICE_MS / 1000 == frames.WAIT_SLICE_S


@pytest.fixture
def wire():
    """Both ends of one channel in this process: (host Channel, worker Channel)."""
    from evogym.sandbox import channel as worker
    host = frames.Channel(1 << 16)
    memfd, req_r, resp_w = (os.dup(fd) for fd in host.child_fds)
    end = worker.Channel(memfd, req_r, resp_w, 1 << 16, 0.0, frames.ORDERED_STORES)
    yield host, end
    host.close()
    for fd in (req_r, resp_w):
        os.close(fd)


OBSERVATIONS = [
    np.array([0.5, -1.25, 3.0], dtype=np.float32),
    np.array([1.0, np.nan, np.inf, -np.inf]),
    np.arange(24, dtype=np.uint8).reshape(2, 3, 4),
    np.array([[np.nan, 1.0], [2.0, 3.0]], dtype=np.float32),
    np.array([True, False]),
    np.int64(7), 5, np.float32(0.25), np.array(2.5),
    {"image": np.ones((3, 3, 3), np.uint8), "direction": np.int64(2), "mission": "go to the goal"},
    {"observation": np.array([1e300, -0.0]), "achieved_goal": np.zeros(3, np.float32)},
    (1, 4, False), "text", np.zeros(0, np.float32), np.array([1.0], dtype=">f8"),
]


@pytest.mark.parametrize("obs", OBSERVATIONS, ids=[str(i) for i in range(len(OBSERVATIONS))])
def test_policy_sees_exactly_what_the_json_encoding_gives(wire, obs):
    host, end = wire
    host.send_obs(obs)
    assert end.receive() == frames.OP_ACT
    got = end.value()
    want = json.loads(frames.dumps(to_jsonable(obs)))
    assert json.dumps(got) == json.dumps(want) and type(got) is type(want)


ACTIONS = [3, -(1 << 63), 1 << 70, 0.5, float("nan"), [0.5, -1.0], (0.25, float("inf")), [1, 2], [1.0, True],
           np.array([0.5, -2.0], np.float32), np.float32(1.5), np.int64(4), np.zeros((2, 2)), np.array([True]),
           np.array([1.0, 2.0])[::2], {"a": 1}, None, "left", [], np.zeros(0)]


@pytest.mark.parametrize("action", ACTIONS, ids=[str(i) for i in range(len(ACTIONS))])
def test_actions_arrive_as_their_json_value(wire, action):
    from evogym.sandbox import channel as worker
    host, end = wire
    host.send_int(frames.OP_RESET, 0)
    end.receive()
    end.reply_ok(action)
    status, kind, value = host.reply()
    assert status == frames.STATUS_OK
    want = json.loads(worker.encode_value(action))
    got = to_jsonable(value) if kind == frames.KIND_ARRAY else value
    assert json.dumps(got) == json.dumps(want), (kind, value)


def test_forged_reply_headers_are_rejected(wire):
    host, _ = wire
    ctl = host.ctl
    cases = [({frames.RESP_LEN: 1 << 20}, "limit is"), ({frames.RESP_STATUS: 7}, "unknown status"),
             ({frames.RESP_KIND: 99}, "unknown kind"), ({frames.RESP_KIND: frames.KIND_INT, frames.RESP_LEN: 3}, "3 bytes"),
             ({frames.RESP_KIND: frames.KIND_ARRAY, frames.RESP_FMT: ord("O"), frames.RESP_LEN: 8}, "format code"),
             ({frames.RESP_KIND: frames.KIND_ARRAY, frames.RESP_FMT: ord("d"), frames.RESP_NDIM: 9}, "dimensions"),
             ({frames.RESP_KIND: frames.KIND_ARRAY, frames.RESP_FMT: ord("d"), frames.RESP_NDIM: 1,
               frames.RESP_SHAPE: 1 << 30, frames.RESP_LEN: 16}, "does not fill"),
             ({frames.RESP_KIND: frames.KIND_JSON, frames.RESP_LEN: 3}, "codec")]
    for words, needle in cases:
        for i in range(frames.RESP_SEQ + 1, frames.WORKER_WAITING):
            ctl[i] = 0
        host.resp[:3] = b"\xff\xfe["
        for index, value in words.items():
            ctl[index] = value
        with pytest.raises(ValueError, match=needle):
            host.reply()


def test_worker_shrinking_the_channel_is_refused(wire):
    host, _ = wire
    with pytest.raises(PermissionError):
        os.ftruncate(host.memfd, 4096)


def test_worker_reply_encoding_is_compact_json():
    from evogym.sandbox import channel as worker
    assert worker.encode_value([1.0, float("-inf")]) == b'[1.0,"-inf"]'
    assert json.loads(worker.encode_value({"a": [float("nan")]})) == {"a": ["nan"]}
