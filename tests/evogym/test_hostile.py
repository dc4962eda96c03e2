"""Hostile policies P1-P20 (reliability.md §7): each case asserts the safe outcome.

One file per case under `hostile/`; each is copied alone into a fresh snapshot as
`policy.py`. Every case runs twice: in a sandbox started cold, and in one pre-started
by `Spare` (numpy preloaded, the empty staging directory filled and renamed before
start, as a submit does). The server-side canaries (an env var, a held-out file outside the snapshot,
an open secret fd, a listening socket, a seed held in memory) must never be reachable.
These run under bubblewrap and FAIL (never skip) when it is missing.
"""
from __future__ import annotations

import errno
import os
import shutil
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from evogym.sandbox import Limits, PolicyProcess
from evogym.sandbox.spare import Spare
from evogym.spaces import to_jsonable

pytestmark = pytest.mark.sandbox

HOSTILE = Path(__file__).with_name("hostile")
CANARY = "canary-" + os.urandom(8).hex()
CANARY_SEED = 918273645546372819
FAST = Limits(init_wall_s=20.0, episode_wall_s=20.0, memory_bytes=256 << 20, file_bytes=4 << 20,
              output_bytes=4096, frame_bytes=1 << 20)


@dataclass
class World:
    """Host-side canaries for one case."""

    tmp: Path
    secret_file: Path
    listener: socket.socket
    udp: socket.socket
    port: int
    start: str = "cold"
    """"cold" or "prestarted" (see the module doc)."""
    spares: list = None


