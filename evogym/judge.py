"""The submit lifecycle: parse -> Phase 1 (free checks) -> charge -> snapshot -> static
scan -> sandboxed import/init -> episodes -> feedback.

All submits are serialized by one lock, and each accepted request is charged exactly
once: the charge is written to `events.jsonl` (fsynced) before anything runs, and an
optional `Idempotency-Key` makes a retried request return the first answer instead of
running again.
"""
from __future__ import annotations

import ast
import collections
import hashlib
import json
import os
import shutil
import threading
import time
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from evogym import code_metrics, envs, pyast
from evogym.feedback import (PartialTree, atomic_write_json, error_line, minimal_episode_files, summary_stats,
                             write_episode, write_tree)
from evogym.recording import Formatter, PendingFiles
from evogym.rollout import BatchResult, EpisodeJob, run_episodes, utc_stamp
from evogym.rundir import BudgetState, RunConfig, RunDir
from evogym.sandbox import CallResult, PolicyProcess, validate_snapshot
from evogym.sandbox.spare import Spare, shadowed
from evogym.verdicts import rollout_verdict, start_failure
from evogym.instances import ParseError, parse as parse_instances
from evogym.program import SnapshotError, program_problem, snapshot

__all__ = ["Judge", "SnapshotError", "denied_imports", "program_problem", "snapshot"]

# The spec's default denied imports (06-seeds-sandbox.md); env authors may add, never remove.
DENIED_IMPORTS = ("transformers", "huggingface_hub", "datasets", "diffusers", "accelerate", "wandb",
                  "mlflow", "tensorboard", "requests", "urllib3", "httpx", "aiohttp", "subprocess",
                  "pkgutil")
IDEMPOTENCY_KEYS_KEPT = 1024


def denied_imports(code_dir: Path, denied=DENIED_IMPORTS) -> list[str]:
    """Top-level names of denied absolute imports anywhere under the snapshot (static)."""
    found = set()
    for path in sorted(code_dir.rglob("*.py")):
        try:
            tree = pyast.parse(path.read_bytes())
        except (SyntaxError, ValueError):
            continue
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] in denied:
                    found.add(name.split(".")[0])
    return sorted(found)


STATIC_CACHE = 64
"""Snapshots whose static results (code metrics, snapshot checks, denied imports) a judge keeps."""


@dataclass(frozen=True)
class _StaticChecks:
    """What the host computes from a snapshot's files alone, before its policy starts; a function
    of the tree (`snapshot`'s digest), so an identical resubmit (a retest of the same program)
    reuses it instead of parsing and walking every file again."""

    measured: dict
    """`code_metrics.code_metrics` of the tree (before metrics.json is written into it)."""
    static: CallResult | None
    """`validate_snapshot`'s verdict (None: the tree may start)."""
    denied: tuple[str, ...]
    """Denied imports (checked only for a tree that passed `validate_snapshot`)."""


