"""Episodes: the trusted side steps the environment, the sandboxed policy chooses actions.

`run_episodes(job)` is a plain function of a picklable job so the same code serves a
submit (in the server process) and hidden evaluation (in worker processes). Hidden
seeds live only here and in the host; the policy process receives observations,
public spaces and `env_meta` — never a seed, a pool or a path.

Error semantics (a deliberate deviation from the reference, which turns any episode
error into a failed submit — docs/protocol-deviations.md):
- `reset_error` (policy.reset or env.reset raised): empty trajectory, return 0;
- `act_error` (act raised): that step uses a sampled action, then the episode ends;
- `act_timeout`, `policy_crashed`, `oom`, `protocol_error`: the policy process is gone,
  the episode ends without a step for it, the next episode gets a fresh process;
- `env_error` (the environment itself raised in step): a host-side fault, recorded.
Every episode still yields a return; errors are listed, never hidden.
"""
from __future__ import annotations

import ctypes
import signal
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from gymnasium import spaces as gym_spaces

from evogym import envs, spaces
from evogym.feedback import error_line
from evogym.recording import ACTION_VALUES, EpisodeData, EpisodeRecorder
from evogym.sandbox import CallResult, Limits, PolicyProcess
from evogym.verdicts import EPISODE_CATEGORY, FATAL



def die_with_parent() -> None:
    """Worker-process initializer: SIGKILL this process when its parent dies (Linux prctl)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def utc_stamp() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class EpisodeJob:
    """Everything needed to run a batch of episodes with one Policy instance."""

    slug: str
    code_dir: str
    seeds: tuple[int, ...]
    policy_env_meta: dict
    limits: Limits
    isolation: str
    record: bool = True
    """Keep trajectories and observations (submits) or only returns (hidden evaluation)."""
    max_steps: int | None = None
    """Step cap override (smoke runs); None = the env spec's cap."""
    play_out: bool = False
    """An episode the policy failed (an error, a timeout, a crash, a forged reply) goes on to its
    end with sampled actions, instead of ending where the policy failed (hidden evaluation): where
    rewards are negative, an episode cut short scores better than any controller (Acrobot: 0 for
    a crash at step 0 against about -80 for the best agents), so failing must never pay."""


@dataclass
class EpisodeResult:
    ret: float = 0.0
    length: int = 0
    recorder: EpisodeRecorder | None = None
    """The steps kept for feedback (record=True jobs), else None."""
    stdout: str = ""
    stderr: str = ""
    errors: list = field(default_factory=list)
    """JSON lines of error.txt."""
    error_category: str | None = None
    wall_s: float = 0.0
    stdout_dropped: int = 0
    """stdout bytes the sandbox's output cap dropped (`stdout` is what it kept)."""
    stderr_dropped: int = 0

    def data(self) -> EpisodeData:
        """What the episode's feedback directory is made from."""
        rec = self.recorder
        observations = rec.obs.values() if rec is not None and rec.obs is not None else []
        return EpisodeData(observations, rec.steps if rec is not None else [], self.stdout, self.stderr,
                           self.errors, self.stdout_dropped, self.stderr_dropped)

    def add_output(self, out: tuple[str, int], err: tuple[str, int]) -> None:
        """Append captured (text, dropped bytes) of stdout and stderr."""
        self.stdout, self.stdout_dropped = self.stdout + out[0], self.stdout_dropped + out[1]
        self.stderr, self.stderr_dropped = self.stderr + err[0], self.stderr_dropped + err[1]


@dataclass
class BatchResult:
    """Outcome of a job: one result per seed, or a start failure, with no episodes, except for a
    `play_out` job, whose episodes are then each played out without the policy (`_played_out`)."""

    start_failure: CallResult | None
    episodes: list[EpisodeResult]
    init_stdout: str = ""
    init_stderr: str = ""
    start_s: float = 0.0
    """Wall time of the first sandbox start (bwrap, interpreter, import policy.py, Policy(...))."""
    episodes_s: float = 0.0
    """Wall time of the episodes (restarts after a killed policy included)."""

    @property
    def returns(self) -> list[float]:
        return [e.ret for e in self.episodes]

    @property
    def failures(self) -> int:
        return sum(1 for e in self.episodes if e.error_category)


def _fail(ep: EpisodeResult, category: str, res: CallResult | str) -> None:
    message = res if isinstance(res, str) else (res.message or category)
    tb = None if isinstance(res, str) else res.traceback
    ep.error_category = ep.error_category or category
    ep.errors.append(error_line(category, f"{category}: {message}", utc_stamp(), tb))


