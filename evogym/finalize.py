"""Finalization: validate every `ok` checkpoint, select, score on held-out, write run.json.

Runs off the request thread (the server starts it in a background thread) and spreads
hidden evaluation over worker processes. Checkpoints whose code trees are identical
(same `tree_hash`) share one evaluation: identical code on identical seeds gives the
same returns, so no extra episodes are spent. For that to hold exactly, the `env_meta`
seen in hidden evaluation is the same for identical trees (the group's first submit).
A host given an evaluation cache (`evogym serve --eval-cache DIR`, `evogym.evalcache`)
shares the same way across runs: a batch with identical inputs (tree, env_meta, seeds,
limits, code and package versions) is read instead of run.

Selection: highest validation mean; ties go to fewer failed episodes, then to the
latest submit (the reference drops any candidate with a failed episode instead —
docs/protocol-deviations.md).
"""
from __future__ import annotations

import json
import re
import os
import shutil
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import numpy as np

from evogym import PROTOCOL_VERSION, anchors, evalcache
from evogym.durable import SUMMARY_MAX_BYTES, read_regular
from evogym.feedback import atomic_write_json, flush_syncs
from evogym.mpcontext import forkserver
from evogym.code_metrics import edit_kind
from evogym.rollout import BatchResult, EpisodeJob, die_with_parent, played_out_episodes, run_episodes, utc_stamp
from evogym.sandbox import CallResult, PolicyProcess
from evogym.sandbox.spare import shadowed
from evogym.workers import evaluation_workers

PACKAGES = ("gymnasium", "mujoco", "box2d", "minigrid", "highway-env", "gymnasium-robotics", "numpy",
            "pygame-ce")
MAX_JOBS = 8


@dataclass(frozen=True)
class Checkpoint:
    """A submitted checkpoint that may be evaluated on the hidden pool: its submit index, code tree
    hash and episode cost."""

    index: int
    tree_hash: str
    cost: int


def _jobs(requested: int) -> int:
    return max(1, requested or min(os.cpu_count() or 1, MAX_JOBS))


def _evaluate(jobs: list[EpisodeJob], workers: int) -> list[BatchResult]:
    """One result per job, in order. A job that raises (whatever a policy made the trusted side
    do) is that candidate's failure, never the run's: the other candidates are still scored.
    Jobs run in this process when one worker (or one job) suffices; else on workers forked by the
    warm template this host came from (`evogym.workers`), or a forkserver pool for a host started on
    its own (its workers import the simulators afresh: seconds per run)."""
    if workers <= 1 or len(jobs) <= 1:
        return [_contained(j) for j in jobs]
    warm = evaluation_workers(min(workers, len(jobs)))
    if warm is not None:
        with warm:
            return warm.run(jobs, local=_contained, failed=_failed)
    ctx = forkserver()
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=ctx,
                             initializer=die_with_parent) as pool:
        futures = [pool.submit(run_episodes, j) for j in jobs]
        results = []
        for job, future in zip(jobs, futures):
            try:
                results.append(future.result())
            except BrokenProcessPool:  # a worker died (killed from outside): run this job here instead
                results.append(_contained(job))
            except Exception as exc:  # noqa: BLE001 - see the docstring
                results.append(_failed(exc))
        return results


def _contained(job: EpisodeJob, launched: PolicyProcess | None = None,
               release: Callable[[PolicyProcess], None] = PolicyProcess.close) -> BatchResult:
    try:
        return run_episodes(job, launched=launched, release=release)
    except Exception as exc:  # noqa: BLE001 - see _evaluate
        return _failed(exc)


def _evaluate_here(jobs: list[EpisodeJob], launched: PolicyProcess | None,
                   release: Callable[[PolicyProcess], None]) -> list[BatchResult]:
    """The held-out job(s), in this process; the first starts in `launched` when given."""
    return [_contained(j, launched if i == 0 else None, release if i == 0 else PolicyProcess.close)
            for i, j in enumerate(jobs)]


