"""`ole agent work` refuses what it should (issue 31): nothing a harness hands it is trusted.

Each case is a real `ole agent work` process (under an address-space limit, so an unbounded read
ends in MemoryError rather than in the machine's memory) or a real client against a real loopback
server, and each failed on the code before the fix: it hung, ran out of memory, wrote outside its
run, sent the run's token to another host, or exited 0 without a word.
"""
from __future__ import annotations

import json
import os
import resource
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from ole.agents.client import CALL_TIMEOUT_S, Credential, HostClient, HostError, credential_for
from tests.ole.agent_host import serve

REPO = Path(__file__).resolve().parents[2]
MEMORY_LIMIT = 3 << 30


def spec() -> dict:
    """A task text's public specification of gym/acrobot, as a harness gives it."""
    from evogym.envs import env_meta, resolve
    return {"metadata": {"env_meta": env_meta(resolve("gym/acrobot")), "episode_budget": 4,
                         "min_episodes_per_submission": 1, "max_episodes_per_submission": 4,
                         "finish_budget_policy": "allow_early", "max_candidates": 2}}


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))


def work(tmp_path: Path, env: dict[str, str], *, timeout: float = 60.0) -> tuple[int, str, float]:
    """`ole agent work` with exactly `env` (plus PATH) and a registry holding coder.yaml."""
    root = tmp_path / "reg"
    if not root.exists():
        root.mkdir()
        shutil.copy(REPO / "bundles" / "coder.yaml", root)
    t0 = time.monotonic()
    out = subprocess.run([sys.executable, "-m", "ole.cli", "--root", str(root), "agent", "work",
                          "--log-dir", str(tmp_path / "logs")], capture_output=True, text=True, timeout=timeout,
                         cwd=REPO, env={"PATH": "/usr/bin:/bin", **env}, preexec_fn=_limit)
    return out.returncode, out.stderr, time.monotonic() - t0


def workspace(tmp_path: Path, name: str = "ws") -> Path:
    ws = tmp_path / name
    (ws / "system").mkdir(parents=True)
    (ws / "feedback").mkdir()
    return ws


def listening_unix(path: Path) -> socket.socket:
    """A Unix socket that accepts into its backlog and never answers."""
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(path))
    sock.listen(16)
    return sock