class Judge:
    """Owns the budget and turns submit requests into verdicts and feedback."""

    def __init__(self, run: RunDir, config: RunConfig, train_seeds: list[int],
                 on_exhausted: Callable[[], None], prestart: bool = False) -> None:
        self.run, self.config, self.train = run, config, list(train_seeds)
        self.spec = envs.resolve(config.env)
        self.lock = threading.Lock()
        self.state = BudgetState.recover(run, config.budget)
        self.closed = False
        self.on_exhausted = on_exhausted
        self._idem: dict[str, tuple[str, tuple[int, dict]]] = {}
        """Idempotency key -> (digest of the body it came with, the answer)."""
        self.ep_width = max(3, len(str(config.budget)))
        self._recover_interrupted()
        self._static: collections.OrderedDict[str, _StaticChecks] = collections.OrderedDict()
        """Static results by snapshot digest, oldest first (`STATIC_CACHE`)."""
        self.spare: Spare | None = None
        """Sandboxes started ahead for the next submits (`prestart`; docs/sandbox.md)."""
        if prestart:
            self.spare = Spare(run.checkpoints, config.isolation, config.limits)
            weakref.finalize(self, self.spare.close)
            latest = sorted(run.checkpoints.glob("submit_*"))
            self.spare.refill(latest[-1] if latest else None, self.state.remaining)

    def keep_spares(self, n: int) -> None:
        """No submit can come: keep `n` spares, discard the rest. 0 when the budget is spent
        (none idles while the agent may still think); 1 when the run closes, for its held-out
        evaluation (`evogym.finalize.heldout_sandbox`; it starts while validation runs)."""
        if self.spare is not None:
            latest = sorted(self.run.checkpoints.glob("submit_*"))
            self.spare.keep(n, latest[-1] if latest else None)

    def close_spare(self) -> None:
        """Kill the waiting spares (the run closed: no submit will take them)."""
        if self.spare is not None:
            self.spare.close()

    # -- bookkeeping -------------------------------------------------------------
    def _recover_interrupted(self) -> None:
        """A checkpoint without feedback is a submit the host died in: record it, refund it."""
        for ckpt in sorted(self.run.checkpoints.glob("submit_*")):
            fb = self.run.feedback / ckpt.name
            if ckpt.name[7:].isdigit() and not fb.exists():
                index = int(ckpt.name[7:])
                if not (ckpt / "metrics.json").exists() or not (self.run.code_metrics / f"{ckpt.name}.json").exists():
                    self.write_metrics(ckpt)  # the host died between the snapshot and its metrics
                summary = self._summary(index, "host_interrupted", None, time.time(), utc_stamp())
                write_tree(fb, {"summary.json": _pretty(summary), "errors.txt": (error_line(
                    "host_interrupted", "host_interrupted: the host stopped during this submit; "
                    "it was not charged", utc_stamp()) + "\n").encode()})
                self.run.event("submit.interrupted", submit=index)

    def _next_index(self) -> int:
        index = self.state.next_index
        while (self.run.feedback / self.run.submit_name(index)).exists() or \
                (self.run.checkpoints / self.run.submit_name(index)).exists():
            index += 1
        self.state.next_index = index + 1
        self.state.n_submits += 1
        return index

    def _summary(self, index, status, instances, started, started_at, **fields) -> dict:
        base = {"schema_version": "0.1", "submit_index": index, "env": self.config.env, "status": status,
                "n_episodes": 0, "first_global_episode": None, "env_instances": instances,
                "remaining_budget": self.state.remaining, "submit_started_at": started_at,
                "submit_completed_at": utc_stamp(), "wall_time_seconds": round(time.time() - started, 6),
                "timeouts": None, "errors": None, "reward_components_mean": None,
                "reward_components_per_episode": None}
        base.update(summary_stats([], []))
        base.update(fields)
        return base

    # -- the request ---------------------------------------------------------------
    def submit(self, body: dict, idempotency_key: str | None = None) -> tuple[int, dict]:
        """Run one submit request; a repeated `idempotency_key` with the same body answers the
        first answer again (no charge), with another body 422 (nothing runs). A 503 (the host
        failed inside the submit and refunded it) is not remembered: its retry runs."""
        with self.lock:
            digest = _digest(body)
            if idempotency_key is not None and idempotency_key in self._idem:
                first, answer = self._idem[idempotency_key]
                if first != digest:
                    return 422, {"status": "idempotency_key_reused", "error": {
                        "message": f"Idempotency-Key {idempotency_key!r} was used for another body; "
                                   "use a new key for a new request"}}
                return answer
            answer = self._submit_locked(body)
            if idempotency_key is not None and answer[0] != 503:  # 503: nothing charged, a retry runs it
                if len(self._idem) >= IDEMPOTENCY_KEYS_KEPT:
                    self._idem.pop(next(iter(self._idem)))
                self._idem[idempotency_key] = (digest, answer)
        if answer[0] == 200 and self.state.remaining == 0:
            self.on_exhausted()
        return answer

    def _submit_locked(self, body: dict) -> tuple[int, dict]:
        started, started_at = time.time(), utc_stamp()
        try:
            req = parse_instances(body.get("env_instances"), self.config.n_env_instances)
        except ParseError as exc:
            if self.closed:  # as the reference: a body that does not parse is a 400 even after close
                return 400, {"status": "budget_invalid", "error": {"message": str(exc)}}
            index = self._next_index()
            self._reject(index, "budget_invalid", None, started, started_at, f"budget_invalid: {exc}")
            self.run.event("submit.reject", submit=index, status="budget_invalid", reason=str(exc))
            return 400, {"submit_id": index, "status": "budget_invalid", "error": {"message": str(exc)}}
        if self.closed:
            return 409, {"status": "run_closed", "error": {"message": "run is not open"}}
        refusal = self.refusal(req.count, req.out_of_range)
        if refusal is None:
            assert req.ids is not None, "parse() expands every request of up to EXPAND_LIMIT (65,536) episodes"
            return self._execute(req.ids, started, started_at)
        status, _, msg = refusal
        index = self._next_index()
        summary = self._reject(index, status, req.ids, started, started_at, msg)
        self.run.event("submit.reject", submit=index, status=status, n=req.count)
        return 400, {"submit_id": index, "status": status, "summary": summary, "error": {"message": msg}}

    def submit_ids(self, ids: list[int]) -> tuple[int, dict] | tuple[str, str]:
        """A submit of agent-session/v3 (`evogym.session`): the ids are checked by the caller;
        a refusal is free and leaves no trace (no folder, no index): (v3 error code, message),
        in EvoPolicyGym main's order (`session_refusal`, then `program_invalid`). Otherwise the
        submit's (http status, answer) as `submit` gives it, plus `episodes`: each episode's
        outcome for upstream's feedback (`evogym.feedback_v2.episode_docs`; None when the policy
        never ran)."""
        with self.lock:
            if self.closed:
                return "session_closed", "the run is closed: no further submissions"
            refusal = self.session_refusal(len(ids))
            if refusal is not None:
                return refusal
            problem = program_problem(self.run.system)
            if problem is not None:
                self.run.event("submit.program_invalid", reason=problem)
                return "program_invalid", f"the workspace Policy could not be captured: {problem}"
            answer = self._execute(list(ids), time.time(), utc_stamp(), detail=True)
        if answer[0] == 200 and self.state.remaining == 0:
            self.on_exhausted()
        return answer

    def refusal(self, count: int, out_of_range: bool) -> tuple[str, str, str] | None:
        """Why a v0.1.0 request for `count` episodes is refused before anything runs (Phase 1):
        (verdict, agent-session/v3 error code, message), or None when it may run."""
        c, st = self.config, self.state
        limit = min(c.max_per_submit, st.remaining)
        if out_of_range:
            return "invalid_env_instance", "invalid_request", \
                f"invalid_env_instance: ids must lie in [0, {c.n_env_instances})"
        if not (c.min_per_submit <= count <= limit):
            code = "budget_exhausted" if c.min_per_submit <= count <= c.max_per_submit else "episode_limit"
            return "budget_invalid", code, (f"budget_invalid: {count} episodes requested; allowed {c.min_per_submit}.."
                                            f"{limit} (max per submit {c.max_per_submit}, remaining {st.remaining})")
        if c.max_submissions is not None and st.charged >= c.max_submissions:
            return "budget_invalid", "submission_limit", \
                f"budget_invalid: all {c.max_submissions} submissions of this run are used"
        allocation = self._allocation(count)
        return None if allocation is None else ("budget_invalid", "budget_allocation", f"budget_invalid: {allocation}")

    def session_refusal(self, count: int) -> tuple[str, str] | None:
        """Why a v3 submit of `count` (valid, distinct) ids is refused: (code, message), in
        EvoPolicyGym main's order: submission_limit, episode_limit, budget_exhausted,
        budget_allocation."""
        c, st = self.config, self.state
        if c.max_submissions is not None and st.charged >= c.max_submissions:
            return "submission_limit", f"the submission limit is exhausted (all {c.max_submissions} are used)"
        if not c.min_per_submit <= count <= c.max_per_submit:
            return "episode_limit", (f"{count} episodes; a submission takes {c.min_per_submit} to "
                                     f"{c.max_per_submit} (max_episodes_per_submission)")
        if count > st.remaining:
            return "budget_exhausted", f"insufficient Episode budget: {count} requested, {st.remaining} remain"
        allocation = self._allocation(count)
        return None if allocation is None else ("budget_allocation", allocation)

    def _allocation(self, count: int) -> str | None:
        """Why `count` episodes now would leave a budget the submissions left cannot spend, in a
        run that must spend it all (`allow_early_finish` off), or None."""
        c, st = self.config, self.state
        if c.allow_early_finish or c.max_submissions is None:
            return None
        slots = c.max_submissions - st.charged - 1
        capacity = slots * c.max_per_submit
        if st.remaining - count <= capacity:
            return None
        return (f"{count} episodes leave {st.remaining - count}, more than the {slots} submissions left can "
                f"spend; this submission is too small to exhaust the Episode budget within the remaining "
                f"submission limit; select at least {st.remaining - capacity} Episodes")

    def _reject(self, index, status, instances, started, started_at, message) -> dict:
        """Phase-1 reject (or parse error): free, recorded, numbered like any submit."""
        summary = self._summary(index, status, instances, started, started_at)
        write_tree(self.run.feedback / self.run.submit_name(index), {
            "summary.json": _pretty(summary),
            "errors.txt": (error_line(status, message, utc_stamp()) + "\n").encode()})
        return summary

    def _execute(self, instances: list[int], started: float, started_at: str,
                 detail: bool = False) -> tuple[int, dict]:
        index = self._next_index()
        cost, first = len(instances), self.state.used
        self.state.used += cost
        self.state.charged += 1
        self.run.event("submit.charge", submit=index, cost=cost, remaining=self.state.remaining)
        ckpt = self.run.checkpoints / self.run.submit_name(index)
        tree: PartialTree | None = None
        try:  # from the charge on, any host fault is refunded: making the feedback folder too
            tree = PartialTree(self.run.feedback / self.run.submit_name(index))
            summary, status, timing, outcomes = self._fill_tree(tree, index, ckpt, instances, cost, first, started,
                                                                started_at)
        except Exception as exc:  # noqa: BLE001 - a host fault (disk, sandbox start-up): refunded
            if tree is not None:
                tree.abort()
            return self._refund(index, cost, instances, started, started_at, exc)
        except BaseException:
            if tree is not None:
                tree.abort()
            raise
        self.run.event("submit.finish", durable=False, submit=index, status=status, cost=cost,
                       mean_return=summary["mean_return"], wall=summary["wall_time_seconds"],
                       timing={k: round(v, 6) for k, v in timing.items()})
        return 200, {"submit_id": index, "status": status, "summary": summary,
                     **({"episodes": outcomes} if detail else {})}

    def _refund(self, index, cost, instances, started, started_at, exc: Exception) -> tuple[int, dict]:
        """The host failed inside a charged submit: its feedback says so (`host_interrupted`, as a
        host that died there is recorded on restart) and the episodes go back to the budget, so
        summaries and charges agree at every moment. HTTP 503: the caller may retry."""
        self.state.used -= cost
        self.state.charged -= 1
        reason = f"{type(exc).__name__}: {exc}"[:2000]
        summary = self._summary(index, "host_interrupted", instances, started, started_at)
        try:
            write_tree(self.run.feedback / self.run.submit_name(index), {
                "summary.json": _pretty(summary), "errors.txt": (error_line(
                    "host_interrupted", f"host_interrupted: the host failed during this submit ({reason}); "
                    "it was not charged", utc_stamp()) + "\n").encode()})
        except Exception as again:  # noqa: BLE001 - the same fault (e.g. feedback/ unwritable): refunded all the same
            reason += f"; its feedback folder could not be written either ({type(again).__name__}: {again})"[:1000]
        self.run.event("submit.refund", submit=index, cost=cost, reason=reason, remaining=self.state.remaining)
        return 503, {"submit_id": index, "status": "host_interrupted", "summary": summary,
                     "error": {"message": f"the host failed during this submit and did not charge it: {reason}"}}

    def _fill_tree(self, tree: PartialTree, index, ckpt, instances, cost, first, started, started_at):
        """Run the checkpoint with its episode files written into `tree` as each episode ends
        (by the formatter, meanwhile), then commit the tree with its summary."""
        pending: list[tuple[str, PendingFiles]] = []

        def episode_done(i: int, ep) -> None:
            (tree.tmp / "episodes").mkdir(exist_ok=True)  # only trees with episodes have the folder
            rel = f"episodes/ep_{first + i:0{self.ep_width}d}"
            pending.append((rel, Formatter.submit(ep.data(), tree.tmp / rel)))

        t0 = time.monotonic()
        status, batch, errors = self._run_checkpoint(index, ckpt, instances, cost, episode_done)
        timing = {"rollout_s": time.monotonic() - t0}
        files = {"summary.json": b""}
        fields = {"n_episodes": cost, "env_instances": instances}
        outcomes = None
        if batch is not None and batch.episodes:
            eps = batch.episodes
            outcomes = [{"ret": e.ret, "length": e.length, "category": e.error_category,
                         "invalid": e.recorder is not None and any(step[5] for step in e.recorder.steps)} for e in eps]
            t0 = time.monotonic()
            Formatter.share([made for _, made in pending])
            unwritten = set()
            for i, (rel, made) in enumerate(pending):
                names, ok = _episode_written(made, tree.tmp / rel)
                tree.written([f"{rel}/{name}" for name in names])
                if not ok:
                    unwritten.add(i)
            timing["files_wait_s"] = time.monotonic() - t0
            fields.update(summary_stats([e.ret for e in eps], [e.length for e in eps]))
            fields["first_global_episode"] = first
            fields["errors"] = [i for i, e in enumerate(eps) if e.error_category or i in unwritten]
            fields["timeouts"] = [i for i, e in enumerate(eps) if e.error_category == "act_timeout"]
        if batch is not None:
            timing.update(start_s=batch.start_s, episodes_s=batch.episodes_s)
            timing["snapshot_s"] = timing["rollout_s"] - batch.start_s - batch.episodes_s
        if errors:
            files["errors.txt"] = ("\n".join(errors) + "\n").encode()
        summary = self._summary(index, status, instances, started, started_at, **fields)
        files["summary.json"] = _pretty(summary)
        t0 = time.monotonic()
        tree.commit(files)
        timing["write_s"] = time.monotonic() - t0
        return summary, status, timing, outcomes

    def _run_checkpoint(self, index, ckpt, instances, cost, on_episode) -> tuple[str, BatchResult | None, list[str]]:
        try:
            return self._run_snapshot(index, ckpt, instances, cost, on_episode, self._sandbox_for(ckpt))
        finally:
            if self.spare is not None:  # unless done before the episodes (a no-op then)
                self.spare.refill(ckpt if ckpt.is_dir() else None, self.state.remaining)

    def _sandbox_for(self, ckpt: Path) -> PolicyProcess:
        """The submit's sandbox, bound to the new, still empty checkpoint directory: a spare
        whose staging directory is renamed to it, else one launched on it now (either way
        it comes up while the snapshot is copied and checked; the worker reads nothing of
        the policy before start())."""
        spare = self.spare
        proc = spare.take() if spare is not None else None
        if spare is not None and proc is not None:
            try:
                os.rename(proc.code_dir, ckpt)
                proc.rebind(ckpt)
            except BaseException:
                spare.retire(proc)
                raise
            return proc
        ckpt.mkdir(parents=True)
        proc = PolicyProcess(ckpt, isolation=self.config.isolation, limits=self.config.limits)
        proc.launch()
        return proc

    def _run_snapshot(self, index, ckpt, instances, cost, on_episode,
                      proc: PolicyProcess) -> tuple[str, BatchResult | None, list[str]]:
        release = self.spare.retire if self.spare is not None else PolicyProcess.close
        try:
            digest = snapshot(self.run.system, ckpt)
        except SnapshotError as exc:
            release(proc)
            self.write_metrics(ckpt)
            return "import_error", None, [error_line("import_error", f"import_error: {exc}", utc_stamp())]
        except BaseException:
            release(proc)
            raise
        prestarted = bool(proc.report.get("prestarted"))
        if prestarted and shadowed(ckpt, proc.report["preload_modules"]):
            release(proc)  # a file could shadow a preloaded module: start cold, as before spares
            proc, prestarted = PolicyProcess(ckpt, isolation=self.config.isolation, limits=self.config.limits), False
            proc.launch()
        known, cached = self._static_checks(ckpt, digest)
        self._write_metrics(ckpt, known.measured)
        self.run.event("submit.snapshot", durable=False, submit=index, checkpoint=f"checkpoints/{ckpt.name}",
                       sandbox="prestarted" if prestarted else "cold", **({"static": "cached"} if cached else {}))
        static, denied = known.static, known.denied
        if static is not None or denied:
            release(proc)
        if static is not None:
            category = static.category or "import_error"  # a static failure always names one (snapshot.py)
            return category, None, [error_line(category, f"{category}: {static.message}", utc_stamp(),
                                               static.traceback)]
        if denied:
            return "denied_import", None, [error_line("denied_import", f"denied_import: {', '.join(denied)} "
                                                      "may not be imported by policies", utc_stamp())]
        meta = self.policy_env_meta(index, cost, self.state.remaining)
        job = EpisodeJob(self.config.env, str(ckpt), tuple(self.train[i] for i in instances), meta,
                         self.config.limits, self.config.isolation, record=True, max_steps=self.config.max_steps)
        if self.spare is not None:  # the next submits' sandboxes start while this one's episodes run
            self.spare.refill(ckpt, self.state.remaining)
        batch = run_episodes(job, on_episode, proc, release=release)
        if batch.start_failure is not None:
            fail = batch.start_failure
            verdict, category = start_failure(fail.category)
            return verdict, batch, [error_line(category, f"{category}: {fail.message}",
                                               utc_stamp(), fail.traceback)]
        return rollout_verdict(e.error_category for e in batch.episodes), batch, []

    def _static_checks(self, ckpt: Path, digest: str) -> tuple[_StaticChecks, bool]:
        """The snapshot's static results, and whether they were kept from an identical tree."""
        known = self._static.get(digest)
        if known is not None:
            self._static.move_to_end(digest)
            return known, True
        measured = code_metrics.code_metrics(ckpt)  # first: metrics.json is not in the tree yet
        static = validate_snapshot(ckpt)
        known = _StaticChecks(measured, static, tuple(denied_imports(ckpt)) if static is None else ())
        self._static[digest] = known
        while len(self._static) > STATIC_CACHE:
            self._static.popitem(last=False)
        return known, False

    def write_metrics(self, ckpt: Path) -> None:
        """`metrics.json` (the reference's fields, what its checker recomputes) in the
        checkpoint, our structural metrics beside the checkpoints (`code_metrics/`)."""
        self._write_metrics(ckpt, code_metrics.code_metrics(ckpt))

    def _write_metrics(self, ckpt: Path, measured: dict) -> None:
        # fsynced off the request; finalize waits for it
        atomic_write_json(ckpt / "metrics.json", code_metrics.reference_view(measured), durable_now=False)
        atomic_write_json(self.run.code_metrics / f"{ckpt.name}.json", code_metrics.structure_view(measured),
                          durable_now=False)

    def policy_env_meta(self, index: int, cost: int, remaining_after: int) -> dict:
        meta = public_env_meta(self.spec, self.config)
        out = {"env": self.config.env, "submit_index": index, "n_episodes_this_submit": cost,
               "remaining_budget_after": remaining_after, "max_episode_steps": meta["max_episode_steps"],
               "obs_space": meta["obs_space"], "action_space": meta["action_space"],
               "obs_storage": meta["obs_storage"]}
        if meta.get("reward_components"):
            out["reward_components"] = meta["reward_components"]
        return out


def _episode_written(made: PendingFiles, directory: Path) -> tuple[list[str], bool]:
    """(names of an episode's files once written, whether they are the full set). If they cannot
    be made from what the episode recorded (a host fault on data the policy shaped), a minimal
    set is written instead (`feedback.minimal_episode_files`): the episode keeps its numbered
    folder and one trajectory line per step, and error.txt says what is missing and why."""
    try:
        return made.result(), True
    except Exception as exc:  # noqa: BLE001 - see the docstring
        shutil.rmtree(directory, ignore_errors=True)
        return write_episode(minimal_episode_files(made.data, exc, utc_stamp()), directory), False


def public_env_meta(spec, config: RunConfig) -> dict:
    """`/info.env_meta` of a run: the env's, with the run's step cap override applied."""
    meta = envs.env_meta(spec, n_env_instances=config.n_env_instances)
    if config.max_steps:
        meta["max_episode_steps"] = min(meta["max_episode_steps"], config.max_steps)
    return meta


def _digest(body: dict) -> str:
    """A canonical digest of a request body (key order and spacing do not matter)."""
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _pretty(obj) -> bytes:
    return (json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n").encode()