class _Session:
    """One Policy instance; restarted (fresh process) after a fatal episode."""

    def __init__(self, job: EpisodeJob, obs_schema: dict, act_schema: dict,
                 launched: PolicyProcess | None = None,
                 release: Callable[[PolicyProcess], None] = PolicyProcess.close) -> None:
        self.job, self.obs_schema, self.act_schema = job, obs_schema, act_schema
        self.proc: PolicyProcess | None = None
        self.start_failure: CallResult | None = None
        self.launched, self.release = launched, release

    def ensure(self) -> PolicyProcess | CallResult:
        """The started policy process, or the failure of its start (the same one until `drop`)."""
        if self.proc is None:
            self.proc, self.launched = self.launched or PolicyProcess(
                Path(self.job.code_dir), isolation=self.job.isolation, limits=self.job.limits), None
            res = self.proc.start(self.obs_schema, self.act_schema, self.job.policy_env_meta)
            if not res.ok:
                self.start_failure = res
                return res
        return self.proc if self.start_failure is None else self.start_failure

    def drop(self, ep: EpisodeResult | None = None) -> None:
        """End the policy process (a fresh one starts for the next episode); `ep` first gets what
        it wrote, so an episode that ends fatally (crash, timeout, forged reply) keeps its output."""
        if ep is not None and self.proc is not None:
            ep.add_output(*self.proc.take_output_counted())
        for proc in (self.proc, self.launched):
            if proc is not None:
                self.release(proc)
        self.proc = self.launched = None
        self.start_failure = None


def _episode(sess: _Session, spec, index: int, seed: int, record: bool) -> EpisodeResult:
    ep = EpisodeResult()
    t0 = time.monotonic()
    proc = sess.ensure()
    if isinstance(proc, CallResult):  # the restart after a fatal episode failed
        _fail(ep, proc.category or "init_error", proc)
        if sess.job.play_out:
            _played_out(spec, seed, sess.job.max_steps or spec.max_steps, ep)
        ep.wall_s = time.monotonic() - t0
        return ep
    env = envs.make_env(spec)
    steps = sess.job.max_steps or spec.max_steps
    try:
        proc.begin_episode(sess.job.limits.episode_wall_s)
        try:
            obs, _ = envs.reset_episode(env, seed)
        except Exception as exc:  # noqa: BLE001 - env fault on reset: reset_error
            _fail(ep, "reset_error", f"environment reset failed: {type(exc).__name__}: {exc}")
            return ep
        res = proc.reset(index)
        if not res.ok:
            category = EPISODE_CATEGORY.get(res.category or "", "reset_error")
            _fail(ep, category, res)
            if res.category in FATAL:
                sess.drop(ep)
            if sess.job.play_out:
                _play_out(env, ep, steps)
            return ep
        if record:
            ep.recorder = EpisodeRecorder(steps, _action_limit(env.action_space))
        _run_steps(sess, proc, env, obs, ep, steps)
    finally:
        env.close()
        if sess.proc is not None:
            ep.add_output(*sess.proc.take_output_counted())
        ep.wall_s = time.monotonic() - t0
    return ep


def _action_limit(space) -> int:
    """Most values a recorded action keeps (`recording.kept_action`): ACTION_VALUES, or the
    action space's size when that is larger."""
    try:
        return max(ACTION_VALUES, int(gym_spaces.flatdim(space)))
    except (ValueError, TypeError, NotImplementedError):  # spaces without a flat size (Text, Graph, ...)
        return ACTION_VALUES


def _run_steps(sess: _Session, proc: PolicyProcess, env, obs, ep: EpisodeResult, steps: int) -> None:
    """The hot loop: one act() round trip and one env step per iteration; recording only
    appends (see `recording`). Returns at the end of the episode or at a failure (after which
    a `play_out` job plays the episode to its end with sampled actions)."""
    space = env.action_space
    coerce = spaces.action_coercer(space)
    act, step, rec = proc.act, env.step, ep.recorder
    ret, length = 0.0, 0
    try:
        for _ in range(steps):
            res = act(obs)
            fallback = False
            if res.ok:
                raw = res.value
                action, invalid = coerce(raw, res.array)
            elif res.category in FATAL:
                _fail(ep, EPISODE_CATEGORY[res.category], res)
                sess.drop(ep)
                break
            else:
                _fail(ep, "act_error", res)
                raw, fallback = space.sample(), True
                action, invalid = raw, False
            try:
                nxt, reward, term, trunc, info = step(action)
            except Exception as exc:  # noqa: BLE001 - env fault on step: env_error
                _fail(ep, "env_error", f"environment step failed: {type(exc).__name__}: {exc}")
                return
            reward = float(reward)
            ret += reward
            length += 1
            if length == steps and not term:
                trunc = True  # the host's step cap ends the episode: say so, as a TimeLimit would
            if rec is not None:
                rec.add(obs, raw, reward, term, trunc, info, invalid)
            obs = nxt
            if term or trunc:
                return
            if fallback:
                break
        else:
            return
    finally:
        ep.ret, ep.length = ret, length
    if sess.job.play_out:
        _play_out(env, ep, steps)


