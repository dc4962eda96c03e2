"""Run EvoPolicyGym main's `test_submission_session.py` against a real evogym host.

A script for Python >= 3.12 with upstream's `src` and `tests` on sys.path (started by
tests/evogym/test_upstream_interop.py). Upstream's tests build a `SubmissionSession` from
in-memory doubles (a program source, an evaluator, a publisher, a recorder); here that name
is replaced by `HostSession`, which starts `evogym serve --session` (our Python, our repo:
$EVOGYM_PYTHON, $EVOGYM_REPO) with the test's configuration and forwards every `submit` and
`finish` over the session socket with upstream's own client framing. What the doubles would
have observed is filled in from what the host published, never invented:

- the program source: its program is written into the workspace before each submit; a
  source that raises ProgramError leaves the workspace without `policy.py` for that submit;
- the evaluator's `inputs`: the pool entries the host's feedback/v2 document says it ran;
- the publisher's `results`: the host's published feedback/v2 documents, as SubmissionResults;
- the recorder's `events`: the host's `record/events.jsonl` (upstream's event vocabulary).

A double that makes the evaluation or the publication fail has no counterpart in a real host:
those tests fail here, and test_upstream_interop.py says why. Prints one JSON line per test:
{"test", "outcome" (pass|fail|error), "detail"}.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import traceback
import unittest
from pathlib import Path

from evopolicygym.errors import ProgramError
from evopolicygym.results import EpisodeSummary, Feedback, SubmissionResult
from evopolicygym.run._session.client import receive_session_message, send_session_message
from evopolicygym.run._session.outcomes import FinishReceipt, SessionError, SubmissionReceipt

import test_submission_session as upstream

RECORDING = "gymnasium/recording_env:EvogymRecording-v0"
TRAIN_POOL = 1024
"""evogym's train pool: a larger upstream pool is served as this many ids."""
HOSTS: list[subprocess.Popen] = []


