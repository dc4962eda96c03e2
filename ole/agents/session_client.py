"""agent-session/v3 for OLE's agents: the Unix-socket protocol EvoPolicyGym main's harnesses give
an agent, presented as the v0.1.0 calls `HostClient` offers (`ole.agents.client` routes a
`evopolicygym-session://` URL here).
"""
from __future__ import annotations

import json
import os
import socket
import stat
import time
from pathlib import Path
from typing import Any, cast

from evogym.durable import SUMMARY_MAX_BYTES
from ole.agents.hostio import (CALL_TIMEOUT_S, ENV_META_FIELDS, SUBMIT_TIMEOUT_S, TASK_TEXT_MAX_BYTES,
                               HostError, SubmitAnswer, clean_summary, env_meta_ok, is_int, is_number, read_bounded,
                               read_json)

SESSION_PROTOCOL = "agent-session/v3"
SESSION_FRAME_BYTES = 64 << 10
"""Largest agent-session/v3 frame either way (the protocol's limit)."""


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
    agent work` finishing after it) sees the same run. Every file it reads there is bounded and
    checked (the workspace is shared with whatever else works the run).
    """

    def __init__(self, socket_path: str, *, timeout_s: float = CALL_TIMEOUT_S,
                 submit_timeout_s: float = SUBMIT_TIMEOUT_S) -> None:
        self.path = socket_path
        self.timeout_s = timeout_s
        self.submit_timeout_s = submit_timeout_s
        self.workspace = Path(os.environ.get("EVOPOLICYGYM_WORKSPACE") or ".")
        self._spec: dict | None = None
        self._text: str | None = None
        self.finished = False

    def check(self) -> None:
        """Raise `HostError` unless the socket is a Unix socket that accepts a connection (a path
        that is no socket, or one nobody listens on, made `ole agent work` exit 0 silently)."""
        try:
            mode = os.stat(self.path).st_mode
        except OSError as err:
            raise HostError(f"no agent session at {self.path}: {err.strerror or err}",
                            hint="EVOPOLICYGYM_SESSION_SOCKET names the harness's socket (relative to "
                                 "EVOPOLICYGYM_WORKSPACE)") from None
        if not stat.S_ISSOCK(mode):
            raise HostError(f"{self.path} is not a Unix socket", hint="EVOPOLICYGYM_SESSION_SOCKET names the "
                            "harness's socket (relative to EVOPOLICYGYM_WORKSPACE)")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(self.timeout_s)
                _connect(conn, self.path)
        except OSError as err:
            raise HostError(f"cannot reach the agent session at {self.path}: {err.strerror or err}",
                            hint="is the harness still running?") from None

    def call(self, message: dict, *, timeout_s: float | None = None) -> dict:
        """One request on a new connection, one answer (the protocol's framing), all of it within
        `timeout_s` (default `self.timeout_s`)."""
        payload = json.dumps(message, separators=(",", ":"), sort_keys=True).encode()
        limit = self.timeout_s if timeout_s is None else timeout_s
        deadline = time.monotonic() + limit
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
                conn.settimeout(limit)
                _connect(conn, self.path)
                conn.sendall(len(payload).to_bytes(4, "big") + payload)
                length = int.from_bytes(_exactly(conn, 4, deadline), "big")
                if not 0 < length <= SESSION_FRAME_BYTES:
                    raise HostError(f"the session answered a frame of {length} bytes", hint="is it an evogym host?")
                answer = json.loads(_exactly(conn, length, deadline))
        except TimeoutError:
            raise HostError(f"the agent session at {self.path} did not answer {message.get('method')} within "
                            f"{limit:g} s", hint="is the harness still running?") from None
        except (OSError, ValueError, RecursionError) as err:
            raise HostError(f"cannot reach the agent session at {self.path}: {err}",
                            hint="is the harness still running?") from err
        if type(answer) is not dict or answer.get("protocol") != SESSION_PROTOCOL:
            raise HostError("the session answered outside agent-session/v3", hint=str(answer)[:200])
        return answer

    def task(self) -> str:
        if self._text is None:
            path = os.environ.get("EVOPOLICYGYM_TASK_FILE") or str(self.workspace / "TASK.md")
            try:
                raw = read_bounded(path, TASK_TEXT_MAX_BYTES, "the task text")
            except HostError as err:
                raise HostError(f"no usable task text: {err}", hint="agent-session/v3 has no task call; the harness "
                                "must give the task as TASK.md in the workspace or in $EVOPOLICYGYM_TASK_FILE") from None
            self._text = raw.decode("utf-8", errors="replace")
        return self._text

    def spec(self) -> dict:
        """The task text's public specification: its last closed ```json block, checked for the
        fields `info()` reads (found in linear time: a regex took 37 s on 20k unclosed fences)."""
        if self._spec is None:
            block = last_json_block(self.task())
            try:
                spec = json.loads(block) if block is not None else None
            except (ValueError, RecursionError):
                spec = None
            meta = spec.get("metadata") if isinstance(spec, dict) else None
            if not isinstance(meta, dict) or not env_meta_ok(meta.get("env_meta")) \
                    or not all(is_int(meta.get(k)) for k in SPEC_INTS):
                raise HostError("the task text has no public specification (a ```json block whose metadata has "
                                f"env_meta with {', '.join(ENV_META_FIELDS)} and the integers {', '.join(SPEC_INTS)})",
                                hint="is this an evogym agent-session/v3 task?")
            self._spec = cast(dict, spec)  # a dict: its metadata was read above
        return self._spec

    def summaries(self) -> list[dict]:
        """The summaries of the run's charged submits so far, in order (an unreadable or malformed
        one is skipped: the workspace is not trusted)."""
        out = []
        for path in sorted((self.workspace / "feedback").glob("submit_*/summary.json")):
            summary = read_json(path, SUMMARY_MAX_BYTES)
            if isinstance(summary, dict) and is_int(summary.get("n_episodes")) and summary["n_episodes"] > 0 \
                    and is_int(summary.get("remaining_budget")):
                out.append(summary)
        return out

    def info(self) -> dict[str, Any]:
        meta = self.spec()["metadata"]
        done = self.summaries()
        limits = meta.get("resource_limits")
        return {"env_meta": meta["env_meta"], "episode_budget": meta["episode_budget"],
                "min_episodes_per_submit": meta["min_episodes_per_submission"],
                "max_episodes_per_submit": meta["max_episodes_per_submission"],
                "resource_limits": limits if isinstance(limits, dict) else {}, "protocol_version": SESSION_PROTOCOL,
                "state": {"is_finalized": self.finished, "n_submits": len(done),
                          "remaining_budget": done[-1]["remaining_budget"] if done else meta["episode_budget"],
                          "finalization": "done" if self.finished else "pending",
                          "early_finish_allowed": meta.get("finish_budget_policy") == "allow_early"}}

    def submit(self, env_instances: list[int] | str) -> SubmitAnswer:
        ids = sorted(set(_ids(env_instances)))
        answer = self.call({"protocol": SESSION_PROTOCOL, "method": "submit", "episode_indices": ids},
                           timeout_s=self.submit_timeout_s)
        if not answer.get("ok"):
            error = answer["error"] if isinstance(answer.get("error"), dict) else {}
            code = str(error.get("code", "invalid_request"))[:100]
            if code == "session_closed":
                self.finished = True
                raise HostError("the run is closed (session_closed)", hint="finish was called or the run ended")
            return SubmitAnswer(400, None, code, {"n_episodes": 0, "error": error})
        result = answer.get("result")
        if not isinstance(result, dict) or not is_int(result.get("episodes_used")) \
                or not is_int(result.get("episodes_remaining")):
            raise HostError("the session answered a submit without episodes_used and episodes_remaining",
                            hint=str(answer)[:200])
        full = self._feedback(result.get("summary")) or self._feedback(result.get("feedback"))
        index = result.get("submit_index")  # evogym's; upstream's submission ids count publications
        if not is_int(index):
            index = _submit_index(result.get("submission_id"))
        if index is None and full is not None and is_int(full.get("submit_index")):
            index = full["submit_index"]
        summary = full if full is not None else {
            "n_episodes": result["episodes_used"], "remaining_budget": result["episodes_remaining"],
            "mean_return": result.get("score"), "env_instances": ids}
        return SubmitAnswer(200, index, str(result.get("status", "ok"))[:100], clean_summary(summary))

    def _feedback(self, name: object) -> dict | None:
        """The full summary a receipt names (evogym's `summary`, or `feedback` of hosts before it), as
        the HTTP answer carries it, when it is a bounded regular file of our summary's shape in the
        workspace's feedback/; None otherwise (the receipt's own fields serve)."""
        if not isinstance(name, str) or not name:
            return None
        root = self.workspace.resolve()
        path = (root / name).resolve()
        if not path.is_relative_to(root / "feedback"):
            return None
        summary = read_json(path, SUMMARY_MAX_BYTES)
        return summary if isinstance(summary, dict) and is_int(summary.get("n_episodes")) else None

    def finish(self) -> int:
        """Finish with the best ok submissions as candidates: 200 when the session closed (now or
        before), 409 when the host refused or there is nothing to name."""
        limit = self.spec()["metadata"].get("max_candidates")
        ok = [s for s in self.summaries() if s.get("status") == "ok" and is_number(s.get("mean_return"))
              and is_int(s.get("submit_index"))]
        ranked = sorted(ok, key=lambda s: (-s["mean_return"], -s["submit_index"]))[:limit if is_int(limit) else None]
        if not ranked:
            return 409  # nothing to validate: the harness finalizes when the agent exits
        answer = self.call({"protocol": SESSION_PROTOCOL, "method": "finish",
                            "submission_ids": [f"submit_{s['submit_index']:03d}" for s in ranked]})
        error = answer["error"] if isinstance(answer.get("error"), dict) else {}
        self.finished = bool(answer.get("ok")) or error.get("code") == "session_closed"
        return 200 if self.finished else 409


SPEC_INTS = ("episode_budget", "min_episodes_per_submission", "max_episodes_per_submission")
"""Integer fields of the task text's `metadata` the session client reads."""
JSON_FENCE, FENCE_END = "```json\n", "\n```"


def last_json_block(text: str) -> str | None:
    """The body of the last closed ```json block of `text`, as `re.findall(r"```json\\n(.*?)\\n```",
    re.S)[-1]` would find it, in one pass (that regex is quadratic on unclosed fences)."""
    last, pos = None, 0
    while (start := text.find(JSON_FENCE, pos)) != -1:
        body = start + len(JSON_FENCE)
        end = text.find(FENCE_END, body)
        if end == -1:  # no fence closes after here: no later block can close either
            break
        last, pos = text[body:end], end + len(FENCE_END)
    return last


def _submit_index(name: object) -> int | None:
    """`submit_NNN` -> NNN; None for anything else (upstream's `submission-NNNNNN` counts
    publications, not submits)."""
    if not isinstance(name, str) or not name.startswith("submit_"):
        return None
    digits = name.removeprefix("submit_")
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 9 else None


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


def _exactly(conn: socket.socket, n: int, deadline: float) -> bytes:
    """`n` bytes, each read waiting only as long as is left before `deadline`."""
    chunks, got = [], 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        conn.settimeout(left)
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