def _played_out(spec, seed: int, steps: int, ep: EpisodeResult) -> None:
    """A whole episode without the policy (it could not start): the env reset for `seed` and
    played to its end with sampled actions. A hidden episode the policy fails scores what the
    env gives without it, whenever the failure comes: a policy that refused to start in hidden
    evaluation once scored 0 (the empty episode's return), better than any Acrobot policy."""
    env = envs.make_env(spec)
    try:
        try:
            envs.reset_episode(env, seed)
        except Exception as exc:  # noqa: BLE001 - env fault on reset, as on the policy's path
            _fail(ep, "reset_error", f"environment reset failed: {type(exc).__name__}: {exc}")
            return
        _play_out(env, ep, steps)
    finally:
        env.close()


def played_out_episodes(job: EpisodeJob, failure: CallResult) -> list[EpisodeResult]:
    """One episode per seed of `job`, each failed with `failure` and played out without the policy."""
    spec = envs.resolve(job.slug)
    out = []
    for seed in job.seeds:
        ep = EpisodeResult()
        t0 = time.monotonic()
        _fail(ep, failure.category or "init_error", failure)
        _played_out(spec, seed, job.max_steps or spec.max_steps, ep)
        ep.wall_s = time.monotonic() - t0
        out.append(ep)
    return out


def _play_out(env, ep: EpisodeResult, steps: int) -> None:
    """Finish an episode the policy failed with sampled actions (the env's seeded action
    space, so it is reproducible), adding their rewards: its return is then what the rest of
    the episode gives without the policy, never the shortcut of stopping early."""
    sample, step = env.action_space.sample, env.step
    for _ in range(steps - ep.length):
        try:
            _, reward, term, trunc, _ = step(sample())
        except Exception as exc:  # noqa: BLE001 - the env's fault, recorded as on the policy's path
            _fail(ep, "env_error", f"environment step failed: {type(exc).__name__}: {exc}")
            return
        ep.ret += float(reward)
        ep.length += 1
        if term or trunc:
            return


def _host_fault(sess: _Session, exc: Exception) -> EpisodeResult:
    """An episode during which the trusted side raised: the policy's `protocol_error` (nothing
    else feeds the host untrusted data), with a fresh process for the next episode."""
    sess.drop()
    ep = EpisodeResult()
    _fail(ep, "protocol_error", f"the host could not run this episode with this policy: "
                                f"{type(exc).__name__}: {exc}"[:2000])
    return ep


def run_episodes(job: EpisodeJob, on_episode: Callable[[int, EpisodeResult], None] | None = None,
                 launched: PolicyProcess | None = None, *,
                 release: Callable[[PolicyProcess], None] = PolicyProcess.close) -> BatchResult:
    """Run `job.seeds` in order with one Policy instance (`reset(i)` for local index i).

    `on_episode(i, episode)` is called as each episode ends (the judge hands its
    recording to the formatter there, so formatting overlaps the next episode).
    `launched`: a `PolicyProcess` for `job.code_dir` already launched or prepared (not
    started) by the caller; this function owns it. `release(proc)` ends each policy
    process (the judge's spare keeper reaps off the request's path); every process is
    released before this returns."""
    spec = envs.resolve(job.slug)
    meta = envs.env_meta(spec, n_env_instances=0)
    sess = _Session(job, meta["obs_space"], meta["action_space"], launched, release)
    try:
        t0 = time.monotonic()
        started = sess.ensure()
        start_s = time.monotonic() - t0
        init_out, init_err = sess.proc.take_output_counted() if sess.proc is not None else (("", 0), ("", 0))
        if isinstance(started, CallResult):  # import or __init__ failed: no episode of the policy runs
            # hidden evaluation (play_out): each episode is what the env gives without the policy
            played = played_out_episodes(job, started) if job.play_out else []
            return BatchResult(started, played, init_out[0], init_err[0], start_s=start_s,
                               episodes_s=time.monotonic() - t0 - start_s)
        episodes = []
        for i, seed in enumerate(job.seeds):
            try:
                ep = _episode(sess, spec, i, seed, job.record)
            except Exception as exc:  # noqa: BLE001 - whatever the policy made the host raise is its verdict
                ep = _host_fault(sess, exc)
            if i == 0:
                ep.stdout, ep.stdout_dropped = init_out[0] + ep.stdout, init_out[1] + ep.stdout_dropped
                ep.stderr, ep.stderr_dropped = init_err[0] + ep.stderr, init_err[1] + ep.stderr_dropped
            episodes.append(ep)
            if on_episode is not None:
                on_episode(i, ep)
        return BatchResult(None, episodes, init_out[0], init_err[0], start_s=start_s,
                           episodes_s=time.monotonic() - t0 - start_s)
    finally:
        sess.drop()
