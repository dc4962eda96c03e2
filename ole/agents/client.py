"""Clients of the EvoPolicyGym protocol: v0.1.0 HTTP (stdlib `http.client`, loopback only) and
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
an argument, and only to a loopback host (`is_loopback`): a client for any other URL that
would carry a credential is refused, and no request follows a redirect.

Nothing handed to the client is trusted (issue 31): every request has a whole-request
deadline (`CALL_TIMEOUT_S`, `SUBMIT_TIMEOUT_S`: a host that accepts and never answers, or
trickles a byte at a time, is given up on), every answer and every file read is capped
(`RESPONSE_MAX_BYTES`, `TOKEN_MAX_BYTES`, `TASK_TEXT_MAX_BYTES`, `evogym.durable.SUMMARY_MAX_BYTES`) and
only regular files are read (a FIFO or `/dev/zero` is refused, never waited on), and the
task text is parsed in linear time.

agent-session/v3: a URL `evopolicygym-session://<absolute socket path>` (`session_url`)
makes `HostClient` speak v3 instead (`SessionClient`): submit and finish only, the static
specification parsed from the task text (`TASK.md` in the workspace, or
`$EVOPOLICYGYM_TASK_FILE`), the run state kept from the receipts.
"""
from __future__ import annotations

import http.client
import ipaddress
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from ole.agents.hostio import (CALL_TIMEOUT_S, ENV_META_FIELDS, RESPONSE_MAX_BYTES, SUBMIT_TIMEOUT_S, TOKEN_MAX_BYTES,
                               HostError, SubmitAnswer, clean_summary, env_meta_ok, is_int, read_bounded)
from ole.agents.session_client import SESSION_PROTOCOL, SessionClient

__all__ = ["CALL_TIMEOUT_S", "SUBMIT_TIMEOUT_S", "SESSION_PROTOCOL", "SESSION_SCHEME", "Credential", "HostClient",
           "HostError", "SessionClient", "SubmitAnswer", "credential_for", "forget_credential", "is_loopback",
           "remember_credential", "session_url", "session_url_from_env"]

FINALIZE_POLL_S = 0.5
"""Pause between `/info` polls while waiting for background finalization."""
FINALIZE_WAIT_S = 7200.0
"""Longest wait for finalization before giving up."""
SESSION_SCHEME = "evopolicygym-session://"


@dataclass(frozen=True)
class Credential:
    """A run's token and the 0600 files that hold it (as `evogym serve` made them)."""

    token: str
    token_file: str | None = None
    header_file: str | None = None

    @classmethod
    def from_file(cls, token_file: str | Path, header_file: str | Path | None = None) -> "Credential":
        raw = read_bounded(token_file, TOKEN_MAX_BYTES, "the token file")
        try:
            token = raw.decode("ascii").strip()
        except UnicodeDecodeError:
            raise HostError(f"the token file {token_file} is not ASCII text",
                            hint="is it the file `evogym serve` named?") from None
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