def heldout_sandbox(host, ckpt: Path) -> PolicyProcess | None:
    """The held-out evaluation's sandbox, started ahead: the spare the host kept when no submit
    could come (`Judge.keep_spares`), with a copy of the selected checkpoint in its
    staging directory (bound read-only at `/policy`: the tree the policy reads is the
    checkpoint's, byte for byte). None (the job starts cold, as before) when the host keeps
    no spare, the spare failed, or a file of the checkpoint could shadow a module the spare
    preloaded. Everything a cold start guarantees holds (`evogym.sandbox.spare`): one fresh
    process, nothing of the policy read before start(), no seed; a restart after a fatal
    episode launches cold on the checkpoint itself (`job.code_dir`)."""
    spare = getattr(host.judge, "spare", None)
    proc = spare.take() if spare is not None else None
    if spare is None or proc is None:
        return None
    try:
        if proc.report.get("prestarted") and shadowed(ckpt, proc.report["preload_modules"]):
            spare.retire(proc)
            return None
        shutil.copytree(ckpt, proc.code_dir, symlinks=True, dirs_exist_ok=True)
    except BaseException:
        spare.retire(proc)
        raise
    return proc


def _failed(exc: BaseException) -> BatchResult:
    """A candidate whose evaluation raised: a failed start (no score), recorded with the reason."""
    return BatchResult(CallResult(ok=False, category="protocol_error",
                                  message=f"hidden evaluation failed: {type(exc).__name__}: {exc}"[:2000]), [])


def candidates(run, charged: bool = False) -> list[Checkpoint]:
    """The ok submits with their checkpoints, in order; `charged`: every submit that ran
    (counted episodes), failed ones too (those an agent may name at a v3 finish, as upstream)."""
    out = []
    for summary in _submit_rows(run):
        if summary.get("status") == "ok" or charged and summary.get("n_episodes"):
            name = run.submit_name(summary["submit_index"])
            try:
                metrics = json.loads((run.checkpoints / name / "metrics.json").read_text())
                out.append(Checkpoint(summary["submit_index"], str(metrics["tree_hash"]), int(summary["n_episodes"])))
            except (OSError, ValueError, KeyError, TypeError) as exc:
                run.event("finalize.skipped", folder=name, reason=f"checkpoint metrics: {type(exc).__name__}: {exc}"[:500])
    return out


def select(scores: dict[int, tuple[float, int]], named: tuple[int, ...] | None = None) -> int:
    """argmax of (mean, -failures, index): ties to fewer failures, then to the latest submit,
    or, among candidates the agent named, to the one it named first (agent-session/v3)."""
    rank = {i: -named.index(i) for i in named} if named else {i: i for i in scores}
    return max(scores, key=lambda i: (scores[i][0], -scores[i][1], rank[i]))


def shortlist(cands: list[Checkpoint], named: tuple[int, ...] | None, limit: int | None) -> list[Checkpoint]:
    """The candidates hidden validation compares: those the agent named (in its order), else the
    latest `limit` ok submits, else every ok submit."""
    if named:
        by_index = {c.index: c for c in cands}
        return [by_index[i] for i in named if i in by_index]
    return cands[-limit:] if limit is not None else cands


def _mean(batch: BatchResult, played_out: bool = False) -> float | None:
    """The validation mean, None when the candidate is dropped: when its policy could not start,
    unless `played_out` (a candidate the agent named: scored, as upstream scores a failed one,
    by its episodes played out without the policy, each counted as failed)."""
    if not batch.episodes or batch.start_failure is not None and not played_out:
        return None
    return float(np.mean(batch.returns))


