"""The agent-session/v3 protocol of EvoPolicyGym main, served beside v0.1.0 HTTP.

A Unix socket, 0600 inside the run's 0700 control directory (only the run's user can
connect at all); one request per connection; each request a frame of a 4-byte big-endian
length and a UTF-8 JSON object of at most FRAME_BYTES, read within READ_TIMEOUT_S; the
answer one frame, then the connection is closed. Two methods (wire format as upstream's
`run/_session/gateway.py`, facts in shared/reference/evopolicygym-v3-notes.md):

- `{"protocol": "agent-session/v3", "method": "submit", "episode_indices": [0, 1, 5]}`:
  strictly increasing train ids, at most MAX_EPISODE_INDICES. The receipt carries the run
  state: `submission_id` (`submit_NNN`, the feedback folder), `program_digest` (the
  snapshot's tree hash), `score` (the mean return; null when no episode ran), `status`
  (our verdict), `episode_indices`, `episodes_used`, `episodes_remaining`, `feedback`.
  A refused submit is free and leaves no trace (no folder, no index).
- `{"protocol": "agent-session/v3", "method": "finish", "submission_ids": ["submit_003"]}`:
  the candidates hidden validation compares (ok submits, at most the profile's
  `max_candidates`, ties to the one named first). It closes the agent's authority and
  starts finalization.

Answers: `{"protocol", "ok": true, "result": {...}}` or `{"protocol", "ok": false, "error":
{"code", "message"}}`. There is no info or task call: the static specification is JSON
inside the task text (`task_text`, also written to `workspace/TASK.md`).

What is ours, not upstream's: the program is `system/` (`workspace/program` is a link to it,
so `evopolicygym-session submit program` works), `policy.py` defines `class Policy` as in
v0.1.0, and feedback is `feedback/submit_NNN/` as over HTTP.
"""
from __future__ import annotations

import asyncio
import json
import os
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import cast

from evogym import envs, feedback_v2
from evogym.credential import private_dir
from evogym.errors import ConfigError
from evogym.host import Host
from evogym.program import seed_workspace
from evogym.run_record import Journal, keep_initial
from evogym.session_wire import FRAME_BYTES, MAX_EPISODE_INDICES, PROTOCOL, decode_frame, encode_frame, error

__all__ = ["FRAME_BYTES", "MAX_EPISODE_INDICES", "PROTOCOL", "Gateway", "Session", "decode_frame", "encode_frame",
           "error", "task_text"]

READ_TIMEOUT_S = 1.0
"""A request frame must arrive within this long of the connection (upstream's 1 s)."""
SOCKET_NAME = "session.sock"
TASK_FILE = "TASK.md"
PROGRAM_LINK = "program"
SUBMIT_FIELDS = frozenset({"protocol", "method", "episode_indices"})
FINISH_FIELDS = frozenset({"protocol", "method", "submission_ids"})


