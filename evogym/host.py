"""The trusted host of one run: pools, budget, judge, finalization state, `/info` and `/task`.

The HTTP layer (`evogym.server`) only translates requests into calls on `Host`; the
host never depends on HTTP, so the same object serves tests and other transports.
"""
from __future__ import annotations

import hashlib
import threading
import time
from dataclasses import asdict
from pathlib import Path

from evogym import PROTOCOL_VERSION, briefs, envs, pools, sandbox
from evogym.errors import ConfigError, SandboxUnavailable
from evogym.evalcache import EvalCache
from evogym.sandbox.isolation import DEFAULT_ISOLATION, ISOLATIONS
from evogym.finalize import Checkpoint, candidates as candidates_of, error_doc, finalize
from evogym.judge import DENIED_IMPORTS, Judge, public_env_meta
from evogym.program import seed_workspace
from evogym.recording import Formatter
from evogym.run_record import keep_initial
from evogym.rollout import EpisodeJob, utc_stamp
from evogym.rundir import RunConfig, RunDir, agents_md_text


def make_config(env: str, profile: str = "quick", *, budget: int | None = None, pool_seed: int = 0,
                isolation: str = DEFAULT_ISOLATION, limits: sandbox.Limits | None = None, finalize_jobs: int = 0,
                max_per_submit: int | None = None, allow_early_finish: bool = True,
                max_steps: int | None = None, data_dir: str | None = None, model: str = "unknown",
                agent_timeout_s: float | None = None, max_submissions: int | None = None,
                max_candidates: int | None = None, pool_size: int | None = None) -> RunConfig:
    """A RunConfig from a profile name plus overrides; validates everything up front."""
    prof = pools.profile(profile)
    spec = envs.resolve(env)
    if isolation not in ISOLATIONS:
        raise ConfigError(f"unknown isolation {isolation!r}",
                          hint=f"use one of {', '.join(ISOLATIONS)} (default {DEFAULT_ISOLATION})")
    budget = prof.budget if budget is None else budget
    if budget < 1:
        raise ConfigError(f"budget must be >= 1, got {budget}")
    maximum = min(max_per_submit or prof.max_per_submit or budget, budget)
    submissions = max_submissions if max_submissions is not None else prof.max_submissions
    if submissions is not None and submissions < 1:
        raise ConfigError(f"max submissions must be >= 1, got {submissions}")
    pool = prof.pool if pool_size is None else pool_size
    if not 1 <= pool <= pools.TRAIN_SIZE:
        raise ConfigError(f"episode pool size must lie in 1..{pools.TRAIN_SIZE} (the train pool), got {pool}")
    must_spend = prof.require_budget_exhaustion or not allow_early_finish
    if submissions is not None and must_spend and budget > submissions * min(maximum, pool):
        # EvoPolicyGym main refuses such a configuration up front: every submit would be refused
        # (budget_allocation) and finish never succeed (budget_remaining)
        why = f"profile {prof.name}" if prof.require_budget_exhaustion else "--no-early-finish"
        raise ConfigError(f"the whole budget must be spent ({why}): that needs a budget that can be exhausted within "
                          f"max_submissions, but {submissions} submissions of at most {min(maximum, pool)} episodes "
                          f"cannot spend {budget}", hint="raise --max-submissions or --max-per-submit, or lower --budget")
    candidates = max_candidates if max_candidates is not None else prof.max_candidates
    if candidates is not None and not 1 <= candidates <= (submissions or budget):
        raise ConfigError(f"max candidates must lie in 1..{submissions or budget} (max submissions), got {candidates}")
    return RunConfig(env=spec.slug, profile=prof.name, budget=budget, min_per_submit=prof.min_per_submit,
                     max_per_submit=maximum, n_env_instances=pool, valid_size=prof.valid,
                     heldout_size=prof.heldout_for(spec.family), pool_seed=pool_seed, isolation=isolation,
                     limits=limits or sandbox.Limits(act_wall_s=prof.act_wall_s), finalize_jobs=finalize_jobs,
                     allow_early_finish=allow_early_finish and not prof.require_budget_exhaustion,
                     max_steps=max_steps, data_dir=str(Path(data_dir).resolve()) if data_dir else None, model=model,
                     max_submissions=submissions, max_candidates=candidates,
                     agent_timeout_s=agent_timeout_s)


