"""Synthetic, verified-looking traces for detector, proposer and driver tests."""
from __future__ import annotations

from ole.trace import Iteration, Outcome, RunCondition, TaskContract, TaskSpec, Trace

CONTRACT = TaskContract(objective="maximize held-out return", permitted_actions=("submit", "finish"),
                        metrics=("held-out mean return",), evidence_sources=("run.json",),
                        verification="hidden held-out pool", resource_budget={"episodes": 64.0})


def make_trace(tid: str, means, *, verdicts=None, kinds=None, final=None, best_submit=None,
               charged: int = 4, env: str = "gym/acrobot", verified: bool = True, pool_seed: int = 0,
               seed: int = 0, normalized=None, status: str = "completed") -> Trace:
    """A trace whose submits have the given train means (None = failed submit)."""
    verdicts = verdicts or ["ok" if m is not None else "act_error" for m in means]
    kinds = kinds or ["synthesis" if i == 0 else "tuning" for i in range(len(means))]
    history = tuple(
        Iteration(index=i, phase="tuning", observation_digest="0" * 64, edit_kind=kinds[i], submit_id=i,
                  verdict=verdicts[i], mean_return=m, episodes_charged=charged)
        for i, m in enumerate(means))
    ok = [m for m in means if m is not None]
    final = final if final is not None else (max(ok) if ok else None)
    if best_submit is None and ok:
        best_submit = max(range(len(means)), key=lambda i: means[i] if means[i] is not None else -1e18)
    outcome = Outcome(status=status, final_score=final, normalized_score=normalized, best_val_score=final,
                      best_submit_index=best_submit, episodes_used=charged * len(means), n_submits=len(means),
                      wall_time_s=1.0)
    return Trace(trace_id=tid, created_at="2026-01-01T00:00:00Z", task=TaskSpec(env=env, pool_seed=pool_seed),
                 condition=RunCondition(host="builtin", seed=seed), contract=CONTRACT, bundle_name="default",
                 bundle_version=1, bundle_hash="h1", history=history, outcome=outcome, run_dir="runs/x",
                 run_json_sha256="sha256:0", verified=verified)


def fake_quality(job) -> float | None:
    """A deterministic stand-in for a run's normalized score, driven by two policy fields.

    More retest episodes help (+15%); reading no worst episodes hurts (-40%); a policy with
    `max_retries == 10` crashes the run (None). Small per-instance noise keeps pairs distinct.
    """
    import hashlib

    policy = job.bundle.loop_policy
    if policy.recovery.max_retries == 10:
        return None
    digest = hashlib.sha256(f"{job.task.env}|{job.task.pool_seed}|{job.condition.seed}".encode()).digest()
    base = 40.0 + digest[0] / 255 * 20.0
    noise = (digest[1] / 255 - 0.5) * 0.02 * base
    effect = 1.0 + 0.15 * (policy.verification.retest_episodes > 4) - 0.4 * (policy.observation.worst_k_episodes == 0)
    return base * effect + noise


