"""The command agent: any CLI agent (a coding assistant, a script) works the task in the workspace.

The loop policy cannot be enforced inside a foreign process, so it is handed over as
instructions: an AGENTS.md-style brief rendering every component as concrete rules,
plus the protocol contract. The brief is written to the agent log dir and its path is
passed in `OLE_INSTRUCTIONS`, next to the reference's `EVOPOLICYGYM_*` variables.
What is enforced here: the containment of `ole.agents.sandbox` (an environment allowlist,
and by default a bubblewrap sandbox that sees only its own run), the wall-clock cap (the
whole process group is killed) and capped capture of stdout/stderr. The iterations are reconstructed afterwards from the
workspace alone: `feedback/submit_NNN/summary.json` for verdicts and returns, and the
`system/` snapshots a watcher thread took while the agent ran for edit kinds.
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import stat
import subprocess
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import IO, Sequence

from ole.agents import decisions
from ole.agents.base import AgentContext, AgentResult, HostAgent
from ole.agents.client import SESSION_SCHEME, Credential, HostClient, HostError, credential_for
from ole.agents.edits import diff_lines, edit_kind
from evogym.durable import SUMMARY_MAX_BYTES
from ole.agents.hostio import read_json
from ole.agents.sandbox import AgentSandbox, Contained, Grants, agent_environment
from ole.loop_policy import LoopPolicy
from ole.trace import Iteration

PROTOCOL_VERSION = "protocol/v2.0-draft"
OUTPUT_CAP_BYTES = 1 << 20
"""stdout and stderr kept per stream; the rest is drained and dropped (the file says so at the end)."""
KILL_GRACE_S = 5.0
"""After the wall-clock cap: SIGTERM to the process group, then SIGKILL after this long."""
WATCH_INTERVAL_S = 0.1
"""How often `system/policy.py` is snapshotted while the agent runs (edit kinds per submit)."""
INSTRUCTIONS = "instructions.md"


class CommandAgent(HostAgent):
    """Runs `command` with cwd = workspace under the loop policy's wall-clock cap."""

    name = "command"

    def __init__(self, command: str | Sequence[str], *, output_cap_bytes: int = OUTPUT_CAP_BYTES,
                 kill_grace_s: float = KILL_GRACE_S, sandbox: AgentSandbox | None = None) -> None:
        argv = shlex.split(command) if isinstance(command, str) else list(command)
        if not argv:
            raise ValueError("the command agent needs a command: ole run --agent command -- CMD ARGS")
        self.command = argv
        self.output_cap_bytes = output_cap_bytes
        self.kill_grace_s = kill_grace_s
        self.sandbox = sandbox if sandbox is not None else AgentSandbox()
        """What the agent may see and reach beyond its own run (`ole.agents.sandbox`)."""

    def work(self, ctx: AgentContext) -> AgentResult:
        ctx.log_dir.mkdir(parents=True, exist_ok=True)
        info = HostClient(ctx.url).info()
        brief = (ctx.log_dir / INSTRUCTIONS).resolve()  # absolute: the command runs in the workspace
        brief.write_text(render_instructions(ctx.bundle.loop_policy, ctx.url, ctx.workspace, info))
        protocol = {**protocol_env(ctx.url, ctx.workspace), "OLE_INSTRUCTIONS": str(brief)}
        credential = credential_for(ctx.url)
        if credential is not None:  # in its environment, never in its argv
            protocol.update(credential.env())
        lessons = None
        if ctx.lessons_path is not None and ctx.bundle.loop_policy.memory.carry_lessons:
            lessons = Path(ctx.lessons_path).resolve()
            protocol["OLE_LESSONS"] = str(lessons)
        env = agent_environment(protocol, self.sandbox)
        watcher = _Watcher(ctx.workspace / "system" / "policy.py")
        watcher.start()
        try:
            rc, timed_out, wall = self._run(ctx, env, self._grants(ctx, brief, credential, lessons))
        finally:
            watcher.stop()
        ctx.progress(f"command agent exited with {rc} after {wall:.1f} s" + (" (wall-clock cap)" if timed_out else ""))
        (ctx.log_dir / "command.exit.json").write_text(json.dumps(
            {"argv": self.command, "exit_code": rc, "timed_out": timed_out, "wall_s": round(wall, 3)}) + "\n")
        for it in iterations_from_workspace(ctx.workspace, watcher.snapshots):
            ctx.record(it)
        return AgentResult(self._reason(ctx, rc, timed_out),
                           extras={"stdout": "command.stdout.txt", "stderr": "command.stderr.txt",
                                   "instructions": INSTRUCTIONS, "exit": "command.exit.json"})

    def _grants(self, ctx: AgentContext, brief: Path, credential: Credential | None, lessons: Path | None) -> Grants:
        """What of its run the sandboxed agent sees: the workspace (feedback and the host's texts
        read-only), its brief, its run's token files, the lessons file, its own socket, the files
        its command line names and what the operator granted."""
        ws = ctx.workspace.resolve()
        grants = Grants(ws)
        for name in ("feedback", "AGENTS.md", "TASK.md"):  # the host's; the agent only reads them
            if (ws / name).exists() and not (ws / name).is_symlink():
                grants.read_only.append(ws / name)
        grants.read_only.append(brief)
        if credential is not None:
            grants.read_only += [Path(f) for f in (credential.token_file, credential.header_file) if f]
        if lessons is not None:
            lessons.parent.mkdir(parents=True, exist_ok=True)  # as the lesson store makes it: bound in, it
            lessons.touch(exist_ok=True)  # must exist (the agent extends it)
            grants.read_write.append(lessons)
        if ctx.url.startswith(SESSION_SCHEME):
            grants.sockets.append(Path(ctx.url.removeprefix(SESSION_SCHEME)))
        named = [shutil.which(self.command[0]) or self.command[0], *self.command[1:]]
        grants.read_only += [Path(a) for a in named if os.path.isabs(a) and os.path.isfile(a)]
        grants.read_only += [Path(p).resolve() for p in self.sandbox.read_only]
        return grants

    def _run(self, ctx: AgentContext, env: dict[str, str], grants: Grants) -> tuple[int, bool, float]:
        """Run the command: (exit status, whether the wall-clock cap stopped it, its wall seconds).

        Whatever way it ends (it exits, the cap, an interrupt of this process), nothing it started
        outlives it: its process group is killed, and so is every process carrying its run marker
        in its environment (a daemon that left the group with setsid still has it); in the sandbox
        its pid namespace ends with it besides."""
        marker = uuid.uuid4().hex
        env = {**env, AGENT_MARKER: marker}
        t0 = time.monotonic()
        contained = Contained(self.sandbox, ctx.url, grants) if self.sandbox.isolation == "bwrap" else None
        argv = contained.argv(self.command) if contained is not None else self.command
        try:
            proc = subprocess.Popen(argv, cwd=ctx.workspace.resolve(), env=env, stdin=subprocess.DEVNULL,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        except OSError as exc:
            if contained is not None:
                contained.close()
            (ctx.log_dir / "command.stderr.txt").write_text(f"cannot start {argv[0]!r}: {exc}\n")
            (ctx.log_dir / "command.stdout.txt").write_text("")
            return 127, False, time.monotonic() - t0
        pumps = [_pump(proc.stdout, ctx.log_dir / "command.stdout.txt", self.output_cap_bytes),
                 _pump(proc.stderr, ctx.log_dir / "command.stderr.txt", self.output_cap_bytes)]
        timed_out = False
        try:
            try:
                proc.wait(timeout=ctx.bundle.loop_policy.budget.wall_time_s)
            except subprocess.TimeoutExpired:
                timed_out = True
                self._stop(proc)
            wall = time.monotonic() - t0
        finally:  # an interrupt of ole too: the agent is not left running
            _kill_group(proc.pid)
            sweep_marked(marker)
            if proc.returncode is None:
                proc.kill()
                proc.wait()
            if contained is not None:
                contained.close()
        for pump in pumps:
            pump.join(timeout=10)  # every writer is gone: EOF now
        return int(proc.returncode if proc.returncode is not None else -9), timed_out, wall

    def _stop(self, proc: subprocess.Popen) -> None:
        """The wall-clock cap: SIGTERM to the group, SIGKILL after the grace (the caller then kills
        what is left of the group whether or not the leader went at SIGTERM)."""
        _kill_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=self.kill_grace_s)
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            proc.wait()

    @staticmethod
    def _reason(ctx: AgentContext, rc: int, timed_out: bool) -> str:
        if timed_out:
            return "wall_time"
        try:
            state = HostClient(ctx.url).info().get("state", {})
        except HostError:
            state = {}
        if int(state.get("remaining_budget", 1)) == 0:
            return "budget_spent"
        if rc != 0:
            return "error"
        return "finished_early"