class Session:
    """The request handler: agent-session/v3 messages in, `Host` calls, messages out."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.closed_by_agent = False
        self.published = feedback_v2.Publications.recover(host.run.feedback)
        """Upstream's submission ids of this run's published submits (`evogym.feedback_v2`)."""
        self.journal = Journal(host.run.root)
        """Upstream's event vocabulary (`record/events.jsonl`, `evogym.run_record`)."""

    def handle(self, request: dict) -> dict:
        """One request (any decoded object) -> one answer; never raises for bad input. A closed
        run answers `session_closed` to anything, as upstream's gateway does."""
        if self.host.judge.closed:
            return error("session_closed", "the run is closed: the agent's authority has ended")
        if request.get("protocol") != PROTOCOL:
            return error("protocol_mismatch", f"unsupported protocol {str(request.get('protocol'))[:40]!r}; "
                                              f"this host speaks {PROTOCOL}")
        method = request.get("method")
        if method == "submit":
            if request.keys() != SUBMIT_FIELDS:
                return error("invalid_request", f"submit takes exactly the fields {sorted(SUBMIT_FIELDS)}")
            return self.submit(request["episode_indices"])
        if method == "finish":
            if request.keys() != FINISH_FIELDS:
                return error("invalid_request", f"finish takes exactly the fields {sorted(FINISH_FIELDS)}")
            return self.finish(request["submission_ids"])
        return error("invalid_request", "unknown method; use submit or finish")

    def submit(self, indices: object) -> dict:
        host = self.host
        bad = _bad_indices(indices, host.config.n_env_instances)
        if bad is not None:
            return error(*bad)
        ids = list(cast("list[int]", indices))  # _bad_indices checked: a list of ints
        answer = host.judge.submit_ids(ids)
        if isinstance(answer[0], str):
            if answer[0] == "program_invalid":
                self.journal.event("submission_rejected", reason="program_invalid")
            return error(answer[0], answer[1])
        status, payload = answer
        if status != 200:  # the host failed and refunded the submit (judge._refund)
            return error("evaluation_failed", payload["error"]["message"])
        summary, index = payload["summary"], payload["submit_id"]
        name = host.run.submit_name(index)
        receipt = {"submission_id": self.published.add(index), "program_digest": _digest(host, name),
                   "episode_indices": ids, "episodes_used": summary["n_episodes"],
                   "episodes_remaining": summary["remaining_budget"]}
        episodes = feedback_v2.episode_docs(ids, payload["episodes"], payload["status"])
        try:
            made = self._feedback(summary, episodes, name)
            feedback_v2.publish(host.run.feedback, receipt, episodes, made)
        except (feedback_v2.FeedbackError, OSError) as exc:
            host.run.event("feedback_v2.error", submit=index, error=f"{type(exc).__name__}: {exc}"[:500])
            return error("publication_failed", f"the submission ran ({name}, charged) but its feedback/v2 document "
                                               f"could not be written: {exc}"[:500])
        self._journal_published(receipt, episodes, made["score"])
        return {"protocol": PROTOCOL, "ok": True, "result": {
            **receipt, "score": made["score"],
            "feedback": f"feedback/{feedback_v2.SUBMISSIONS}/{receipt['submission_id']}/feedback.json",
            "status": payload["status"], "submit_index": index, "summary": f"feedback/{name}/summary.json"}}

    def _feedback(self, summary: dict, episodes: list[dict], name: str) -> dict:
        hook = envs.feedback_hook(self.host.config.env)
        if hook is None:
            return feedback_v2.default_feedback(summary, episodes, name)
        return feedback_v2.env_feedback(hook, episodes)

    def _journal_published(self, receipt: dict, episodes: list[dict], score: float | None) -> None:
        sid, total = receipt["submission_id"], len(episodes)
        for done, episode in enumerate(episodes, 1):
            self.journal.event("episode_completed", submission_id=sid, completed=done, total=total,
                               episode_index=episode["episode_index"], status=episode["status"])
        self.journal.event("submission_published", submission_id=sid, program_digest=receipt["program_digest"],
                           score=score, episodes_remaining=receipt["episodes_remaining"])

    def finish(self, ids: object) -> dict:
        host = self.host
        if type(ids) is not list or not ids:
            return self._reject_finish("invalid_request", "submission_ids must be a non-empty list of submission ids")
        if not all(type(i) is str and i for i in ids):
            return self._reject_finish("invalid_request", "submission_ids must contain non-empty text", len(ids))
        indices = tuple(_index(self.published, name, -1 - n) for n, name in enumerate(ids))
        refusal = host.candidate_refusal(indices)
        if refusal is not None:
            code, message = refusal
            unknown = [name for name, i in zip(ids, indices) if i < 0]
            if code == "unknown_submission" and unknown:
                known = map(feedback_v2.submission_id, range(1, len(self.published.indices) + 1))
                message = (f"{unknown[0][:40]!r} is not a published submission of this run; "
                           f"published: {', '.join(known) or 'none'}")
            return self._reject_finish(code, message, len(ids))
        status, payload = host.finish(indices)
        if status != 200:
            return self._reject_finish(payload["status"], payload["error"]["message"], len(ids),
                                       host.judge.state.remaining)
        if not host.closed_by(payload):  # another request (HTTP /finish, SIGTERM) closed it meanwhile
            return error("session_closed", "the run was closed by another request; these candidates were not used")
        self.closed_by_agent = True
        self.journal.event("finish_requested", candidate_count=len(ids), episodes_remaining=host.judge.state.remaining)
        names = [self.published.name(i) for i in indices]  # canonical (`submit_000` names its submission-NNNNNN)
        return {"protocol": PROTOCOL, "ok": True, "result": {"candidate_submission_ids": names,
                                                             "agent_authority_closed": True}}

    def _reject_finish(self, code: str, message: str, count: int | None = None, remaining: int | None = None) -> dict:
        fields = {"candidate_count": count} if count is not None else {}
        self.journal.event("finish_rejected", reason=code, **fields,
                           **({"episodes_remaining": remaining} if remaining is not None else {}))
        return error(code, message)