class Host:
    """One run: owns the hidden pools and everything that touches them."""

    def __init__(self, run_dir, config: RunConfig, *, prestart: bool = True, auto_finalize: bool = True,
                 eval_cache: str | Path | None = None, program: Path | None = None) -> None:
        """`prestart`: keep sandboxes started ahead for the next submits (`evogym.sandbox.spare`);
        False starts every sandbox when its submit arrives (the old path, for benchmarks).
        `auto_finalize`: finalize as soon as the budget is spent (v0.1.0); False keeps the run
        open until `finish` (agent-session/v3, where the agent names its candidates then).
        `eval_cache`: a folder of hidden-evaluation results shared with other runs
        (`evogym.evalcache`; trusted-side, never shown to the agent); None shares nothing.
        `program`: the starting program copied into an empty `system/` (`evogym.program`)."""
        if config.isolation == "bwrap":
            report = sandbox.probe_isolation()
            if not report.get("bwrap") or not report.get("userns"):
                raise SandboxUnavailable("bubblewrap sandbox unavailable: " + ", ".join(
                    f"{k}={v}" for k, v in report.items() if k in ("bwrap", "userns")),
                    hint="install bubblewrap (apt-get install bubblewrap) or pass --isolation none explicitly")
        self.config = config
        self.eval_cache = EvalCache(eval_cache) if eval_cache else None
        self.spec = envs.resolve(config.env)
        self.pools = pools.pools_for(self.spec.slug, config.profile, pool_seed=config.pool_seed,
                                    data_dir=Path(config.data_dir) if config.data_dir else None,
                                    heldout=config.heldout_size)
        self.run = RunDir(run_dir)
        self.run.create(config)
        if seed_workspace(self.run.system, program, baseline=False) is not None:
            keep_initial(self.run.root, self.run.system)
        self.agent_outcome: dict | None = None
        """How the agent `evogym run` launched ended (`returncode`, `timed_out`, `budget_spent`),
        set before the run closes; None when the host does not run the agent (`evogym serve`)."""
        self.started_at, self._t0 = utc_stamp(), time.monotonic()
        self.agents_md_hash = "sha256:" + hashlib.sha256(agents_md_text().encode()).hexdigest()
        self.auto_finalize = auto_finalize
        self.judge = Judge(self.run, config, self.pools.train, on_exhausted=self._exhausted, prestart=prestart)
        self.finalization: dict[str, str | None] = {"status": "pending"}
        self.named_candidates: tuple[int, ...] | None = None
        """The candidates the agent named when it finished (agent-session/v3), in its order."""
        self.done = threading.Event()
        self._final_lock = threading.Lock()
        self.run.event("run.open", env=config.env, profile=config.profile, budget=config.budget,
                       isolation=config.isolation)
        Formatter.prewarm()  # the episode-file helper starts while the agent reads /task
        self.warm = threading.Event()
        """Set once `info()` is a few dictionary reads (its env facts computed and cached: the
        first call samples observations, 0.2-0.5 s); the HTTP layer answers on its event loop
        from then on (`evogym.server`)."""
        threading.Thread(target=self._warm_up, name="info-warm-up", daemon=True).start()

    def _warm_up(self) -> None:
        try:
            self.info()
        finally:
            self.warm.set()

    def _exhausted(self) -> None:
        if self.auto_finalize:
            self.start_finalize("budget")
        else:
            self.judge.keep_spares(0)  # no submit can come: free the spares now (the keeper stays for finalize)

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def isolation_report(self) -> dict:
        if self.config.isolation == "none":
            return {"level": "none", "note": "policy runs in a plain subprocess: NOT a sandbox"}
        return {"level": "bwrap", **sandbox.probe_isolation()}

    # -- protocol ----------------------------------------------------------------
    def info(self) -> dict:
        c, st = self.config, self.judge.state
        limits = asdict(c.limits)
        return {
            "allowed_imports": [], "denied_imports": list(DENIED_IMPORTS),
            "env_meta": public_env_meta(self.spec, c),
            "episode_budget": c.budget, "max_episodes_per_submit": c.max_per_submit,
            "min_episodes_per_submit": c.min_per_submit, "protocol_version": PROTOCOL_VERSION,
            "resource_limits": {"memory_bytes": limits["memory_bytes"], "rollout_wall_s": limits["episode_wall_s"],
                                "act_wall_s": limits["act_wall_s"],
                                "init_wall_s": limits["init_wall_s"], "max_pids": limits["max_pids"],
                                "file_bytes": limits["file_bytes"], "output_bytes": limits["output_bytes"],
                                "importable_packages": ["stdlib", *sandbox.POLICY_PACKAGES]},
            "isolation": self.isolation_report()["level"],
            "state": {"is_finalized": self.judge.closed, "n_submits": st.n_submits,
                      "remaining_budget": st.remaining, "finalization": self.finalization["status"],
                      "early_finish_allowed": c.allow_early_finish},
        }

    def task(self) -> str:
        return briefs.brief(self.spec).rstrip() + "\n\n" + contract_text(self.info())

    def finish(self, candidates: tuple[int, ...] | None = None) -> tuple[int, dict]:
        """End the run now and finalize it; `candidates`: the ok submits hidden validation
        compares, in the agent's order of preference (checked by `candidate_refusal`), else
        the profile's rule (`RunConfig.max_candidates`)."""
        remaining = self.judge.state.remaining
        if not self.config.allow_early_finish and remaining > 0:  # EvoPolicyGym main's words
            units = "1 Episode budget unit remains" if remaining == 1 else f"{remaining} Episode budget units remain"
            return 409, {"status": "budget_remaining", "error": {
                "message": f"finish is not available: {units}. Continue evaluating or confirming candidate "
                           "Programs, then retry finish."}}
        with self.judge.lock:
            if not self.judge.closed and self.judge.state.n_submits == 0 and self.judge.state.used == 0:
                self.run.event("run.finish_without_submits")
        if not self.start_finalize("finish", candidates):  # closed before (or meanwhile): its candidates stand
            return 200, {"status": "finalizing" if not self.done.is_set() else "finalized"}
        return 200, {"status": "finalizing", "remaining_budget": self.judge.state.remaining}

    def closed_by(self, payload: dict) -> bool:
        """Whether a 200 answer of `finish` is the call that closed the run (its candidates are
        the ones validated), not a repeat after another close."""
        return "remaining_budget" in payload

    def candidate_refusal(self, candidates: tuple[int, ...]) -> tuple[str, str] | None:
        """Why these submit indices cannot be the run's candidates: (agent-session/v3 error
        code, message), or None. They must be distinct published submits (charged; failed
        ones too, as upstream), at most `max_candidates`."""
        limit = self.config.max_candidates
        if not candidates:
            return "invalid_request", "name at least one submission"
        if limit is not None and len(candidates) > limit:
            return "candidate_limit", f"{len(candidates)} candidates named; this run validates at most {limit}"
        if len(set(candidates)) != len(candidates):
            return "duplicate_submission", "each candidate may be named once"
        published = {c.index for c in candidates_of(self.run, charged=True)}
        unknown = [i for i in candidates if i not in published]
        if unknown:
            names = ", ".join(self.run.submit_name(i) for i in sorted(published)) or "none"
            return "unknown_submission", (f"{self.run.submit_name(unknown[0])} is not a published submission of this "
                                          f"run; published: {names}")
        return None

    # -- finalization ------------------------------------------------------------
    def start_finalize(self, reason: str, candidates: tuple[int, ...] | None = None) -> bool:
        """Close the run and start its finalization; False (nothing done) when it was closed already."""
        with self._final_lock:
            with self.judge.lock:
                if self.judge.closed:
                    return False
                self.judge.closed = True
            self.named_candidates = candidates
            self.finalization = {"status": "running", "reason": reason}
            self.run.event("run.close.start", reason=reason, candidates=list(candidates) if candidates else None)
            threading.Thread(target=self._finalize, name="finalize", daemon=True).start()
            return True

    def close(self) -> None:
        """Release what the host holds between requests (the spare sandboxes); idempotent."""
        self.judge.close_spare()

    def _finalize(self) -> None:
        self.judge.keep_spares(1)  # no submit will come: one spare for the held-out, the rest freed
        try:
            doc = finalize(self, progress=lambda line: self.run.event("finalize.progress", message=line))
            self.finalization = {"status": "done", "reason": self.finalization.get("reason")}
            self.run.event("run.close", status=doc["outcome"]["status"])
        except Exception as exc:  # noqa: BLE001 - a host fault: recorded, never unscored
            self.finalization = {"status": "error", "message": f"{type(exc).__name__}: {exc}"}
            self.run.event("run.close.error", error=f"{type(exc).__name__}: {exc}")
            error_doc(self, f"finalization failed: {type(exc).__name__}: {exc}")
        finally:
            self.judge.close_spare()
            self.done.set()

    def hidden_job(self, cand: Checkpoint, seeds: list[int]) -> EpisodeJob:
        ckpt = self.run.checkpoints / self.run.submit_name(cand.index)
        meta = self.judge.policy_env_meta(cand.index, cand.cost, 0)
        return EpisodeJob(self.config.env, str(ckpt), tuple(seeds), meta, self.config.limits,
                          self.config.isolation, record=False, max_steps=self.config.max_steps, play_out=True)