def protocol_env(url: str, workspace: Path) -> dict[str, str]:
    """The reference's agent environment variables (plus the /finish extension); for an
    agent-session/v3 URL upstream's two (the socket, relative to the workspace, and the workspace)."""
    ws = Path(workspace).resolve()
    if url.startswith(SESSION_SCHEME):
        return {"EVOPOLICYGYM_SESSION_SOCKET": os.path.relpath(url.removeprefix(SESSION_SCHEME), ws),
                "EVOPOLICYGYM_WORKSPACE": str(ws), "EVOPOLICYGYM_PROTOCOL": "agent-session/v3"}
    return {"EVOPOLICYGYM_API": url, "EVOPOLICYGYM_INFO_URL": f"{url}/info", "EVOPOLICYGYM_TASK_URL": f"{url}/task",
            "EVOPOLICYGYM_SUBMIT_URL": f"{url}/submit", "EVOPOLICYGYM_FINISH_URL": f"{url}/finish",
            "EVOPOLICYGYM_WORKSPACE": str(ws), "EVOPOLICYGYM_SYSTEM": str(ws / "system"),
            "EVOPOLICYGYM_FEEDBACK": str(ws / "feedback"), "EVOPOLICYGYM_AGENTS": str(ws / "AGENTS.md"),
            "EVOPOLICYGYM_PROTOCOL": PROTOCOL_VERSION}


