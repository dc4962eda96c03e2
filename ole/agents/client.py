"""HTTP client for the EvoPolicyGym protocol (stdlib `urllib`, loopback only).

Agents reach the host only through this client and the workspace files. A charged
failure (`import_error`, `rollout_timeout`, ...) or a Phase-1 reject is an answer,
not an exception; only transport faults and a closed run raise `HostError`.
"""
from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from ole.errors import OleError

REQUEST_TIMEOUT_S = 3600.0
"""One request may block for minutes: the submit that spends the budget finalizes inline."""
FINALIZE_POLL_S = 0.5
"""Pause between `/info` polls while waiting for background finalization."""
FINALIZE_WAIT_S = 7200.0
"""Longest wait for finalization before giving up."""


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


class HostClient:
    """Thin protocol client: `/info`, `/task`, `/submit`, `/finish`."""

    def __init__(self, url: str, *, timeout_s: float = REQUEST_TIMEOUT_S) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s

    def _request(self, method: str, path: str, body: dict | None = None) -> tuple[int, bytes, str]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                return resp.status, resp.read(), resp.headers.get("Content-Type", "")
        except urllib.error.HTTPError as err:
            return err.code, err.read(), err.headers.get("Content-Type", "") if err.headers else ""
        except (urllib.error.URLError, OSError) as err:
            raise HostError(f"cannot reach the host at {self.url}{path}: {err}",
                            hint="is `evogym serve` still running?") from err

    def info(self) -> dict[str, Any]:
        status, raw, _ = self._request("GET", "/info")
        if status != 200:
            raise HostError(f"GET /info answered {status}, expected 200", hint=raw[:200].decode(errors="replace"))
        return json.loads(raw)

    def task(self) -> str:
        status, raw, _ = self._request("GET", "/task")
        if status != 200:
            raise HostError(f"GET /task answered {status}, expected 200", hint=raw[:200].decode(errors="replace"))
        return raw.decode()

    def submit(self, env_instances: list[int] | str) -> SubmitAnswer:
        """Submit `system/` on these train episode ids; a 409 (run closed) raises."""
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
        """Ask the host to finalize now (extension endpoint); returns the HTTP status."""
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
        deadline = time.monotonic() + timeout_s
        while True:
            info = self.info()
            state = info.get("state", {})
            if state.get("is_finalized") and state.get("finalization", "done") in ("done", "error"):
                return info
            if time.monotonic() > deadline:
                raise HostError(f"run not finalized after {timeout_s:.0f} s", hint="check the host's events.jsonl")
            time.sleep(FINALIZE_POLL_S)