def finalize(host, progress: Callable[[str], None] = lambda s: None) -> dict:
    """Score the run; returns the run.json document (also written to disk)."""
    run, config = host.run, host.config
    flush_syncs()  # every feedback file is on disk before the run is scored
    named = host.named_candidates
    cands = shortlist(candidates(run, charged=bool(named)), named, config.max_candidates)
    groups: dict[str, list[Checkpoint]] = {}
    for c in cands:
        groups.setdefault(c.tree_hash, []).append(c)
    workers = _jobs(config.finalize_jobs)
    firsts = [g[0] for g in groups.values()]
    progress(f"validation: {len(cands)} ok checkpoints, {len(firsts)} distinct programs")
    cache = getattr(host, "eval_cache", None)
    jobs = [host.hidden_job(c, host.pools.valid) for c in firsts]
    batches, sources = evalcache.evaluate(jobs, lambda todo: _evaluate(todo, workers), cache)
    results = dict(zip((c.tree_hash for c in firsts), batches))
    for c, source in zip(firsts, sources):
        run.event("eval.run", kind="valid", snap=c.index, shared_with=[x.index for x in groups[c.tree_hash][1:]],
                  **({"cache": source} if cache is not None else {}))
    scores: dict[int, tuple[float, int]] = {}
    val_failures: dict[str, int] = {}
    for c in cands:
        batch = results[c.tree_hash]
        mean = _mean(batch, played_out=bool(named))
        if mean is not None:
            scores[c.index] = (mean, batch.failures)
            val_failures[str(c.index)] = batch.failures
        run.event("eval.record", kind="valid", snap=c.index, mean_return=mean)
    doc = _base_doc(host)
    doc["candidate_submission_ids"] = [run.submit_name(c.index) for c in cands]
    compared = [{"index": c.index, "digest": c.tree_hash, "score": scores[c.index][0], "episodes": len(host.pools.valid),
                 "policy_failures": scores[c.index][1]} for c in cands if c.index in scores]
    if not scores:
        doc["outcome"] = _outcome("no_ok_submit", final_score=0.0)
        _aux(doc, host, None, None)
        atomic_write_json(run.run_json, doc)
        _record(host, doc, compared, None)
        return doc
    best = select(scores, named)
    best_cand = next(c for c in cands if c.index == best)
    progress(f"held-out: submit {best} on {len(host.pools.heldout)} episodes")
    first = groups[best_cand.tree_hash][0]
    job = host.hidden_job(first, host.pools.heldout)
    spare = getattr(host.judge, "spare", None)
    launched = heldout_sandbox(host, Path(job.code_dir))
    release = spare.retire if spare is not None and launched is not None else PolicyProcess.close
    try:
        (held,), (source,) = evalcache.evaluate([job], lambda todo: _evaluate_here(todo, launched, release), cache)
    finally:
        if spare is not None and launched is not None:
            spare.retire(launched)  # idempotent; the sandbox a cache hit left unused
    if cache is not None:
        run.event("eval.run", kind="final", snap=best, cache=source)
    if not held.episodes:  # the evaluation itself failed (`_failed`): every held-out episode goes without the policy
        held = BatchResult(held.start_failure, played_out_episodes(job, held.start_failure or CallResult(
            ok=False, category="protocol_error", message="held-out evaluation ran no episode")))
    returns = held.returns  # a start failure's episodes are played out without the policy (rollout._played_out)
    mean = float(np.mean(returns)) if returns else None
    run.event("eval.record", kind="final", snap=best, mean_return=mean,
              sandbox="prestarted" if launched is not None and source != "hit" else "cold")
    _mirror(run, best)
    doc["final_submission_id"] = run.submit_name(best)
    final = mean if mean is not None else 0.0
    doc["outcome"] = _outcome(
        "completed", final_score=final, best_submit_index=best,
        val_scores={str(i): s[0] for i, s in scores.items()}, val_failures=val_failures,
        heldout_mean_return=mean, heldout_returns=returns,
        heldout_std_return=float(np.std(returns)) if returns else None,
        heldout_failures=held.failures if held.episodes else len(host.pools.heldout),
        normalized_score=anchors.normalized(config.env, final))
    _aux(doc, host, best, scores[best][0])
    atomic_write_json(run.run_json, doc)
    _record(host, doc, compared, {"index": best, "digest": best_cand.tree_hash, "score": final,
                                  "episodes": len(returns), "policy_failures": doc["outcome"]["heldout_failures"]})
    return doc


def _record(host, doc: dict, compared: list[dict], assessment: dict | None) -> None:
    """EvoPolicyGym main's run record beside run.json (`evogym.run_record`): a projection of
    the decisions above; a failure to write it is recorded and leaves the run scored."""
    from evogym import run_record
    try:
        run_record.write(host, doc, compared, assessment)
    except Exception as exc:  # noqa: BLE001 - see the docstring
        host.run.event("record.error", error=f"{type(exc).__name__}: {exc}"[:2000])


def _outcome(status: str, **fields) -> dict:
    out: dict[str, Any] = {"status": status, "final_score": None, "normalized_score": None, "best_submit_index": None,
           "val_scores": None, "val_failures": None, "heldout_mean_return": None, "heldout_returns": None,
           "heldout_std_return": None, "heldout_failures": None, "error": None, "auxiliary": {}}
    out.update(fields)
    return out


def error_doc(host, message: str) -> dict:
    doc = _base_doc(host)
    doc["outcome"] = _outcome("error", error={"type": "error", "message": message})
    atomic_write_json(host.run.run_json, doc)
    return doc