AGENT_MARKER = "OLE_AGENT_RUN"
"""Environment variable every process the command starts inherits (a random value per run):
how the processes it left behind are found once it ends (`sweep_marked`)."""


def _kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def marked(marker: str) -> list[int]:
    """Processes (of this user) whose environment carries the command agent's run marker."""
    needle = f"{AGENT_MARKER}={marker}".encode() + b"\0"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # gone, or another user's
                pass
    return found


def sweep_marked(marker: str, rounds: int = 5) -> None:
    """SIGKILL every process carrying the marker, a few rounds (one may fork while being swept).
    A process that cleared its own environment is not found: the limit of this sweep."""
    for _ in range(rounds):
        pids = marked(marker)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.05)


def _pump(stream: IO[bytes] | None, path: Path, cap: int) -> threading.Thread:
    """Copy a pipe to a file up to `cap` bytes, then keep draining so the child never blocks."""
    def run() -> None:
        kept = dropped = 0
        with open(path, "wb") as out:
            assert stream is not None
            for chunk in iter(lambda: stream.read1(65536), b""):  # type: ignore[attr-defined]  # a Popen pipe is buffered
                room = max(0, cap - kept)
                out.write(chunk[:room])
                kept += min(room, len(chunk))
                dropped += max(0, len(chunk) - room)
            if dropped:
                out.write(f"\n[... {dropped} bytes dropped at the {cap}-byte cap]\n".encode())
    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