def silent_tcp(host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket()
    sock.bind((host, 0))
    sock.listen(16)
    return sock


def serve_in_thread(sock: socket.socket, handle) -> threading.Thread:
    def loop() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return thread


def session_env(tmp_path: Path, ws: Path, task: Path | None = None) -> dict[str, str]:
    env = {"EVOPOLICYGYM_WORKSPACE": str(ws), "EVOPOLICYGYM_SESSION_SOCKET": "../session.sock"}
    if task is not None:
        env["EVOPOLICYGYM_TASK_FILE"] = str(task)
    return env


@pytest.mark.heavy
def test_an_api_port_that_never_answers_is_given_up_on(tmp_path):
    """Each request waited up to 3600 s."""
    sock = silent_tcp()
    ws = workspace(tmp_path)
    rc, err, took = work(tmp_path, {"EVOPOLICYGYM_API": f"http://127.0.0.1:{sock.getsockname()[1]}",
                                    "EVOPOLICYGYM_TOKEN": "t", "EVOPOLICYGYM_WORKSPACE": str(ws)},
                         timeout=CALL_TIMEOUT_S + 60)
    sock.close()
    assert rc != 0 and "did not answer GET /info" in err and "Traceback" not in err, err
    assert took < CALL_TIMEOUT_S + 30


def test_a_host_that_trickles_bytes_is_given_up_on_at_the_deadline():
    """A per-read timeout alone let one byte every 0.3 s hold a request for ever."""
    sock = silent_tcp()

    def trickle(conn: socket.socket) -> None:
        try:
            for byte in b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * 1000:
                conn.sendall(bytes([byte]))
                time.sleep(0.3)
        except OSError:
            pass
        finally:
            conn.close()

    serve_in_thread(sock, trickle)
    outcome: list = []

    def call() -> None:
        try:
            HostClient(f"http://127.0.0.1:{sock.getsockname()[1]}", timeout_s=2.0).info()
        except HostError as err:
            outcome.append(err)

    caller = threading.Thread(target=call, daemon=True)
    t0 = time.monotonic()
    caller.start()
    caller.join(20)
    sock.close()
    assert not caller.is_alive(), "the request outlived its deadline"
    assert time.monotonic() - t0 < 8 and outcome and "did not answer GET /info within 2 s" in str(outcome[0])


def test_an_oversized_answer_is_refused_unread():
    sock = silent_tcp()

    def flood(conn: socket.socket) -> None:
        try:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 10000000\r\n\r\n" + b"[" * 10_000_000)
        except OSError:
            pass
        finally:
            conn.close()

    serve_in_thread(sock, flood)
    with pytest.raises(HostError, match="larger than"):
        HostClient(f"http://127.0.0.1:{sock.getsockname()[1]}").info()
    sock.close()


@pytest.mark.parametrize("kind", ["fifo", "dev_zero", "fences", "no_spaces"])
def test_a_task_file_that_blocks_floods_or_is_quadratic_is_refused(tmp_path, kind):
    """A FIFO hung the agent, /dev/zero ended in MemoryError, 900 KB of unclosed ```json fences
    took minutes in a regex (20k of them: 37 s), a specification without spaces was a KeyError."""
    ws = workspace(tmp_path)
    sock = listening_unix(tmp_path / "session.sock")
    task = tmp_path / "TASK.md"
    if kind == "fifo":
        os.mkfifo(task)
    elif kind == "dev_zero":
        task = Path("/dev/zero")
    elif kind == "fences":
        task.write_text("```json\n{" * 100_000)
    else:
        doc = spec()
        del doc["metadata"]["env_meta"]["obs_space"]
        task.write_text("```json\n" + json.dumps(doc) + "\n```\n")
    try:
        rc, err, took = work(tmp_path, session_env(tmp_path, ws, task), timeout=90)
    finally:
        sock.close()
    assert rc != 0 and "Traceback" not in err and "internal error" not in err, err
    assert ("not a regular file" if kind in ("fifo", "dev_zero") else "no public specification") in err, err
    assert took < 30


def test_a_huge_token_file_is_refused(tmp_path):
    """A 4 GiB token file ended in MemoryError."""
    big = tmp_path / "token"
    with open(big, "wb") as f:
        f.truncate(4 << 30)  # sparse: no disk used
    rc, err, _ = work(tmp_path, {"EVOPOLICYGYM_API": "http://127.0.0.1:1", "EVOPOLICYGYM_TOKEN_FILE": str(big),
                                 "EVOPOLICYGYM_WORKSPACE": str(workspace(tmp_path))})
    assert rc == 2 and "larger than 4096 bytes" in err and "internal error" not in err, err


@pytest.mark.heavy
def test_a_missing_or_foreign_workspace_is_never_written(tmp_path):
    """A missing workspace was created, and a folder outside the run got system/policy.py."""
    served = serve(tmp_path / "run", budget=4)
    try:
        cred = credential_for(served.url)
        base = {"EVOPOLICYGYM_API": served.url, "EVOPOLICYGYM_TOKEN_FILE": str(cred.token_file)}
        missing, foreign = tmp_path / "missing", tmp_path / "foreign"
        foreign.mkdir()
        rc, err, _ = work(tmp_path, {**base, "EVOPOLICYGYM_WORKSPACE": str(missing)}, timeout=300)
        assert rc == 2 and "is not an existing folder" in err and not missing.exists(), err
        rc, err, _ = work(tmp_path, {**base, "EVOPOLICYGYM_WORKSPACE": str(foreign)}, timeout=300)
        assert rc == 2 and "is not a run workspace" in err and list(foreign.iterdir()) == [], err
        (foreign / "system").symlink_to(served.workspace / "system")  # links are not the run's folders
        (foreign / "feedback").mkdir()
        rc, err, _ = work(tmp_path, {**base, "EVOPOLICYGYM_WORKSPACE": str(foreign)}, timeout=300)
        assert rc == 2 and "no system/ folder" in err, err
    finally:
        served.close(score=False)


@pytest.mark.heavy
@pytest.mark.parametrize("kind", ["missing", "regular_file", "nobody_listens", "hangs_up"])
def test_an_unusable_session_socket_exits_non_zero_and_says_why(tmp_path, kind):
    """Each exited 0 with nothing on stderr (the agent's failed submits were swallowed)."""
    ws = workspace(tmp_path)
    (ws / "TASK.md").write_text("# task\n\n```json\n" + json.dumps(spec()) + "\n```\n")
    path, sock = tmp_path / "session.sock", None
    if kind == "regular_file":
        path.write_text("")
    elif kind == "nobody_listens":
        socket.socket(socket.AF_UNIX).bind(str(path))  # bound, never listening: refused
    elif kind == "hangs_up":
        sock = listening_unix(path)
        serve_in_thread(sock, lambda conn: conn.close())
    try:
        rc, err, _ = work(tmp_path, session_env(tmp_path, ws), timeout=300)
    finally:
        if sock is not None:
            sock.close()
    why = {"missing": "no agent session", "regular_file": "is not a Unix socket",
           "nobody_listens": "cannot reach the agent session", "hangs_up": "the agent stopped on an error"}[kind]
    assert rc != 0 and why in err and "Traceback" not in err, err
    if kind == "hangs_up":  # the reason the agent stopped, not only that it did
        assert "cannot reach the agent session" in err and rc == 1, err


class Recorder:
    """A loopback or any-address HTTP listener that records every request head it gets."""

    def __init__(self, host: str, answer: bytes) -> None:
        self.heads: list[bytes] = []
        self.sock = silent_tcp(host)
        self.answer = answer
        serve_in_thread(self.sock, self.handle)

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            try:
                self.heads.append(conn.recv(65536))
                conn.sendall(self.answer)
            except OSError:
                pass


UNAUTHORIZED = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}"


def test_the_token_is_never_sent_off_loopback(tmp_path):
    """The client sent `Authorization: Bearer <token>` to a non-loopback URL (0.0.0.0 reaches this
    machine, yet is no loopback address) and followed a redirect there with it."""
    away = Recorder("0.0.0.0", UNAUTHORIZED)
    rc, err, _ = work(tmp_path, {"EVOPOLICYGYM_API": f"http://0.0.0.0:{away.port}", "EVOPOLICYGYM_TOKEN": "s3cret",
                                 "EVOPOLICYGYM_WORKSPACE": str(workspace(tmp_path))})
    assert rc == 2 and "not a loopback URL" in err, err
    with pytest.raises(HostError, match="only to a loopback host"):
        HostClient(f"http://0.0.0.0:{away.port}", credential=Credential("s3cret")).info()
    redirect = (f"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://0.0.0.0:{away.port}/info\r\n"
                "Content-Length: 0\r\nConnection: close\r\n\r\n").encode()
    near = Recorder("127.0.0.1", redirect)
    with pytest.raises(HostError, match="answered 307"):
        HostClient(f"http://127.0.0.1:{near.port}", credential=Credential("s3cret")).info()
    time.sleep(0.5)
    assert b"s3cret" in near.heads[0] and not any(b"s3cret" in head for head in away.heads), away.heads
    away.sock.close()
    near.sock.close()


@pytest.mark.heavy
def test_a_host_answering_mistyped_summaries_is_a_recorded_run_not_a_crash(tmp_path):
    """A submit answer whose summary has `returns: ["x"]`, `mean_return: "high"` and counts that are
    no numbers stopped the agent with a ValueError at its first answer (recorded as an agent error,
    exit 0); read as missing fields, the agent works on until the host closes the run."""
    import http.server
    meta = spec()["metadata"]
    info = {"env_meta": meta["env_meta"], "episode_budget": 4, "min_episodes_per_submit": 1,
            "max_episodes_per_submit": 4, "resource_limits": {}, "protocol_version": "0.1.0",
            "state": {"is_finalized": False, "remaining_budget": 4, "n_submits": 0, "finalization": "pending"}}
    submits: list[int] = []

    class Host(http.server.BaseHTTPRequestHandler):
        def answer(self, status: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.answer(200, info)

        def do_POST(self) -> None:  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path == "/finish":
                return self.answer(200, {"status": "ok"})
            submits.append(1)
            if len(submits) > 2:
                return self.answer(409, {"status": "run_closed"})
            self.answer(200, {"submit_id": len(submits) - 1, "status": "ok", "summary": {
                "n_episodes": "four", "remaining_budget": "many", "returns": ["x", None], "mean_return": "high",
                "env_instances": "all", "status": ["ok"], "submit_index": -3}})

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Host)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rc, err, _ = work(tmp_path, {"EVOPOLICYGYM_API": f"http://127.0.0.1:{server.server_address[1]}",
                                     "EVOPOLICYGYM_TOKEN": "t", "EVOPOLICYGYM_WORKSPACE": str(workspace(tmp_path))},
                          timeout=300)
    finally:
        server.shutdown()
    assert "internal error" not in err and "Traceback" not in err, err
    assert rc == 0 and len(submits) == 3 and not (tmp_path / "logs" / "agent_error.txt").exists(), (rc, err)
    rows = [json.loads(line) for line in (tmp_path / "logs" / "iterations.jsonl").read_text().splitlines()]
    assert rows and all(r["returns"] is None and r["mean_return"] is None for r in rows), rows