def sandbox_pids(*markers: str) -> list[int]:
    """Host pids whose command line contains any marker."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().decode("utf-8", "replace")
        except OSError:
            continue
        if any(m in cmdline for m in markers):
            pids.append(int(entry.name))
    return pids


@pytest.fixture(params=["cold", "prestarted"])
def world(tmp_path, monkeypatch, request):
    monkeypatch.setenv("EVOGYM_TEST_CANARY", CANARY)
    secret = tmp_path / "run" / "heldout.json"
    secret.parent.mkdir()
    secret.write_text(f'{{"seeds": [{CANARY_SEED}], "tag": "{CANARY}"}}')
    held_fd = os.open(secret, os.O_RDONLY)  # an open secret fd the sandbox must not inherit
    os.set_inheritable(held_fd, True)
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", listener.getsockname()[1]))
    udp.settimeout(0.2)
    seeds_in_memory = [CANARY_SEED, CANARY_SEED + 1]  # noqa: F841 - the P7 target
    made = World(tmp_path, secret, listener, udp, listener.getsockname()[1], request.param, [])
    yield made
    for spare in made.spares:
        spare.close()
    os.close(held_fd)
    listener.close()
    udp.close()


def snapshot(world: World, case: str, name: str = "snap") -> Path:
    code = world.tmp / name
    code.mkdir()
    shutil.copy(HOSTILE / case, code / "policy.py")
    return code


def prestarted(world: World, case: str, limits: Limits, name: str) -> PolicyProcess:
    """The submit path: a spare started before its code exists, filled, renamed, started."""
    spare = Spare(world.tmp, "bwrap", limits)
    world.spares.append(spare)  # closed after the case: its thread is the sandbox's parent
    spare.refill(None)
    proc = spare.take()
    assert proc is not None, spare.last_failure
    assert os.listdir(proc.code_dir) == [] and proc.report["preloaded"] == ["numpy"], proc.report
    shutil.copy(HOSTILE / case, proc.code_dir / "policy.py")
    os.rename(proc.code_dir, world.tmp / name)
    proc.rebind(world.tmp / name)
    return proc


def launch(world: World, case: str, limits: Limits = FAST, name: str = "snap", **meta) -> PolicyProcess:
    env_meta = {"port": world.port, "canary_path": str(world.secret_file), **meta}
    if world.start == "prestarted":
        proc = prestarted(world, case, limits, name)
    else:
        proc = PolicyProcess(snapshot(world, case, name), isolation="bwrap", limits=limits)
    started = proc.start({"type": "Box"}, {"type": "Box"}, env_meta)
    proc.start_result = started
    return proc


def run_act(world: World, case: str, obs=None, limits: Limits = FAST, **meta):
    proc = launch(world, case, limits, **meta)
    try:
        assert proc.start_result.ok, proc.start_result
        assert proc.reset(0).ok
        result = proc.act(obs)
        out, err = proc.take_output()
    finally:
        proc.close()
    assert not sandbox_pids(proc.sandbox_id, str(proc.code_dir)), "sandbox processes survived close()"
    return result, out + err


def no_canary(*texts) -> None:
    for text in texts:
        assert CANARY not in repr(text) and str(CANARY_SEED) not in repr(text)


def case_p01(world):
    result, out = run_act(world, "p01_connect_server.py")
    assert result.ok and result.value["connected"] is False
    with pytest.raises(socket.timeout):
        world.listener.accept()


def case_p02(world):
    result, out = run_act(world, "p02_dns_udp.py")
    assert result.ok and set(result.value) == {"dns_error", "udp_error"}, result.value
    with pytest.raises(socket.timeout):
        world.udp.recvfrom(16)


def case_p03(world):
    result, _ = run_act(world, "p03_raw_socket.py")
    assert result.value == {"_socket_error": errno.EPERM, "syscall_rc": -1, "syscall_errno": errno.EPERM}


def case_p04(world):
    result, out = run_act(world, "p04_read_outside.py")
    assert result.ok and set(result.value.values()) == {"FileNotFoundError"}, result.value
    no_canary(result.value, out)


def case_p05(world):
    result, out = run_act(world, "p05_proc_snoop.py")
    report = result.value
    # the worker is pid 1 of its namespace and alone in it: no bwrap process to read
    assert result.ok and report["pids"] == [report["pid"]] == [1] and report["ppid"] == 0, report
    assert all(v.startswith("ERR") for other in report["others"].values() for v in other.values()), report
    assert {kv.split("=")[0] for kv in report["self_environ"].split("\0") if kv} <= {"PATH", "PWD"}
    assert "EVOGYM_TEST_CANARY" not in repr(report)
    no_canary(report, out)


def case_p06(world):
    result, _ = run_act(world, "p06_fd_walk.py")
    targets = result.value
    extra = {fd: t for fd, t in targets.items() if int(fd) > 2}
    listing = {fd for fd, t in extra.items() if t == "ERR FileNotFoundError"}  # listdir's own fd
    channel = {fd for fd, t in extra.items() if t.startswith("/memfd:evogym-channel")}
    pipes = {fd for fd, t in extra.items() if t.startswith("pipe:")}
    assert len(listing) <= 1 and len(channel) == 1 and len(pipes) == 2, targets  # the two wake pipes
    assert set(extra) == listing | channel | pipes, targets
    assert not any(str(world.secret_file) in t or "socket:" in t for t in targets.values())


def case_p07(world):
    result, out = run_act(world, "p07_gc_scan.py")
    assert result.ok and CANARY_SEED not in result.value
    no_canary(result.value, out)


def case_p08(world):
    proc = launch(world, "p08_plant_files.py")
    try:
        result = proc.act(None)
    finally:
        proc.close()
    assert result.value == {"symlink": errno.EROFS, "fifo": errno.EROFS, "sparse": errno.EROFS}
    assert sorted(os.listdir(proc.code_dir)) == ["policy.py"]


def case_p09(world):
    result, _ = run_act(world, "p09_fill_disk.py")
    tmp, policy_dir = result.value["/tmp/big"], result.value["/policy/big"]
    assert tmp["errno"] in (errno.EFBIG, errno.ENOSPC) and tmp["written"] <= FAST.file_bytes
    assert policy_dir == {"written": 0, "errno": errno.EROFS}


def case_p10(world):
    result, _ = run_act(world, "p10_memory.py")
    assert not result.ok and result.category == "oom", result


def case_p11(world):
    limits = Limits(episode_wall_s=1.0, output_bytes=4096)
    t0 = time.monotonic()
    result, _ = run_act(world, "p11_busy_loop.py", limits=limits)
    assert result.category == "timeout" and time.monotonic() - t0 < 1.0 + 5.0


def case_p12(world):
    t0 = time.monotonic()
    proc = launch(world, "p12_sleep_init.py", limits=Limits(init_wall_s=1.5))
    proc.close()
    assert proc.start_result.category == "timeout", proc.start_result
    assert time.monotonic() - t0 < 1.5 + 5.0
    assert not sandbox_pids(proc.sandbox_id, str(proc.code_dir))


def case_p13(world):
    result, _ = run_act(world, "p13_fork_bomb.py")
    assert result.value == {"forks": 0, "errno": errno.EPERM, "thread": ["thread ran"]}


def case_p14(world):
    result, _ = run_act(world, "p14_daemon.py")  # run_act also counts survivors after close()
    assert result.value == {"forked": False, "errno": errno.EPERM}


def case_p15(world):
    result, out = run_act(world, "p15_spawn.py")
    report = result.value
    assert report["subprocess"] == f"ERR {errno.EPERM}" and report["posix_spawn"] == f"ERR {errno.EPERM}"
    assert report["system"] != 0 and report["libc_fork"] == [-1, errno.EPERM]
    assert "pwned" not in out


def case_p16(world):
    before = world.secret_file.read_text()
    result, _ = run_act(world, "p16_privileged.py")
    report = result.value
    for call in ("mount", "unshare", "setns", "ptrace"):
        assert report[call] == [-1, errno.EPERM], (call, report[call])
    assert report[str(world.secret_file)] == errno.ENOENT and report["/usr/evil"] == errno.EROFS
    assert world.secret_file.read_text() == before


def case_p17(world):
    result, out = run_act(world, "p17_flood_output.py", mode="flood")
    assert result.ok and result.value == "fine"
    assert len(out) < 2 * (FAST.output_bytes + 100) and out.count("[truncated ") == 2
    proc = launch(world, "p17_flood_output.py", name="forge", mode="forge")
    t0 = time.monotonic()
    forged = proc.act(None)  # bytes on the wake pipes are wake-ups, never data
    proc.close()
    assert forged.ok and forged.value == "forged" and time.monotonic() - t0 < 5.0, forged


def case_p18(world):
    proc = launch(world, "p18_bad_actions.py")
    try:
        got = {mode: proc.act(mode) for mode in ("nan", "inf", "huge", "deep", "object", "fine")}
    finally:
        proc.close()
    value = {mode: to_jsonable(r.value) if r.array else r.value for mode, r in got.items()}
    assert got["nan"].ok and value["nan"] == "nan"
    assert got["inf"].ok and value["inf"] == [1.0, "inf", "-inf"]
    for mode in ("huge", "deep", "object"):
        assert got[mode].category == "act_error", (mode, got[mode])
    assert got["fine"].ok and value["fine"] == [0.25, 1]  # the process survived all of it


def case_p19(world):
    first, _ = run_act(world, "p19_persist_state.py")
    assert first.value["/tmp/memory.pkl"] == "written" and first.value["/policy/memory.pkl"] == errno.EROFS
    proc = launch(world, "p19_persist_state.py", name="second")
    second = proc.act(None)
    proc.close()
    assert second.value["seen_at_init"] == {"/tmp/memory.pkl": False, "/policy/memory.pkl": False}


@pytest.mark.parametrize("mode", ["exit", "_exit", "segv"])
def test_p20_crash_at_step_3(world, mode):
    proc = launch(world, "p20_crash.py", mode=mode)
    try:
        results = [proc.act(None) for _ in range(4)]
    finally:
        proc.close()
    assert [r.value for r in results[:2]] == [1, 2]
    assert results[2].category == "crashed" and results[3].category == "crashed", results[2]
    if mode == "segv":
        assert "SIGSEGV" in results[2].message
    fresh = launch(world, "p20_crash.py", name="fresh", mode="none")
    assert [fresh.act(None).value for _ in range(4)] == [1, 2, 3, 4]
    fresh.close()


@pytest.mark.parametrize("mode", ["oversized", "category", "shape"])
def test_p21_forged_channel_replies_are_protocol_errors(world, mode):
    proc = launch(world, "p21_channel_forge.py", name=mode, mode=mode)
    assert proc.start_result.ok, proc.start_result
    t0 = time.monotonic()
    forged = proc.act(None)
    proc.close()
    assert forged.category == "protocol_error" and time.monotonic() - t0 < 2.0, forged
    assert not sandbox_pids(proc.sandbox_id, str(proc.code_dir))


def test_p21_scribbling_flooding_and_shrinking_leave_the_host_standing(world):
    proc = launch(world, "p21_channel_forge.py", name="scribble", mode="scribble")
    results = [proc.act(None) for _ in range(50)]
    proc.close()
    for r in results:  # a reply scribbled while the host copies it is garbage or malformed, nothing else
        assert r.ok or r.category == "protocol_error", r
    for mode, want in (("wakeflood", "flooded"), ("shrink", dict.fromkeys(("empty", "control", "grown"),
                                                                          "PermissionError"))):
        result, _ = run_act(world, "p21_channel_forge.py", name=mode, mode=mode)
        assert result.ok and result.value == want, (mode, result)


def test_p22_lying_arrays_are_act_errors_or_their_json_value(world):
    proc = launch(world, "p22_lying_array.py")
    try:
        got = {mode: proc.act(mode) for mode in ("fake", "raising", "record", "bigendian", "object")}
        broadcast = proc.act("broadcast")
    finally:
        proc.close()
    assert {m: got[m].category for m in ("fake", "raising", "object")} == dict.fromkeys(("fake", "raising", "object"),
                                                                                     "act_error"), got
    assert got["record"].value == [[0.0, 0], [0.0, 0]] and got["bigendian"].value == [0.5, 1.5]
    assert broadcast.category in ("act_error", "oom"), broadcast


def test_endless_act_costs_only_the_act_deadline(world):
    limits = Limits(init_wall_s=20.0, episode_wall_s=600.0, act_wall_s=1.0, output_bytes=4096)
    t0 = time.monotonic()
    result, _ = run_act(world, "p11_busy_loop.py", limits=limits)
    assert result.category == "timeout" and "act_wall_s=1.0" in result.message, result
    assert time.monotonic() - t0 < 1.0 + 3.0


CASES = [case_p01, case_p02, case_p03, case_p04, case_p05, case_p06, case_p07, case_p08, case_p09,
         case_p10, case_p11, case_p12, case_p13, case_p14, case_p15, case_p16, case_p17, case_p18,
         case_p19]


@pytest.mark.heavy
@pytest.mark.parametrize("case", CASES, ids=[c.__name__[5:] for c in CASES])
def test_hostile(world, case):
    case(world)