class HostSession:
    """`SubmissionSession`'s constructor and surface, answered by a real `evogym serve --session`."""

    def __init__(self, *, programs, evaluator, publisher, benchmark, spec, config, recorder, episode_pool) -> None:
        del benchmark, spec
        self._programs, self._evaluator, self._publisher, self._recorder = programs, evaluator, publisher, recorder
        self._pool = episode_pool
        self._dir = Path(tempfile.mkdtemp(prefix="evogym-adapter-"))
        self._program = programs.program
        start = self._dir / "initial"
        self._write(start)
        self._events_seen = 0
        self._candidates: tuple[str, ...] = ()
        self._submissions: list[SubmissionResult] = []
        self._remaining = config.episode_budget
        self._max_submissions = config.max_submissions
        self._ready = self._start(config, start)
        self._workspace = Path(self._ready["workspace"])

    # -- the host ----------------------------------------------------------------------
    def _start(self, config, start: Path) -> dict:
        flags = ["--budget", str(config.episode_budget), "--max-submissions", str(config.max_submissions),
                 "--episode-pool-size", str(min(config.episode_pool_size, TRAIN_POOL)),
                 "--max-candidates", str(config.validation.max_candidates if config.validation else 1)]
        if config.max_episodes_per_submission is not None:
            flags += ["--max-per-submit", str(config.max_episodes_per_submission)]
        if config.finish_budget_policy == "require_budget_exhaustion":
            flags.append("--no-early-finish")
        repo = os.environ["EVOGYM_REPO"]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.environ["EVOGYM_FIXTURES"], repo])}
        proc = subprocess.Popen([os.environ["EVOGYM_PYTHON"], "-m", "evogym.cli", "serve", "--env", RECORDING,
                                 "--run-dir", str(self._dir / "run"), "--session", "--isolation", "none",
                                 "--no-prestart", "--program", str(start), *flags],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True, cwd=repo)
        HOSTS.append(proc)
        line = proc.stdout.readline() if proc.stdout else ""
        if not line:  # the host refused the configuration (exit 2, one line on stderr)
            proc.wait()
            raise ValueError(proc.stderr.read().strip() if proc.stderr else "the host did not start")
        return json.loads(line)

    def _call(self, message: dict) -> dict:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.connect(self._ready["session_socket"])
            send_session_message(conn, message)
            answer = receive_session_message(conn)
        self._mirror_events()
        return answer

    def _write(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        for name in self._program.files:
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_bytes(self._program.read_bytes(name))

    def _mirror_events(self) -> None:
        path = Path(self._ready["run_dir"]) / "record" / "events.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        for line in lines[self._events_seen:]:
            row = json.loads(line)
            name = row.pop("event")
            for key in ("schema", "time_unix_ns", "monotonic_ns"):
                row.pop(key, None)
            self._recorder.events.append((name, row))
        self._events_seen = len(lines)

    # -- SubmissionSession's surface ----------------------------------------------------
    def submit(self, episode_indices):
        program = self._workspace / "program"
        try:
            self._program = self._programs.capture()
            self._write(program)
        except ProgramError:
            (program / "policy.py").unlink(missing_ok=True)
        answer = self._call({"protocol": "agent-session/v3", "method": "submit", "episode_indices": episode_indices})
        if not answer["ok"]:
            return SessionError(code=answer["error"]["code"], message=answer["error"]["message"])
        result = answer["result"]
        self._publish(result)
        self._remaining = result["episodes_remaining"]
        return SubmissionReceipt(submission_id=result["submission_id"], program_digest=result["program_digest"],
                                 score=result["score"], episode_indices=tuple(result["episode_indices"]),
                                 episodes_used=result["episodes_used"],
                                 episodes_remaining=result["episodes_remaining"])

    def _publish(self, result: dict) -> None:
        doc = json.loads((self._workspace / result["feedback"]).read_text())
        ran = tuple(self._pool[e["episode_index"]] for e in doc["episodes"])
        self._evaluator.inputs.append(ran)
        published = SubmissionResult(
            submission_id=doc["submission_id"], program=self._program, episode_indices=tuple(doc["episode_indices"]),
            episodes_used=doc["episodes_used"], episodes_remaining=doc["episodes_remaining"],
            feedback=Feedback(score=doc["score"], content=doc["content"]),
            episodes=tuple(EpisodeSummary(status=e["status"], reward=e["reward"], steps=e["steps"],
                                          failure=e["failure"]) for e in doc["episodes"]))
        self._publisher.results.append(published)
        self._submissions.append(published)

    def finish(self, submission_ids):
        answer = self._call({"protocol": "agent-session/v3", "method": "finish", "submission_ids": submission_ids})
        if not answer["ok"]:
            return SessionError(code=answer["error"]["code"], message=answer["error"]["message"])
        self._candidates = tuple(answer["result"]["candidate_submission_ids"])
        return FinishReceipt(candidate_submission_ids=self._candidates)

    @property
    def submissions(self):
        return tuple(self._submissions)

    @property
    def candidate_submission_ids(self):
        return self._candidates

    @property
    def terminal_reason(self):
        return None  # the host refunds a failed evaluation and stays open: no terminal reason of its own

    @property
    def agent_authority_closed(self):
        return bool(self._candidates)

    @property
    def authority_exhausted(self):
        return self._remaining == 0 or len(self._submissions) >= self._max_submissions


def stop_hosts() -> None:
    while HOSTS:
        proc = HOSTS.pop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()


class Result(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.rows: list[dict] = []

    def addSuccess(self, test):
        self.rows.append({"test": test._testMethodName, "outcome": "pass", "detail": ""})

    def addFailure(self, test, err):
        self.rows.append({"test": test._testMethodName, "outcome": "fail", "detail": _last(err)})

    def addError(self, test, err):
        self.rows.append({"test": test._testMethodName, "outcome": "error", "detail": _last(err)})


def _last(err) -> str:
    return "".join(traceback.format_exception_only(err[0], err[1])).strip()[:500]


def main() -> int:
    upstream.SubmissionSession = HostSession
    loader = unittest.TestLoader()
    names = loader.getTestCaseNames(upstream.SubmissionSessionTests)
    result = Result()
    for name in names:
        try:
            upstream.SubmissionSessionTests(name).run(result)
        finally:
            stop_hosts()
    for row in result.rows:
        print(json.dumps(row, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