def _bad_indices(indices: object, pool: int) -> tuple[str, str] | None:
    """Why `episode_indices` is no valid request, in EvoPolicyGym main's order, or None."""
    if type(indices) is not list or not indices:
        return "invalid_request", "episode_indices must be a non-empty list"
    if not all(type(i) is int and 0 <= i < pool for i in indices):
        return "invalid_request", f"episode_indices contains an invalid pool index (integers in [0, {pool}))"
    if any(a >= b for a, b in zip(indices, indices[1:])):
        return "invalid_request", "episode_indices must be strictly increasing"
    if len(indices) > MAX_EPISODE_INDICES:
        return "episode_limit", f"at most {MAX_EPISODE_INDICES} episode indices per submission"
    return None


def _index(published: feedback_v2.Publications, name: str, unknown: int) -> int:
    """The submit index a submission id names; `unknown` (negative, distinct per name: two
    unknown names are not duplicates) for anything that names no published submission."""
    index = published.index_of(name)
    return unknown if index is None else index


def _digest(host: Host, name: str) -> str | None:
    try:
        return json.loads((host.run.checkpoints / name / "metrics.json").read_text())["tree_hash"]
    except (OSError, ValueError, KeyError):
        return None  # a submit refused before its snapshot has no program


def task_text(host: Host) -> str:
    """The agent-session/v3 task: the brief, how to work the run through `evopolicygym-session`,
    and the static specification as JSON (upstream's public spec fields)."""
    info, c = host.info(), host.config
    meta = info["env_meta"]
    spec = {"id": c.env, "description": host.spec.title, "observation_space": meta["obs_space"],
            "action_space": meta["action_space"], "max_episode_steps": meta["max_episode_steps"],
            "metadata": {"env_meta": meta, "episode_budget": c.budget, "episode_pool_size": c.n_env_instances,
                         "min_episodes_per_submission": c.min_per_submit,
                         "max_episodes_per_submission": c.max_per_submit,
                         "max_submissions": c.max_submissions if c.max_submissions is not None else c.budget,
                         "max_candidates": c.max_candidates, "finish_budget_policy": c.finish_budget_policy,
                         "resource_limits": info["resource_limits"], "protocol": PROTOCOL},
            "environment_parameters": {}, "environment_digest": "sha256:" + host.pools.hashes["data_train_hash"],
            "primary_metric": "heldout_mean_return", "score_direction": "maximize"}
    finish = ("The whole budget must be spent before `finish` succeeds (`budget_remaining` otherwise); a "
              "submission too small to leave that possible is refused with `budget_allocation`."
              if not c.allow_early_finish else "You may finish before the budget is spent.")
    limit = c.max_candidates
    return "\n".join([
        host.task().rstrip(), "",
        "## Agent Session (agent-session/v3)",
        "Work this run through its session socket (`$EVOPOLICYGYM_SESSION_SOCKET`, relative to the workspace), "
        "e.g. with `evopolicygym-session`:",
        "", '    evopolicygym-session submit program --episodes "0:4"',
        "    evopolicygym-session finish submission-000003", "",
        "`program` is this workspace's `system/` (a link); it starts with a baseline program. `policy.py` "
        "defines `make_policy(context)` returning an object with `act(observation)` (a fresh one per "
        "episode), or `class Policy` as above. Episode indices are strictly increasing; `START:END` is half "
        "open. Each submit answers a receipt with `submission_id`, `score`, `status`, `episodes_used` and "
        "`episodes_remaining`; `feedback/latest.json` names the newest `feedback/submissions/<submission_id>/"
        "feedback.json`, and `feedback/submit_NNN/` (the receipt's `summary`) holds every episode's files. "
        "A program without `policy.py` is refused for free (`program_invalid`). The run stays open until you "
        f"call `finish` with the submissions to validate ({f'at most {limit}' if limit else 'any number'}; "
        "ties go to the one named first). " + finish, "",
        "Benchmark public specification:", "", "```json", json.dumps(spec, indent=2, sort_keys=True), "```", ""])