def contract_text(info: dict) -> str:
    """The generated contract appended to every brief (same facts as AGENTS.md, with this run's numbers)."""
    import json
    meta = info["env_meta"]
    return "\n".join([
        "## Policy Contract",
        "`system/policy.py` defines a top-level `class Policy(obs_space: dict, action_space: dict, env_meta: dict)` "
        "with `reset(episode_index)` and `act(obs)`. `__init__` runs once per submit, `reset` before each episode, "
        "and `act` returns one action matching the action space.",
        "",
        "## Policy Input And Output",
        f"- env: `{meta['env']}` (version {meta['env_version']})",
        f"- visible train episode ids: `0` through `{meta['n_env_instances'] - 1}`",
        f"- max episode steps: {meta['max_episode_steps']}",
        f"- observation storage: {meta['obs_storage']}",
        f"- reward components: {json.dumps(meta.get('reward_components', {}), sort_keys=True)}",
        f"- importable in the sandbox: {', '.join(info['resource_limits']['importable_packages'])}",
        "", "obs_space:", "```json", json.dumps(meta["obs_space"], indent=2, sort_keys=True), "```",
        "", "action_space:", "```json", json.dumps(meta["action_space"], indent=2, sort_keys=True), "```",
        "",
        "## Submit Notes",
        f"Submit between {info['min_episodes_per_submit']} and {info['max_episodes_per_submit']} visible train "
        f"episode ids per accepted request; the whole budget is {info['episode_budget']} episodes. Bodies: "
        '`{"env_instances": [0, 1, 2, 3]}` or `{"env_instances": "0-3"}`. Read `feedback/submit_NNN/summary.json` '
        "and the episode files after each submit. `POST /finish` ends the run early; never call `/finalize`.",
        "",
    ])
