"""Clients of the EvoPolicyGym protocol: v0.1.0 HTTP (stdlib `urllib`, loopback only) and
agent-session/v3 (a Unix socket), behind one interface.

Agents reach the host only through `HostClient` and the workspace files. A charged
failure (`import_error`, `rollout_timeout`, ...) or a Phase-1 reject is an answer,
not an exception; only transport faults and a closed run raise `HostError`.

The credential: an evogym host answers only requests carrying the run's token (401
otherwise). `HostClient(url)` finds it without being told, so every agent works unchanged:
a credential the launcher registered for that URL in this process (`remember_credential`,
what `ole.runner` does), else the one in this process's environment when `url` is
`$EVOPOLICYGYM_API` (`EVOPOLICYGYM_TOKEN`, or the file `EVOPOLICYGYM_TOKEN_FILE`: what a
harness such as `evogym run` hands its agent). It is sent as a header, never as a URL or
an argument.

agent-session/v3: a URL `evopolicygym-session://<absolute socket path>` (`session_url`)
makes `HostClient` speak v3 instead (`SessionClient`): submit and finish only, the static
specification parsed from the task text (`TASK.md` in the workspace, or
`$EVOPOLICYGYM_TASK_FILE`), the run state kept from the receipts.
"""
from __future__ import annotations

import json
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ole.errors import OleError

REQUEST_TIMEOUT_S = 3600.0
"""One request may block for minutes: the submit that spends the budget finalizes inline."""
FINALIZE_POLL_S = 0.5
"""Pause between `/info` polls while waiting for background finalization."""
FINALIZE_WAIT_S = 7200.0
"""Longest wait for finalization before giving up."""
SESSION_SCHEME = "evopolicygym-session://"
SESSION_PROTOCOL = "agent-session/v3"
SESSION_FRAME_BYTES = 64 << 10
"""Largest agent-session/v3 frame either way (the protocol's limit)."""


class HostError(OleError):
    """The host could not be reached or refused the request outright."""


@dataclass(frozen=True)
class SubmitAnswer:
    """The host's answer to one `/submit`."""

    http_status: int
    submit_id: int | None
    status: str
    summary: dict[str, Any]

    @property
    def charged(self) -> int:
        return int(self.summary.get("n_episodes") or 0)


@dataclass(frozen=True)
class Credential:
    """A run's token and the 0600 files that hold it (as `evogym serve` made them)."""

    token: str
    token_file: str | None = None
    header_file: str | None = None

    @classmethod
    def from_file(cls, token_file: str | Path, header_file: str | Path | None = None) -> "Credential":
        token = Path(token_file).read_text(encoding="utf-8").strip()
        if not token:
            raise HostError(f"the token file {token_file} is empty", hint="is it the file `evogym serve` named?")
        return cls(token, str(token_file), str(header_file) if header_file else None)

    def env(self) -> dict[str, str]:
        """The variables an agent process receives (its environment, never its argv)."""
        env = {"EVOPOLICYGYM_TOKEN": self.token}
        if self.token_file:
            env["EVOPOLICYGYM_TOKEN_FILE"] = self.token_file
        if self.header_file:
            env["EVOPOLICYGYM_AUTH_HEADER_FILE"] = self.header_file
        return env


_CREDENTIALS: dict[str, Credential] = {}
_CREDENTIALS_LOCK = threading.Lock()


def remember_credential(url: str, credential: Credential) -> None:
    """Use `credential` for every `HostClient(url)` of this process (until `forget_credential`)."""
    with _CREDENTIALS_LOCK:
        _CREDENTIALS[url.rstrip("/")] = credential


def forget_credential(url: str) -> None:
    with _CREDENTIALS_LOCK:
        _CREDENTIALS.pop(url.rstrip("/"), None)


