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