def fake_evaluate(job) -> Trace:
    """EvalJob -> Trace without a host (tests of pairing, executors and drivers)."""
    from evogym.anchors import anchors
    q = fake_quality(job)
    found = anchors(job.task.env)
    raw = q if q is None or found is None else \
        found.random_baseline + q / 100.0 * (found.expert_baseline - found.random_baseline)
    budget = job.task.budget or 16
    outcome = Outcome(status="completed" if q is not None else "error", final_score=raw, normalized_score=q,
                      best_val_score=q, best_submit_index=0 if q is not None else None,
                      episodes_used=budget, n_submits=4, wall_time_s=1.0)
    history = tuple(Iteration(index=i, phase="tuning", observation_digest="0" * 64,
                              edit_kind="synthesis" if i == 0 else "tuning", submit_id=i, verdict="ok",
                              mean_return=(q or 0.0) * (0.7 + 0.1 * i), episodes_charged=budget // 4)
                    for i in range(4))
    tid = f"fake-{job.bundle_hash[:8]}-{job.task.env.replace('/', '_')}-p{job.task.pool_seed}-s{job.condition.seed}"
    name, _, version = job.bundle_ref.partition("@")
    return Trace(trace_id=tid, created_at="2026-01-01T00:00:00Z", task=job.task, condition=job.condition,
                 contract=CONTRACT, bundle_name=name, bundle_version=int(version or 1),
                 bundle_hash=job.bundle_hash, history=history, outcome=outcome, run_dir="runs/fake",
                 run_json_sha256="sha256:0", verified=q is not None)


archive_fake = fake_evaluate
"""The driver archives verified traces itself (`PairedEvaluation`); kept under its old name."""


def _marker(job, suffix: str):
    from pathlib import Path
    name = f"{job.bundle_hash[:8]}-{job.task.env.replace('/', '_')}-p{job.task.pool_seed}-s{job.condition.seed}"
    return Path(job.runs_root) / f"{name}.{suffix}"


def die_once_evaluate(job) -> Trace:
    """fake_evaluate, but the first attempt at an odd pool seed kills its own worker process (kill -9)."""
    import os
    import signal
    marker = _marker(job, "died")
    if job.task.pool_seed % 2 and not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return fake_evaluate(job)


def slow_logged_evaluate(job) -> Trace:
    """fake_evaluate after 1 s, logging each call (store key) to runs_root/calls.log."""
    import time
    from pathlib import Path

    from ole.paired import eval_key
    Path(job.runs_root).mkdir(parents=True, exist_ok=True)
    with open(Path(job.runs_root) / "calls.log", "a") as f:
        f.write(eval_key(job.bundle_hash, job.task, job.condition) + "\n")
    time.sleep(1.0)
    return fake_evaluate(job)


def paced_evaluate(job) -> Trace:
    """fake_evaluate taking 0.1 s, like a (very) short run: concurrent rounds would overlap in time."""
    import time
    time.sleep(0.1)
    return fake_evaluate(job)


class RetestProposer:
    """A proposer whose every mutation sets `verification.retest_episodes` to 8 (the fake evaluators'
    +15 % on every env), plus a neutral `memory.top_k_programs` move: the search always finds a gain
    to gate, and ablation always has a side effect to drop."""

    name = "retest"

    def mutate(self, parent, evidence, *, edge, generation, seed):
        from ole.proposers import accepted, child_bundle
        policy = parent.bundle.loop_policy.model_dump(mode="json")
        policy["verification"]["retest_episodes"] = 8
        policy["memory"]["top_k_programs"] = 4 + seed % 3
        return accepted(self.name, edge, [parent], child_bundle([parent], policy, edge=edge, evidence_ids=(),
                                                                generation=generation, proposer=self.name,
                                                                note="retest 8"))

    def recombine(self, a, b, evidence, *, generation, seed):
        return self.mutate(a, evidence, edge="offline_mutation", generation=generation, seed=seed)

    def observe(self, ref, bundle, summary, *, rung, final):
        pass


def no_minigrid_effect_evaluate(job) -> Trace:
    """fake_evaluate where more retests do nothing on MiniGrid envs (both sides score alike: ties)."""
    from types import SimpleNamespace
    policy = job.bundle.loop_policy
    if not job.task.env.startswith("gymnasium/MiniGrid") or policy.verification.retest_episodes <= 4:
        return fake_evaluate(job)
    trace = fake_evaluate(job)
    plain = job.bundle.model_copy(update={"loop_policy": policy.model_copy(
        update={"verification": policy.verification.model_copy(update={"retest_episodes": 4})})})
    q = fake_quality(SimpleNamespace(bundle=plain, task=job.task, condition=job.condition))
    ref = fake_evaluate(SimpleNamespace(bundle=plain, bundle_hash=job.bundle_hash, bundle_ref=job.bundle_ref,
                                        task=job.task, condition=job.condition))
    assert ref.outcome.normalized_score == q
    return trace.model_copy(update={"outcome": ref.outcome})


def one_env_gain_evaluate(job) -> Trace:
    """fake_evaluate where more retests help on MiniGrid envs only (+15 %) and cost 10 % elsewhere."""
    from evogym.anchors import anchors
    trace = fake_evaluate(job)
    o = trace.outcome
    if o.normalized_score is None or job.bundle.loop_policy.verification.retest_episodes <= 4:
        return trace
    q = o.normalized_score * (1.15 if job.task.env.startswith("gymnasium/MiniGrid") else 0.9) / 1.15
    found = anchors(job.task.env)
    raw = q if found is None else found.random_baseline + q / 100.0 * (found.expert_baseline - found.random_baseline)
    return trace.model_copy(update={"outcome": o.model_copy(
        update={"normalized_score": q, "best_val_score": q, "final_score": raw})})