def credential_for(url: str) -> Credential | None:
    """The credential of the host at `url`: registered in this process, else this process's
    own (`EVOPOLICYGYM_TOKEN[_FILE]`) when `url` is `$EVOPOLICYGYM_API`; never another run's."""
    url = url.rstrip("/")
    with _CREDENTIALS_LOCK:
        if url in _CREDENTIALS:
            return _CREDENTIALS[url]
    if os.environ.get("EVOPOLICYGYM_API", "").rstrip("/") != url:
        return None
    token, path = os.environ.get("EVOPOLICYGYM_TOKEN"), os.environ.get("EVOPOLICYGYM_TOKEN_FILE")
    if token:
        return Credential(token, path, os.environ.get("EVOPOLICYGYM_AUTH_HEADER_FILE"))
    if path:
        return Credential.from_file(path, os.environ.get("EVOPOLICYGYM_AUTH_HEADER_FILE"))
    return None


def session_url(socket_path: str | Path) -> str:
    """The `HostClient` URL of an agent-session/v3 socket."""
    return SESSION_SCHEME + str(Path(socket_path).resolve())


def session_url_from_env() -> str | None:
    """The session URL of this process's harness (`EVOPOLICYGYM_SESSION_SOCKET`, relative to
    `EVOPOLICYGYM_WORKSPACE` as upstream gives it), or None when there is none."""
    path = os.environ.get("EVOPOLICYGYM_SESSION_SOCKET")
    if not path:
        return None
    workspace = os.environ.get("EVOPOLICYGYM_WORKSPACE") or "."
    return session_url(Path(workspace) / path)


class HostClient:
    """Thin protocol client: `/info`, `/task`, `/submit`, `/finish` (or their agent-session/v3
    equivalents, for a session URL: see the module doc)."""

    def __init__(self, url: str, *, timeout_s: float = REQUEST_TIMEOUT_S,
                 credential: Credential | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.session = SessionClient(url.removeprefix(SESSION_SCHEME), timeout_s=timeout_s) \
            if url.startswith(SESSION_SCHEME) else None
        self.credential = credential if credential is not None or self.session else credential_for(url)

    def _request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes, str]:
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.credential is not None:
            headers["Authorization"] = f"Bearer {self.credential.token}"
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            if err.code == 401:
                raise HostError(f"the host at {self.url} refused {path}: 401, this process has "
                                f"{'a wrong' if self.credential else 'no'} credential for it",
                                hint="run inside its harness (EVOPOLICYGYM_TOKEN), or register the token "
                                     "with remember_credential") from None
            return err.code, err.read(), err.headers.get("Content-Type", "") if err.headers else ""
        except (urllib.error.URLError, OSError) as err:
            raise HostError(f"cannot reach the host at {self.url}{path}: {err}",
                            hint="is `evogym serve` still running?") from err

    def info(self) -> dict[str, Any]:
        if self.session is not None:
            return self.session.info()
        status, raw, _ = self._request("GET", "/info")
        if status != 200:
            raise HostError(f"GET /info answered {status}, expected 200", hint=raw[:200].decode(errors="replace"))
        return json.loads(raw)

    def task(self) -> str:
        if self.session is not None:
            return self.session.task()
        status, raw, _ = self._request("GET", "/task")
        if status != 200:
            raise HostError(f"GET /task answered {status}, expected 200", hint=raw[:200].decode(errors="replace"))
        return raw.decode()

    def submit(self, env_instances: list[int] | str) -> SubmitAnswer:
        """Submit `system/` on these train episode ids; a 409 (run closed) raises."""
        if self.session is not None:
            return self.session.submit(env_instances)
        status, raw, _ = self._request("POST", "/submit", {"env_instances": env_instances})
        try:
            payload = json.loads(raw)
        except json.JSONDecodeError as err:
            raise HostError(f"POST /submit answered {status} with non-JSON body", hint=raw[:200].decode(errors="replace")) from err
        if status == 409:
            raise HostError("the run is closed (409 run_closed)", hint="the budget is spent or /finish was called")
        return SubmitAnswer(status, payload.get("submit_id"), str(payload.get("status", "bad_request")),
                            payload.get("summary") or {})

    def finish(self) -> int:
        """Ask the host to finalize now (extension endpoint); returns the HTTP status (for a
        session: 200 when it finished, 409 when the host refused)."""
        if self.session is not None:
            return self.session.finish()
        status, _, _ = self._request("POST", "/finish", {})
        return status

    def close_run(self) -> bool:
        """Finish the run unless it is already closed; False when the host no longer answers.

        A spent budget closes the run on the host's side, and `evogym serve` exits once its
        run.json is written, so a host that has gone away after the agent's last submit has
        closed the run itself: the caller waits for the host process and reads run.json
        (its absence is then the error to report).
        """
        try:
            if not self.info()["state"]["is_finalized"]:
                self.finish()
        except HostError:
            return False
        return True

    def wait_finalized(self, *, timeout_s: float = FINALIZE_WAIT_S) -> dict[str, Any]:
        """Poll `/info` until the run is closed and its finalization is over; returns the last `/info`.

        `state.is_finalized` turns true when the run closes; hidden validation and the
        held-out evaluation then run in the background while `state.finalization` is
        `pending`/`running` (hosts without that field are taken as done when closed).
        """
        if self.session is not None:  # v3 has no state call: the receipts are all there is
            return self.session.info()
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.info()
            state = info.get("state", {})
            if state.get("is_finalized") and state.get("finalization", "done") in ("done", "error"):
                return info
            if time.monotonic() > deadline:
                raise HostError(f"run not finalized after {timeout_s:.0f} s", hint="check the host's events.jsonl")
            time.sleep(FINALIZE_POLL_S)