SNAPSHOT_MAX_CHARS = 1 << 20
"""A `policy.py` longer than this is recorded as seen but not kept (no edit kind for its submits)."""
SNAPSHOTS_MAX_CHARS = 64 << 20
"""Total text the watcher keeps; past it, changes are recorded as seen but not kept (a policy
rewritten every 0.1 s with 2 MB made the watcher hold 450 MB in 20 s)."""


class _Watcher:
    """Snapshots `policy.py` whenever it changes, with the wall time it was seen (text None:
    seen, not kept: over `SNAPSHOT_MAX_CHARS`, or past `SNAPSHOTS_MAX_CHARS` in all)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.snapshots: list[tuple[float, str | None]] = []
        self._kept = 0
        self._last_digest: bytes | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while True:
            data = _read_regular(self.path, SNAPSHOT_MAX_CHARS)
            if data is not None:
                digest = hashlib.sha256(data).digest()
                if digest != self._last_digest:
                    self._last_digest = digest
                    text = data.decode(errors="replace") if len(data) <= SNAPSHOT_MAX_CHARS else None
                    if text is not None and self._kept + len(text) > SNAPSHOTS_MAX_CHARS:
                        text = None
                    self._kept += len(text or "")
                    self.snapshots.append((time.time(), text))
            if self._stop.wait(WATCH_INTERVAL_S):
                return


def _read_regular(path: Path, limit: int) -> bytes | None:
    """Up to `limit` + 1 bytes of a regular file, None for anything else: a FIFO at
    `system/policy.py` blocked the watcher's read for good, and a symbolic link there or at
    `system/` itself (to another run's folder) is not followed."""
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return None
    finally:
        os.close(parent)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with os.fdopen(fd, "rb", closefd=False) as handle:
            return handle.read(limit + 1)
    except OSError:
        return None
    finally:
        os.close(fd)


def iterations_from_workspace(workspace: Path, snapshots: Sequence[tuple[float, str | None]] = ()
                              ) -> list[Iteration]:
    """One Iteration per feedback/submit_NNN, from the summary and the program seen before it started."""
    out: list[Iteration] = []
    previous: str | None = None
    dirs = sorted((Path(workspace) / "feedback").glob("submit_*"), key=lambda p: p.name)
    for n, sub in enumerate(dirs):
        summary = read_json(sub / "summary.json", SUMMARY_MAX_BYTES)  # bounded: a FIFO or 4 GiB file is skipped
        if not isinstance(summary, dict):  # the workspace is the agent's: anything can be there
            continue
        try:
            it = _iteration(n, summary, snapshots, previous)
        except (ValueError, TypeError):  # one entry with a broken field is skipped, not the whole history
            continue
        out.append(it)
        program = _program_at(snapshots, summary.get("submit_started_at"))
        if program is not None:
            previous = program
    return out


def _iteration(n: int, summary: dict, snapshots: Sequence[tuple[float, str | None]], previous: str | None
               ) -> Iteration:
    program = _program_at(snapshots, summary.get("submit_started_at"))
    kind = edit_kind(previous, program) if program is not None else "none"
    returns = summary.get("returns")
    mean = summary.get("mean_return")
    return Iteration(
        index=n, phase="external", observation_digest="", edit_kind=kind,
        diff_lines=diff_lines(previous, program) if program is not None else 0,
        submitted_indices=tuple(int(i) for i in summary.get("env_instances") or ()),
        submit_id=summary.get("submit_index"), verdict=summary.get("status"),
        returns=tuple(float(r) for r in returns) if isinstance(returns, list) and summary.get("status") == "ok"
        and all(isinstance(r, (int, float)) for r in returns) else None,
        mean_return=float(mean) if isinstance(mean, (int, float)) else None,
        episodes_charged=int(summary.get("n_episodes") or 0),
        wall_s=float(summary.get("wall_time_seconds") or 0.0), note="reconstructed from workspace feedback")


def _program_at(snapshots: Sequence[tuple[float, str | None]], started_at: object) -> str | None:
    if not snapshots or not isinstance(started_at, str):
        return snapshots[-1][1] if snapshots else None
    try:
        t = datetime.fromisoformat(started_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return snapshots[-1][1]
    seen = [text for when, text in snapshots if when <= t]
    return seen[-1] if seen else snapshots[0][1]


def render_instructions(policy: LoopPolicy, url: str, workspace: Path, info: dict) -> str:
    """The brief for an external agent: every loop-policy component as rules, plus the protocol contract."""
    policy = decisions.for_budget(policy, int(info.get("episode_budget", 0)) or 1)
    o, p, m, a, v, r, s, b = (policy.observation, policy.planning, policy.memory, policy.action,
                              policy.verification, policy.recovery, policy.stopping, policy.budget)
    budget = int(info.get("episode_budget", 0))
    k = min(a.episodes_per_submit, int(info.get("max_episodes_per_submit", a.episodes_per_submit)))
    selection = {"matched": f"always submit the same ids 0-{k - 1} so every comparison uses the same episodes",
                 "fresh": "use ids never submitted before in every submit",
                 "mixed": f"about half of each submit (rounded up) from the fixed ids 0-{max(0, (k + 1) // 2 - 1)}, "
                          "the rest never used before"}
    finish = ("keep submitting until `/info` reports `remaining_budget` 0; the host then finalizes by itself"
              if s.mode == "spend_all" else
              f"POST {url}/finish once {s.patience_submits} submits in a row have not improved (re-tests and "
              f"confirmations do not count), and never spend the last {s.reserve_episodes} episodes")
    lines = [
        "# Working brief (loop policy + protocol contract)", "",
        "Follow these rules for the whole run. They come from the loop policy you are evaluated under.", "",
        "## Observation",
        f"- After each submit read these fields of `feedback/submit_NNN/summary.json`: {', '.join(o.summary_fields)}.",
        f"- Inspect the {o.worst_k_episodes} worst episodes, the last {o.trajectory_window} steps of each trajectory.",
        f"- {'Read' if o.read_stdout else 'Do not read'} the policy's stdout/stderr files.",
        f"- Keep the feedback you reason over per step under {o.max_context_chars} characters.", "",
        "## Planning",
        f"- Phases in order: {', '.join(p.phases) or 'tuning'}. Synthesis tries at most {p.max_mechanisms} "
        "distinct mechanisms; tuning adjusts the best one; confirmation re-tests the best programs.",
        "- A candidate is a submit of a new or fixed program; re-tests and confirmations are not candidates.",
        f"- After {p.plateau_submits} candidates in a row without improvement: {_PLATEAU[p.on_plateau]}.", "",
        "## Memory",
        f"- Keep the {m.top_k_programs} best programs as revert targets (as `system/kept/*.py.txt`, so they "
        "are never imported).",
        f"- Keep a log of your last {m.edit_log_size} edits with their outcome and use it to choose the next edit.",
        "- " + ("Read and extend the lessons file named in OLE_LESSONS." if m.carry_lessons
                else "Ignore lessons from other tasks."), "",
        "## Action",
        f"- Submit {k} episodes per exploratory submit (a candidate); {selection[a.index_selection]}. Re-tests and "
        "confirmations use ids never submitted before.",
        f"- Tune in rounds of {a.population} candidates, all on the same ids."
        + (f" Score each candidate on {a.screen_episodes} of them first and finish only the better half that "
           "also matches the best program there." if 0 < a.screen_episodes < k else ""),
        f"- Edit unit: {_GRANULARITY[a.edit_granularity]}; change constants by about {a.step_size:g} of their "
        "scale.", "",
        "## Verification",
        "- " + ("Before each submit, check that every .py under system/ parses and imports only "
                "stdlib/numpy/scipy." if v.static_checks else "No local checks are required before a submit."),
        f"- Re-test an apparent improvement on {v.retest_episodes} new episodes before trusting it"
        + (", and run the best program on the same new ids." if v.matched_comparison else "."),
        "- Count it as an improvement only if its gain over the best, "
        + ("compared episode by episode on shared ids, " if v.matched_comparison else "mean against mean, ")
        + f"minus {v.stderr_multiple:g} standard errors of that gain, exceeds {v.margin:.0%} of the best's |mean|.", "",
        "## Recovery",
        f"- After a failed verdict (import_error, init_error, rollout_timeout, ...): {_RECOVERY[r.on_error_verdict]}.",
        f"- After a round whose candidates did not beat the best: {_RECOVERY[r.on_regression]}.",
        f"- After every {r.max_retries + 1} failed attempts in a row, move one step up the ladder retry -> revert "
        "-> restructure.",
        f"- After {r.max_rejects} submits in a row refused as malformed (HTTP 400, nothing charged), stop: "
        "the host and you disagree about the protocol.", "",
        "## Stopping", f"- {finish}.",
        "- " + ("Before you stop early (finishing, or the wall clock running out), re-submit your best program if it "
                "was not your last submit, so the run ends on your best program." if s.best_last else
                "When you stop early, end on the program you submitted last (do not re-submit the best one)."), "",
        "## Budget",
        f"- Episode budget {budget}: about {b.synthesis_fraction * budget:.0f} for synthesis, "
        f"{b.confirmation_fraction * budget:.0f} kept for confirmation at the end.",
        f"- You are stopped after {b.wall_time_s:.0f} s of wall time.",
        f"- If you use a language model: at most {b.max_llm_calls} calls, {b.max_tokens} tokens, ${b.max_usd:.2f}.", "",
        "## Protocol contract",
        f"- Workspace (your cwd): `{Path(workspace).resolve()}`. Write only under `system/`; `feedback/` and "
        "`AGENTS.md` are read-only.",
        "- `system/policy.py` defines a top-level `class Policy(obs_space, action_space, env_meta)` with "
        "`reset(episode_index)` and `act(obs)`.",
        *_endpoints(url, info),
        "- Never run environments, simulators or copied dynamics locally; all evidence comes from submits.", ""]
    return "\n".join(lines)


def _endpoints(url: str, info: dict) -> list[str]:
    """How to call the host: v0.1.0 HTTP with the run's token, or agent-session/v3."""
    ids = f"[0, {info.get('env_meta', {}).get('n_env_instances', '?')})"
    if url.startswith(SESSION_SCHEME):
        return ["- The host speaks agent-session/v3 on the socket $EVOPOLICYGYM_SESSION_SOCKET (relative to the "
                "workspace): `evopolicygym-session submit program --episodes \"0:3\"` (strictly increasing ids in "
                f"{ids}; each costs one episode) and `evopolicygym-session finish submit_NNN ...` (the ok submits "
                "to validate; it ends the run). The task text is TASK.md."]
    return [f"- GET {url}/task (brief) and GET {url}/info (budget, spaces, state).",
            f'- POST {url}/submit with JSON `{{"env_instances": [0, 1, 2]}}` or `{{"env_instances": "0-2"}}`; ids in '
            f"{ids}; each accepted id costs one episode.",
            f"- POST {url}/finish ends the run early; never call /finalize.",
            "- Every request carries the run's token: header `Authorization: Bearer $EVOPOLICYGYM_TOKEN` (with curl: "
            '`-H @"$EVOPOLICYGYM_AUTH_HEADER_FILE"`, so it stays out of the command line).',
            "- The same URLs are in EVOPOLICYGYM_INFO_URL, EVOPOLICYGYM_TASK_URL, EVOPOLICYGYM_SUBMIT_URL, "
            "EVOPOLICYGYM_FINISH_URL."]


_PLATEAU = {"next_phase": "move on to the next phase", "restructure": "go back to synthesis with a new mechanism",
            "widen_search": "double the size of your changes"}
_GRANULARITY = {"parameters": "numeric constants only", "function": "one function per edit",
                "file": "the whole file may change"}
_RECOVERY = {"retry": "fix the failing program and resubmit", "revert": "return to the best program",
             "restructure": "switch to a different mechanism", "keep": "continue from the new program"}