def _versions() -> dict:
    out: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _base_doc(host) -> dict:
    config, run = host.config, host.run
    return {
        "schema_version": "0.1", "protocol_version": PROTOCOL_VERSION, "env": config.env,
        "exp_id": run.root.name, "model": config.model, "profile": config.profile,
        "experiment_dimensions": {"episode_budget": config.budget, "min_episodes_per_submit": config.min_per_submit,
                                  "max_episodes_per_submit": config.max_per_submit, "valid_size": config.valid_size,
                                  "heldout_size": config.heldout_size, "pool_seed": config.pool_seed},
        "isolation": host.isolation_report(),
        "timing": {"start_time": host.started_at, "end_time": utc_stamp(),
                   "wall_time_seconds": round(host.elapsed(), 3)},
        "versions": {"agents_md_hash": host.agents_md_hash,
                     **{k: v if v.startswith("sha256:") else f"sha256:{v}" for k, v in host.pools.hashes.items()},
                     "packages": _versions(),
                     "evogym": __import__("evogym").__version__},
        "artifacts": {"checkpoints": "checkpoints/", "feedback": "workspace/feedback/", "events": "events.jsonl",
                      "logs": "logs/", "workspace": "workspace/"},
        "config": run_record_config(config),
        "candidate_submission_ids": None, "final_submission_id": None,
    }


def run_record_config(config) -> dict:
    """The run's settings under EvoPolicyGym main's `run-record/v8` config names, where they
    mean something here (shared/reference/evopolicygym-v3-notes.md): the training split is
    `train`, validation `valid`, assessment (held-out) `heldout`; feedback is never evicted
    (`bulk_feedback_retention_bytes` null); `max_submissions` is the budget when unset (at
    least one episode per submission)."""
    return {
        "split": "train", "seed": config.pool_seed,
        "max_submissions": config.max_submissions if config.max_submissions is not None else config.budget,
        "episode_budget": config.budget, "episode_pool_size": config.n_env_instances,
        "max_episodes_per_submission": config.max_per_submit, "finish_budget_policy": config.finish_budget_policy,
        "bulk_feedback_retention_bytes": None, "episode_timeout_seconds": config.limits.episode_wall_s,
        "agent_timeout_seconds": config.agent_timeout_s,
        "validation": {"split": "valid", "episodes_per_candidate": config.valid_size,
                       "max_candidates": config.max_candidates},
        "assessment": {"split": "heldout", "episodes": config.heldout_size},
    }


def _mirror(run, best: int) -> None:
    """Replace workspace/system with the selected checkpoint (minus host files), atomically.

    A convenience copy for whoever opens the workspace afterwards, never part of the score: the
    workspace is the agent's, so whatever it left at the names used here (a file, a link, a
    folder) is removed first, and a mirror that still fails is recorded (`workspace.mirror.error`)
    and leaves the run scored."""
    try:
        src = run.checkpoints / run.submit_name(best)
        tmp = run.workspace / ".system.final"
        _remove(tmp)
        shutil.copytree(src, tmp, symlinks=True, ignore=shutil.ignore_patterns("metrics.json", "_meta.json"))
        old = run.workspace / ".system.old"
        _remove(old)
        if os.path.lexists(run.system):
            os.rename(run.system, old)
        os.rename(tmp, run.system)
        _remove(old)
    except OSError as exc:
        run.event("workspace.mirror.error", snap=best, error=f"{type(exc).__name__}: {exc}"[:2000])
        return
    run.event("workspace.mirror", snap=best)


def _remove(path: Path) -> None:
    """Remove whatever is at `path` (a folder's tree, or a file or link itself); nothing there is fine."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


SUBMIT_FOLDER = re.compile(r"submit_[0-9]+")


def _submit_rows(run) -> list[dict]:
    """The summaries of the submits, in order. feedback/ is in the agent's workspace: anything else
    there (a folder of its own notes named submit_000_notes, a summary it broke) is skipped with
    a `finalize.skipped` event, never a finalization that fails and leaves the run unscored."""
    rows = []
    for fb in sorted(run.feedback.glob("submit_*")):
        if not SUBMIT_FOLDER.fullmatch(fb.name):
            continue  # not a submit's folder: the host names them submit_NNN
        try:
            summary = json.loads(read_regular(fb / "summary.json", SUMMARY_MAX_BYTES))
            if not isinstance(summary, dict) or run.submit_name(summary.get("submit_index")) != fb.name:
                raise ValueError("not the summary of this submit")
        except (OSError, ValueError, TypeError, RecursionError) as exc:  # a FIFO, a link, 4 GiB: skipped unread
            run.event("finalize.skipped", folder=fb.name, reason=f"{type(exc).__name__}: {exc}"[:500])
            continue
        rows.append(summary)
    return rows


TREND_FIELDS = ("source_lines", "python_files", "functions", "classes", "cyclomatic_total", "cyclomatic_max",
                "tree_hash")
"""The per-checkpoint series of `code_metrics_trend`, the reference's (its checker compares each)."""