class SessionClient:
    """agent-session/v3 over its Unix socket, presented as the v0.1.0 calls `HostClient` offers.

    - `info()`: the static specification from the task text (its JSON block: spaces, step limit,
      budget, submit bounds), with `state` from the run's summaries so far (the receipts'
      `feedback`: `remaining_budget`, `n_submits`; `is_finalized` once finish succeeded);
    - `submit(ids)`: ids in any order (sent sorted and distinct, as v3 requires); a refusal is
      an answer with the v3 error code as its status (`episode_limit`, ...), nothing charged;
    - `finish()`: names the candidates itself: the ok submissions with the best mean returns,
      as many as the run validates (`max_candidates`, else all), best first (v3's ties go to
      the one named first, the latest submit among equal scores here).
    The state is read from the workspace's feedback, so any instance (the agent's, or `ole
    agent work` finishing after it) sees the same run.
    """

    def __init__(self, socket_path: str, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.path = socket_path
        self.timeout_s = timeout_s
        self.workspace = Path(os.environ.get("EVOPOLICYGYM_WORKSPACE") or ".")
        self._spec: dict | None = None
        self._text: str | None = None
        self.finished = False

    def call(self, message: dict) -> dict:
        """One request on a new connection, one answer (the protocol's framing)."""
        payload = json.dumps(message, separators=(",", ":"), sort_keys=True).encode()
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(self.timeout_s)
                _connect(conn, self.path)
                conn.sendall(len(payload).to_bytes(4, "big") + payload)
                length = int.from_bytes(_exactly(conn, 4), "big")
                if not 0 < length <= SESSION_FRAME_BYTES:
                    raise HostError(f"the session answered a frame of {length} bytes", hint="is it an evogym host?")
                answer = json.loads(_exactly(conn, length))
        except (OSError, ValueError) as err:
            raise HostError(f"cannot reach the agent session at {self.path}: {err}",
                            hint="is the harness still running?") from err
        if type(answer) is not dict or answer.get("protocol") != SESSION_PROTOCOL:
            raise HostError("the session answered outside agent-session/v3", hint=str(answer)[:200])
        return answer

    def task(self) -> str:
        if self._text is None:
            path = os.environ.get("EVOPOLICYGYM_TASK_FILE") or str(self.workspace / "TASK.md")
            try:
                self._text = Path(path).read_text(encoding="utf-8")
            except OSError as err:
                raise HostError(f"no task text at {path}: {err.strerror or err}",
                                hint="agent-session/v3 has no task call; the harness must give the task as "
                                     "TASK.md in the workspace or in $EVOPOLICYGYM_TASK_FILE") from None
        return self._text

    def spec(self) -> dict:
        if self._spec is None:
            blocks = re.findall(r"```json\n(.*?)\n```", self.task(), flags=re.S)
            try:
                spec = json.loads(blocks[-1])
                spec["metadata"]["env_meta"]
            except (IndexError, ValueError, KeyError, TypeError):
                raise HostError("the task text has no public specification (a ```json block with "
                                "metadata.env_meta)", hint="is this an evogym agent-session/v3 task?") from None
            self._spec = spec
        return self._spec

    def summaries(self) -> list[dict]:
        """The summaries of the run's charged submits so far, in order."""
        out = []
        for path in sorted((self.workspace / "feedback").glob("submit_*/summary.json")):
            try:
                summary = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if summary.get("n_episodes"):
                out.append(summary)
        return out

    def info(self) -> dict[str, Any]:
        meta = self.spec()["metadata"]
        done = self.summaries()
        return {"env_meta": meta["env_meta"], "episode_budget": meta["episode_budget"],
                "min_episodes_per_submit": meta["min_episodes_per_submission"],
                "max_episodes_per_submit": meta["max_episodes_per_submission"],
                "resource_limits": meta.get("resource_limits", {}), "protocol_version": SESSION_PROTOCOL,
                "state": {"is_finalized": self.finished, "n_submits": len(done),
                          "remaining_budget": done[-1]["remaining_budget"] if done else meta["episode_budget"],
                          "finalization": "done" if self.finished else "pending",
                          "early_finish_allowed": meta["finish_budget_policy"] == "allow_early"}}

    def submit(self, env_instances: list[int] | str) -> SubmitAnswer:
        ids = sorted(set(_ids(env_instances)))
        answer = self.call({"protocol": SESSION_PROTOCOL, "method": "submit", "episode_indices": ids})
        if not answer.get("ok"):
            code = str(answer.get("error", {}).get("code", "invalid_request"))
            if code == "session_closed":
                self.finished = True
                raise HostError("the run is closed (session_closed)", hint="finish was called or the run ended")
            return SubmitAnswer(400, None, code, {"n_episodes": 0, "error": answer.get("error")})
        result = answer["result"]
        summary = {"n_episodes": result["episodes_used"], "remaining_budget": result["episodes_remaining"],
                   "mean_return": result["score"], "env_instances": result["episode_indices"]}
        try:  # the full summary, as the HTTP answer carries it
            summary = json.loads((self.workspace / result["feedback"]).read_text())
        except (OSError, ValueError):
            pass
        return SubmitAnswer(200, int(result["submission_id"].removeprefix("submit_")), str(result.get("status", "ok")),
                            summary)

    def finish(self) -> int:
        """Finish with the best ok submissions as candidates: 200 when the session closed (now or
        before), 409 when the host refused or there is nothing to name."""
        limit = self.spec()["metadata"].get("max_candidates")
        ok = [s for s in self.summaries() if s.get("status") == "ok" and s.get("mean_return") is not None]
        ranked = sorted(ok, key=lambda s: (-s["mean_return"], -s["submit_index"]))[:limit]
        if not ranked:
            return 409  # nothing to validate: the harness finalizes when the agent exits
        answer = self.call({"protocol": SESSION_PROTOCOL, "method": "finish",
                            "submission_ids": [f"submit_{s['submit_index']:03d}" for s in ranked]})
        self.finished = bool(answer.get("ok")) or answer.get("error", {}).get("code") == "session_closed"
        return 200 if self.finished else 409


def _connect(conn: socket.socket, path: str) -> None:
    """Connect to a Unix socket; a path longer than AF_UNIX allows (108 bytes: deep run
    directories) is reached through a descriptor of its directory, as the host binds it."""
    if len(os.fsencode(path)) < 100:
        conn.connect(path)
        return
    directory, name = os.path.split(path)
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        conn.connect(f"/proc/self/fd/{fd}/{name}")
    finally:
        os.close(fd)


def _exactly(conn: socket.socket, n: int) -> bytes:
    chunks, got = [], 0
    while got < n:
        chunk = conn.recv(n - got)
        if not chunk:
            raise ValueError("the session closed the connection early")
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def _ids(env_instances: list[int] | str) -> list[int]:
    """Episode ids of a v0.1.0 request (`[0, 1]` or `"0-3,7"`)."""
    if isinstance(env_instances, str):
        out: list[int] = []
        for token in env_instances.split(","):
            lo, _, hi = token.strip().partition("-")
            out.extend(range(int(lo), int(hi or lo) + 1))
        return out
    return [int(i) for i in env_instances]
