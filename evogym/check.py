"""`evogym check [SYSTEM_DIR]`: the checks a submit would apply, without spending budget.

The same steps, in the same order, as the judge's first phases (`evogym.judge`): the
snapshot rules (regular files only, size caps), every `.py` parses and `policy.py`
defines `class Policy` (`validate_snapshot`), no denied import, then the policy is
started in the sandbox with the env's public spaces and `env_meta`, reset, and asked to
act on one observation. The observation is a fixed-seed sample of the observation space,
never a reset of a task instance, so no seed of any pool is involved. The action is
coerced exactly as an episode would coerce it; an action the host would replace by its
fallback is reported.
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from evogym import envs, spaces
from evogym.errors import ConfigError
from evogym.sandbox.isolation import DEFAULT_ISOLATION

SAMPLE_SEED = 12345
"""Seed of the observation-space sample (public: it is not a task instance)."""


@dataclass
class CheckResult:
    """What `check` found; `ok` when a submit would reach its episodes."""

    ok: bool
    env: str
    steps: list[tuple[str, str, str]] = field(default_factory=list)
    """(step, "ok" | category, detail) in order; the first failure ends the list."""

    def to_json(self) -> dict:
        return {"ok": self.ok, "env": self.env,
                "steps": [{"step": s, "result": r, "detail": d} for s, r, d in self.steps]}


def check_policy(system_dir: Path, env: str, *, isolation: str = DEFAULT_ISOLATION, limits=None) -> CheckResult:
    """Run the submit-time checks on `system_dir` for `env` (an `EnvSpec` slug)."""
    from evogym.judge import SnapshotError, denied_imports, snapshot
    from evogym.sandbox import Limits, PolicyProcess, validate_snapshot
    if not system_dir.is_dir():
        raise ConfigError(f"{system_dir} is not a directory", hint="pass the folder holding policy.py, e.g. system/")
    spec = envs.resolve(env)
    result = CheckResult(ok=False, env=spec.slug)
    with tempfile.TemporaryDirectory(prefix="evogym-check-") as tmp:
        code = Path(tmp) / "snapshot"
        try:
            snapshot(system_dir, code)
        except SnapshotError as exc:
            result.steps.append(("snapshot", "import_error", str(exc)))
            return result
        result.steps.append(("snapshot", "ok", f"{sum(1 for p in code.rglob('*') if p.is_file())} files"))
        static = validate_snapshot(code)
        if static is not None:
            result.steps.append(("parse and class Policy", static.category or "import_error", static.message))
            return result
        result.steps.append(("parse and class Policy", "ok", "policy.py defines class Policy"))
        denied = denied_imports(code)
        if denied:
            result.steps.append(("imports", "denied_import", f"{', '.join(denied)} may not be imported by policies"))
            return result
        result.steps.append(("imports", "ok", "no denied import"))
        _sandbox_steps(result, code, spec, isolation, limits or Limits(), PolicyProcess)
    result.ok = all(r == "ok" for _, r, _ in result.steps)
    return result


def _sandbox_steps(result: CheckResult, code: Path, spec, isolation: str, limits, process_cls) -> None:
    obs_schema, act_schema = envs.spaces_of(spec)
    meta = envs.env_meta(spec)
    env = envs.make_env(spec)
    try:
        env.observation_space.seed(SAMPLE_SEED)
        sample = env.observation_space.sample()
        action_space = env.action_space
    finally:
        env.close()
    with process_cls(code, isolation=isolation, limits=limits) as proc:
        for step, call in (("start: import + Policy(...)", lambda: proc.start(obs_schema, act_schema, meta)),
                           ("reset(0)", lambda: proc.reset(0)),
                           ("act(sample observation)", lambda: proc.act(spaces.to_jsonable(sample)))):
            res = call()
            if not res.ok:
                detail = res.message + (f"\n{res.traceback}" if res.traceback else "")
                result.steps.append((step, res.category or "error", detail.strip()))
                return
            result.steps.append((step, "ok", ""))
        raw = spaces.to_jsonable(res.value) if res.array else res.value  # a multi-dim array reply
        _, invalid = spaces.coerce_action(action_space, raw)
        result.steps.append(("action fits the action space", "invalid_action" if invalid else "ok",
                             f"returned {str(raw)[:120]}"))