def is_loopback(url: str) -> bool:
    """Whether `url` names this machine's loopback interface (`localhost`, 127.0.0.0/8, ::1):
    the only hosts a run's token is ever sent to."""
    try:
        host = urlsplit(url).hostname
    except ValueError:
        return False
    if host is None:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


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

    def __init__(self, url: str, *, timeout_s: float = CALL_TIMEOUT_S, submit_timeout_s: float = SUBMIT_TIMEOUT_S,
                 credential: Credential | None = None) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.submit_timeout_s = submit_timeout_s
        self.session = SessionClient(url.removeprefix(SESSION_SCHEME), timeout_s=timeout_s,
                                     submit_timeout_s=submit_timeout_s) if url.startswith(SESSION_SCHEME) else None
        self.credential = credential if credential is not None or self.session else credential_for(url)
        if self.credential is not None and self.session is None and not is_loopback(self.url):
            raise HostError(f"refusing to send the run's token to {self.url}: it is sent only to a loopback host "
                            "(localhost, 127.0.0.0/8, ::1)", hint="reach the host on this machine (an SSH tunnel "
                            "for a remote one)")

    def _request(self, method: str, path: str, body: dict | None = None, *,
                 timeout_s: float | None = None) -> tuple[int, bytes, str]:
        """One exchange within `timeout_s` (default `self.timeout_s`) from connect to the last byte;
        the body is read up to `RESPONSE_MAX_BYTES`. No redirect is followed."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if self.credential is not None and is_loopback(self.url):
            headers["Authorization"] = f"Bearer {self.credential.token}"
        limit = self.timeout_s if timeout_s is None else timeout_s
        try:
            status, raw, kind = _exchange(self.url, method, path, data, headers, limit)
        except TimeoutError:
            raise HostError(f"the host at {self.url} did not answer {method} {path} within {limit:g} s",
                            hint="is it an evogym host, and is it still running?") from None
        except (OSError, http.client.HTTPException, ValueError) as err:
            raise HostError(f"cannot reach the host at {self.url}{path}: {err or type(err).__name__}",
                            hint="is `evogym serve` still running?") from None
        if status == 401:
            raise HostError(f"the host at {self.url} refused {path}: 401, this process has "
                            f"{'a wrong' if self.credential else 'no'} credential for it",
                            hint="run inside its harness (EVOPOLICYGYM_TOKEN), or register the token "
                                 "with remember_credential")
        return status, raw, kind

    def info(self) -> dict[str, Any]:
        if self.session is not None:
            return self.session.info()
        status, raw, _ = self._request("GET", "/info")
        if status != 200:
            raise HostError(f"GET /info answered {status}, expected 200", hint=raw[:200].decode(errors="replace"))
        try:
            info = json.loads(raw)
        except (ValueError, RecursionError):
            info = None
        if not isinstance(info, dict) or not env_meta_ok(info.get("env_meta")) \
                or not is_int(info.get("episode_budget")):
            raise HostError(f"GET /info at {self.url} answered no evogym /info (a JSON object with episode_budget "
                            f"and env_meta with {', '.join(ENV_META_FIELDS)})", hint=raw[:200].decode(errors="replace"))
        return info

    def task(self) -> str:
        if self.session is not None:
            return self.session.task()
        status, raw, _ = self._request("GET", "/task")
        if status != 200:
            raise HostError(f"GET /task answered {status}, expected 200", hint=raw[:200].decode(errors="replace"))
        return raw.decode(errors="replace")

    def submit(self, env_instances: list[int] | str) -> SubmitAnswer:
        """Submit `system/` on these train episode ids; a 409 (run closed) raises."""
        if self.session is not None:
            return self.session.submit(env_instances)
        status, raw, _ = self._request("POST", "/submit", {"env_instances": env_instances},
                                       timeout_s=self.submit_timeout_s)
        try:
            payload = json.loads(raw)
        except (ValueError, RecursionError):
            payload = None
        if not isinstance(payload, dict):
            raise HostError(f"POST /submit answered {status} with no JSON object",
                            hint=raw[:200].decode(errors="replace"))
        if status == 409:
            raise HostError("the run is closed (409 run_closed)", hint="the budget is spent or /finish was called")
        submit_id = payload.get("submit_id")
        return SubmitAnswer(status, submit_id if is_int(submit_id) else None,
                            str(payload.get("status", "bad_request"))[:100], clean_summary(payload.get("summary")))

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
            state = self.info().get("state")
            if not (isinstance(state, dict) and state.get("is_finalized")):
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
            state = info["state"] if isinstance(info.get("state"), dict) else {}
            if state.get("is_finalized") and state.get("finalization", "done") in ("done", "error"):
                return info
            if time.monotonic() > deadline:
                raise HostError(f"run not finalized after {timeout_s:.0f} s", hint="check the host's events.jsonl")
            time.sleep(FINALIZE_POLL_S)


def _exchange(url: str, method: str, path: str, data: bytes | None, headers: dict[str, str],
              timeout_s: float) -> tuple[int, bytes, str]:
    """One HTTP exchange, all of it within `timeout_s`: a timer shuts the socket down at the
    deadline (a per-read timeout alone lets a host that trickles bytes hold the call for ever).
    Raises TimeoutError at the deadline, ValueError for an answer over `RESPONSE_MAX_BYTES`."""
    parts = urlsplit(url)
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=timeout_s)
    expired = threading.Event()

    def expire() -> None:
        expired.set()
        if conn.sock is not None:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:  # already closed: the exchange is over anyway
                pass

    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    timer.start()
    try:
        conn.connect()
        if expired.is_set():  # the deadline passed while connecting (no socket to shut down then)
            raise TimeoutError
        conn.request(method, (parts.path.rstrip("/") or "") + path, body=data, headers=headers)
        resp = conn.getresponse()
        raw = resp.read(RESPONSE_MAX_BYTES + 1)
        if len(raw) > RESPONSE_MAX_BYTES:
            raise ValueError(f"the answer to {method} {path} is larger than {RESPONSE_MAX_BYTES} bytes")
        return resp.status, raw, resp.getheader("Content-Type", "") or ""
    except (OSError, http.client.HTTPException):
        if expired.is_set():
            raise TimeoutError from None
        raise
    finally:
        timer.cancel()
        conn.close()