def _checkpoint_metrics(run) -> tuple[dict[int, dict], dict[int, dict]]:
    """(metrics.json, our structural metrics) of every checkpoint directory, by submit index:
    the set the reference checker walks (every checkpoint, charged or refunded)."""
    reference, structure = {}, {}
    for ckpt in sorted(run.checkpoints.glob("submit_*")):
        if not (ckpt.is_dir() and ckpt.name[7:].isdigit() and (ckpt / "metrics.json").is_file()):
            continue
        index = int(ckpt.name[7:])
        reference[index] = json.loads((ckpt / "metrics.json").read_text())
        extra = run.code_metrics / f"{ckpt.name}.json"
        if extra.is_file():
            structure[index] = json.loads(extra.read_text())
    return reference, structure


def _aux(doc: dict, host, best: int | None, best_val: float | None) -> None:
    run, config = host.run, host.config
    rows = _submit_rows(run)
    charged = [r for r in rows if r["n_episodes"]]
    ok = [r for r in charged if r["status"] == "ok"]
    reference, structure = _checkpoint_metrics(run)
    submits = sorted(reference)
    trend = {"submits": submits, **{key: [reference[i].get(key) for i in submits] for key in TREND_FIELDS}}
    kinds, prev = {}, None
    for i in sorted(structure):
        kinds[str(i)] = edit_kind(prev, structure[i])
        prev = structure[i]
    aux = {"code_metrics_by_submit": {str(i): reference[i] for i in submits}, "code_metrics_trend": trend,
           "code_metrics_best": reference.get(best) if best is not None else None,
           "code_structure_by_submit": {str(i): structure[i] for i in sorted(structure)}, "edit_kinds": kinds,
           "n_submits": host.judge.state.n_submits, "n_charged_submits": len(charged),
           "n_successful_submits": len(ok), "episodes_used": host.judge.state.used,
           "mean_episodes_per_submit": float(np.mean([r["n_episodes"] for r in charged])) if charged else None,
           "mean_submit_wall_time": float(np.mean([r["wall_time_seconds"] for r in charged])) if charged else None}
    aux.update(_curve_metrics(config, charged, doc["outcome"].get("heldout_mean_return"), best_val))
    doc["outcome"]["auxiliary"] = aux


def _curve_metrics(config, charged: list[dict], heldout: float | None, best_val: float | None) -> dict:
    in_loop = [r["mean_return"] for r in charged if r["status"] == "ok" and r["mean_return"] is not None]
    best_in_loop = max(in_loop) if in_loop else None
    out = {"held_out_gap": (best_in_loop - heldout) if best_in_loop is not None and heldout is not None else None,
           "val_heldout_gap": (best_val - heldout) if best_val is not None and heldout is not None else None,
           "auc_in_loop": None, "episodes_to_50pct": None, "episodes_to_80pct": None}
    anc = anchors.anchors(config.env)
    if anc is None or not charged:
        return out
    span = anc.expert_baseline - anc.random_baseline
    xs, ys, cum = [0.0], [0.0], 0
    for r in charged:
        cum += r["n_episodes"]
        if r["status"] == "ok" and r["mean_return"] is not None:
            norm = min(max((r["mean_return"] - anc.random_baseline) / span, 0.0), 1.2)
            xs.append(float(cum))
            ys.append(norm)
            for key, level in (("episodes_to_50pct", 0.5), ("episodes_to_80pct", 0.8)):
                if out[key] is None and norm >= level:
                    out[key] = cum
    out["auc_in_loop"] = float(np.trapezoid(ys, xs) / config.budget * 100) if len(xs) > 1 else 0.0
    return out