class Gateway:
    """The Unix-socket server of one run's `Session`, on its own thread and event loop."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.session = Session(host)
        self.path = private_dir(host.run.control) / SOCKET_NAME
        self._sock = _listen(self.path)
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="evogym-session")
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="session", daemon=True)
        self._turn = asyncio.Lock()  # binds to the serving loop at its first use (Python 3.10+)
        self._prepare_workspace()

    def _prepare_workspace(self) -> None:
        """TASK.md, the `program` link, and in an empty `system/` the baseline program (upstream
        starts every run from its benchmark's baseline; `--program` seeded it before)."""
        ws, run = self.host.run.workspace, self.host.run
        if seed_workspace(run.system, None, baseline=True) is not None:
            keep_initial(run.root, run.system)
        (ws / TASK_FILE).write_text(task_text(self.host), encoding="utf-8")
        link = ws / PROGRAM_LINK
        if not link.is_symlink():
            link.symlink_to("system", target_is_directory=True)

    def agent_env(self) -> dict[str, str]:
        """The variables an agent of this session receives (upstream's names)."""
        ws = self.host.run.workspace
        return {"EVOPOLICYGYM_SESSION_SOCKET": os.path.relpath(self.path, ws), "EVOPOLICYGYM_WORKSPACE": str(ws)}

    def start(self) -> "Gateway":
        ready = threading.Event()
        self._ready = ready
        self._thread.start()
        if not ready.wait(10):
            raise ConfigError("the agent-session socket did not start", hint="see the host log")
        return self

    def stop(self) -> None:
        if self._loop is not None and not self._stopped.is_set():
            self._loop.call_soon_threadsafe(self._stopped.set)
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._sock.close()
        self.path.unlink(missing_ok=True)

    def _serve(self) -> None:
        loop = self._loop = asyncio.new_event_loop()
        server = loop.run_until_complete(asyncio.start_unix_server(self._connection, sock=self._sock))
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            for task in asyncio.all_tasks(loop):
                task.cancel()
            loop.run_until_complete(asyncio.sleep(0))
            loop.close()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            answer = await self._answer(reader)
            writer.write(encode_frame(answer))
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT_S)
        except (OSError, asyncio.TimeoutError, ConnectionError):
            pass  # the client left: nothing to answer
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> dict:
        try:
            head = await asyncio.wait_for(reader.readexactly(4), READ_TIMEOUT_S)
            length = int.from_bytes(head, "big")
            if not 0 < length <= FRAME_BYTES:
                return error("invalid_request", f"frame length {length} is outside 1..{FRAME_BYTES}")
            payload = await asyncio.wait_for(reader.readexactly(length), READ_TIMEOUT_S)
        except asyncio.IncompleteReadError:
            return error("invalid_request", "the request frame ended early")
        except asyncio.TimeoutError:
            return error("invalid_request", f"no complete request frame within {READ_TIMEOUT_S:g} s")
        request = decode_frame(payload)
        if request is None:
            return error("invalid_request", "the request frame is not a UTF-8 JSON object")
        async with self._turn:  # one request at a time, waiting here rather than in a thread
            try:
                return await asyncio.get_running_loop().run_in_executor(self._pool, self.session.handle, request)
            except Exception as exc:  # noqa: BLE001 - a host fault: answered, the agent may retry
                return error("session_failed", f"the host failed on this request: {type(exc).__name__}: {exc}"[:500])


def _listen(path: Path) -> socket.socket:
    """A listening Unix socket at `path`, 0600 (its directory is 0700). A path longer than
    AF_UNIX allows (108 bytes) is bound through a descriptor of its directory."""
    path.unlink(missing_ok=True)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        if len(os.fsencode(path)) < 100:
            sock.bind(str(path))
        else:
            fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
            try:
                sock.bind(f"/proc/self/fd/{fd}/{path.name}")
            finally:
                os.close(fd)
        os.chmod(path, 0o600)
        sock.listen(64)
        sock.setblocking(False)
    except OSError as exc:
        sock.close()
        raise ConfigError(f"cannot open the agent-session socket {path}: {exc.strerror or exc}",
                          hint="use a --run-dir on a local filesystem") from None
    return sock
