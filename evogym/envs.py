"""Environment ids, the Core16 specs and the generic `gymnasium/<id>` adapter.

Id grammar (parsed only here, by `resolve`):
- `gym/<name>`: one of the eight curated Core16 slugs (`gym/acrobot`, …);
- `gymnasium/<id>`: any id in Gymnasium's registry once MiniGrid, highway-env and
  Gymnasium-Robotics have registered theirs; `gymnasium/<module>:<id>` (Gymnasium's own
  syntax) imports `module` first, so a benchmark author's env registers itself. The eight Core16 `gymnasium/…` slugs get
  their pinned spec; any other id gets a generic spec.
Bare ids such as `Acrobot-v1` are rejected with a suggestion (`gym/acrobot`), so every
run records one canonical name.

Step caps. v0.1.0 reported the registry's `max_episode_steps` for `gymnasium/…` slugs,
or 1000 when unset, and its roller cut episodes there with no truncation flag. We
deliberately use the env's own internal limit when the registry has none and it can
be discovered (MiniGrid `unwrapped.max_steps`; highway-env `duration ×
policy_frequency`), else 1000. Effect on Core16: the cap an agent is told now matches
when episodes really end (KeyCorridor 480, FourRooms 100, ObstructedMaze 720, parking
500, roundabout 11, where v0.1.0 said 1000), and DoorKey-16x16 runs to its real
2560-step limit with the env's own `truncated` flag instead of being cut at 1000
without one. Returns can differ from the paper only for DoorKey episodes longer than
1000 steps, where the paper's policy got reward 0 by construction.
"""
from __future__ import annotations

import difflib
import functools
import io
import sys
import threading
import warnings
from typing import Any, Literal, TextIO

import gymnasium as gym
from pydantic import BaseModel, ConfigDict

from evogym.errors import EnvNotFound
from evogym.spaces import space_schema, to_jsonable

ENV_VERSION = "0.1"
"""`env_meta.env_version` reported for every env (v0.1.0 value)."""

DEFAULT_MAX_STEPS = 1000
"""Step cap when neither the registry nor the env itself declares a limit (v0.1.0 fallback)."""

DEFAULT_N_ENV_INSTANCES = 1024
"""Visible train case ids reported in `env_meta` (the paper's train pool size)."""

REWARD_COMPONENTS = {"return": "sum of Gymnasium rewards over the episode"}

SEED_MODULUS = 2**32
"""`env.reset(seed=S mod 2**32)`: NumPy seeds must fit in 32 bits."""

Family = Literal["curated", "generic", "minigrid", "highway", "robotics"]


class EnvSpec(BaseModel):
    """How to build one environment and how long its episodes may run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    slug: str
    """Canonical env name, e.g. `gym/acrobot` or `gymnasium/FetchPush-v4`."""
    gym_id: str
    """Gymnasium registry id passed to `gymnasium.make`."""
    kwargs: dict[str, Any] = {}
    """Keyword arguments for `gymnasium.make` (Core16: the upstream registration's own)."""
    max_steps: int
    """Step cap of one episode, also reported as `env_meta.max_episode_steps`."""
    family: Family
    """v0.1.0 task-text family: curated doc, generic, or the MiniGrid/highway/robotics template."""
    title: str
    """Human title used as the brief's heading."""


def _spec(slug: str, gym_id: str, max_steps: int, family: Family, title: str, **kwargs: Any) -> EnvSpec:
    return EnvSpec(slug=slug, gym_id=gym_id, kwargs=kwargs, max_steps=max_steps, family=family, title=title)


_CORE16_SPECS: tuple[EnvSpec, ...] = (
    _spec("gym/acrobot", "Acrobot-v1", 500, "curated", "Acrobot"),
    _spec("gym/continuouscar", "MountainCarContinuous-v0", 999, "curated", "Mountain Car (continuous)"),
    _spec("gym/bipedal", "BipedalWalker-v3", 1600, "generic", "Bipedal Walker"),
    _spec("gym/racing", "CarRacing-v3", 1000, "curated", "Car Racing"),
    _spec("gym/halfcheetah5", "HalfCheetah-v5", 1000, "generic", "Half Cheetah"),
    _spec("gym/ant5", "Ant-v5", 1000, "generic", "Ant"),
    _spec("gym/pusher5", "Pusher-v5", 100, "generic", "Pusher"),
    _spec("gym/reacher5", "Reacher-v5", 50, "generic", "Reacher"),
    _spec("gymnasium/MiniGrid-DoorKey-16x16-v0", "MiniGrid-DoorKey-16x16-v0", 2560, "minigrid",
          "MiniGrid DoorKey 16x16", size=16),
    _spec("gymnasium/MiniGrid-KeyCorridorS4R3-v0", "MiniGrid-KeyCorridorS4R3-v0", 480, "minigrid",
          "MiniGrid KeyCorridor S4R3", room_size=4, num_rows=3),
    _spec("gymnasium/MiniGrid-FourRooms-v0", "MiniGrid-FourRooms-v0", 100, "minigrid", "MiniGrid FourRooms"),
    _spec("gymnasium/MiniGrid-ObstructedMaze-1Q-v1", "MiniGrid-ObstructedMaze-1Q-v1", 720, "minigrid",
          "MiniGrid ObstructedMaze 1Q", agent_room=(1, 1), key_in_box=True, blocked=True,
          num_quarters=1, num_rooms_visited=5),
    _spec("gymnasium/parking-v0", "parking-v0", 500, "highway", "Highway parking"),
    _spec("gymnasium/roundabout-v0", "roundabout-v0", 11, "highway", "Highway roundabout"),
    _spec("gymnasium/FetchPush-v4", "FetchPush-v4", 50, "robotics", "Fetch Push", reward_type="sparse"),
    _spec("gymnasium/FetchPickAndPlace-v4", "FetchPickAndPlace-v4", 50, "robotics", "Fetch Pick and Place",
          reward_type="sparse"),
)

CORE16: tuple[str, ...] = tuple(s.slug for s in _CORE16_SPECS)
"""The sixteen paper envs, in the order of the paper's tables."""

_BY_SLUG = {s.slug: s for s in _CORE16_SPECS}
_FAMILY_PACKAGES = {"minigrid": "minigrid", "highway": "highway_env", "robotics": "gymnasium_robotics"}


# ---------------------------------------------------------------- registration


IMPORT_LOCK = threading.RLock()
"""Held while anything may import an env module (registration, `gym.make`, loading an
entry point). Two threads importing submodules of one package at once can deadlock in
Python's per-module import locks, which Python breaks by handing one of them a partially
initialized module (`evogym suite smoke` lost 2 of 16 envs to it once); construction is
milliseconds, so serializing it costs nothing measurable."""


ROBOTICS_NOTICE = "environment's reward functions were updated"
"""Part of the notice Gymnasium-Robotics prints to stderr at import (AdroitHand reward versions)."""


class _WithoutNotice(io.TextIOBase):
    """sys.stderr while an env package is imported: everything goes to the real stream except
    Gymnasium-Robotics' import notice (it concerns no env used here). Not a swallowing buffer:
    the swap is process-wide, and another thread's output meanwhile (a traceback, faulthandler
    registering on the stream's fd) must still reach the real stderr."""

    def __init__(self, real: TextIO) -> None:
        super().__init__()
        self.real, self.dropped = real, False

    def write(self, text: str) -> int:
        if ROBOTICS_NOTICE in text:
            self.dropped = True
        elif not (self.dropped and text == "\n"):  # print()'s line end after the notice
            self.dropped = False
            self.real.write(text)
        return len(text)

    def flush(self) -> None:
        self.real.flush()

    def fileno(self) -> int:
        return self.real.fileno()


@functools.cache
def _register(package: str) -> None:
    """Import an env package so its ids register (call under IMPORT_LOCK), without
    Gymnasium-Robotics' import notice (`_WithoutNotice`)."""
    real = sys.stderr
    filtered = sys.stderr = _WithoutNotice(real)
    try:
        module = __import__(package)
    finally:
        if sys.stderr is filtered:  # unless someone swapped it meanwhile: theirs stays
            sys.stderr = real
    if package != "minigrid":
        gym.register_envs(module)


def _register_all() -> None:
    with IMPORT_LOCK:
        for package in _FAMILY_PACKAGES.values():
            _register(package)


def _family_of(gym_id: str) -> Family:
    entry = str(gym.spec(gym_id).entry_point)
    for family, package in _FAMILY_PACKAGES.items():
        if entry.startswith(package):
            return family  # type: ignore[return-value]
    return "generic"


# ---------------------------------------------------------------- resolution


def resolve(slug: str) -> EnvSpec:
    """Return the spec for an env name, or raise `EnvNotFound` with close names."""
    if slug in _BY_SLUG:
        return _BY_SLUG[slug]
    prefix, _, gym_id = slug.partition("/")
    if prefix == "gymnasium" and gym_id:
        _register_all()
        module, _, bare = gym_id.partition(":")
        if bare and _import_registering(module):
            if bare in gym.registry:  # registered by the import; every process resolves the slug, so imports it
                return _generic_spec(slug, bare)
        elif gym_id in gym.registry:
            return _generic_spec(slug, gym_id)
    raise EnvNotFound(
        f"unknown env `{slug}`: expected `gym/<curated name>` or `gymnasium/<registered Gymnasium id>`",
        suggestions=_suggestions(slug),
    )


def _import_registering(module: str) -> bool:
    """Import the module of a `gymnasium/<module>:<id>` slug (Gymnasium's own `module:id`
    syntax: importing the module registers the id), under IMPORT_LOCK; False when it cannot
    be imported. The operator names the module on the command line: it is trusted code, as
    every simulator is."""
    if not all(part.isidentifier() for part in module.split(".")):
        return False
    with IMPORT_LOCK:
        try:
            __import__(module)
        except ImportError:
            return False
    return True


@functools.cache
def _generic_spec(slug: str, gym_id: str) -> EnvSpec:
    family = _family_of(gym_id)
    return EnvSpec(slug=slug, gym_id=gym_id, kwargs={}, max_steps=_discover_max_steps(gym_id),
                   family=family, title=gym_id)


def _discover_max_steps(gym_id: str) -> int:
    """The step limit of a registered id: the registry's, else what the built env declares
    (`max_steps`; highway's duration x policy frequency), read again after one seeded reset
    when it declares none yet (BabyAI levels set theirs at reset: 0 before), else
    DEFAULT_MAX_STEPS. The env is built even when the registry names a limit: an id registered
    by a package whose dependencies are missing here (mujoco_py, jax) is refused now, with one
    clear line, never at the run's first episode."""
    try:
        env = _make(gym_id, {})
    except Exception as exc:  # noqa: BLE001 - any construction failure means "not usable here"
        raise EnvNotFound(
            f"`gymnasium/{gym_id}` is registered but cannot be built here: {type(exc).__name__}: {exc}",
            hint="install the package that provides it, or pick another env",
        ) from exc
    try:
        registered = gym.spec(gym_id).max_episode_steps
        if registered:
            return int(registered)
        declared = _declared_limit(env.unwrapped)
        if declared is None:
            try:
                env.reset(seed=0)
            except Exception:  # noqa: BLE001 - a reset that fails is the run's env_error, not the lookup's
                pass
            else:
                declared = _declared_limit(env.unwrapped)
        return declared or DEFAULT_MAX_STEPS
    finally:
        env.close()


def _declared_limit(inner: object) -> int | None:
    """A positive step limit the unwrapped env states, or None."""
    max_steps = getattr(inner, "max_steps", None)
    if isinstance(max_steps, int) and not isinstance(max_steps, bool) and max_steps > 0:
        return max_steps
    config = getattr(inner, "config", None)
    if isinstance(config, dict) and "duration" in config and "policy_frequency" in config:
        limit = int(config["duration"] * config["policy_frequency"])
        return limit if limit > 0 else None
    return None


FEEDBACK_HOOK = "evogym_feedback"
"""The attribute an env class may define to write its own agent-facing feedback (EvoPolicyGym
main's `Benchmark.feedback`): `evogym_feedback(episodes) -> {"score", "content", "artifacts"}`,
`episodes` the public outcome of each episode (`evogym.feedback_v2`). Runs in the host."""


@functools.cache
def feedback_hook(slug: str) -> Any:
    """The env class's `evogym_feedback` (`FEEDBACK_HOOK`), or None (the host's default feedback)."""
    spec = resolve(slug)
    with IMPORT_LOCK:
        entry = gym.spec(spec.gym_id).entry_point
        creator = gym.envs.registration.load_env_creator(entry) if isinstance(entry, str) else entry
    hook = getattr(creator, FEEDBACK_HOOK, None)
    return hook if callable(hook) else None


def core16_equivalent(slug: str) -> str | None:
    """The Core16 slug whose env this one is exactly (same Gymnasium id, make kwargs and step
    cap: `gymnasium/Acrobot-v1` is `gym/acrobot`), else None. Pools do not depend on the name,
    so such a run's held-out episodes are the Core16 env's, and so are its anchors."""
    if slug in _BY_SLUG:
        return slug
    try:
        spec = resolve(slug)
    except EnvNotFound:
        return None
    for core in _CORE16_SPECS:
        if (core.gym_id, core.kwargs, core.max_steps) == (spec.gym_id, spec.kwargs, spec.max_steps):
            return core.slug
    return None


def _suggestions(slug: str) -> list[str]:
    """Close canonical names: Core16 slugs and `gymnasium/<id>`, matched case-insensitively
    on the full name and on the bare id (so `Acrobot-v1` suggests `gym/acrobot`)."""
    _register_all()
    canonical: dict[str, str] = {s.lower(): s for s in CORE16}
    for gym_id in gym.registry:
        canonical.setdefault(f"gymnasium/{gym_id}".lower(), f"gymnasium/{gym_id}")
    aliases = dict(canonical)
    for spec in _CORE16_SPECS:
        aliases[spec.gym_id.lower()] = spec.slug
        aliases[spec.slug.split("/", 1)[1].lower()] = spec.slug
    for gym_id in gym.registry:
        aliases.setdefault(gym_id.lower(), f"gymnasium/{gym_id}")
    query = slug.lower()
    bare = query.split("/", 1)[-1]
    hits = difflib.get_close_matches(query, aliases, n=3, cutoff=0.6)
    hits += difflib.get_close_matches(bare, aliases, n=3, cutoff=0.6)
    out: list[str] = []
    for hit in hits:
        if aliases[hit] not in out:
            out.append(aliases[hit])
    return out[:3]


# ---------------------------------------------------------------- construction


def _make(gym_id: str, kwargs: dict[str, Any]) -> gym.Env:
    """`gymnasium.make` with no render mode and no wrappers beyond the registry's. The
    registry's deprecation notice for `roundabout-v0` (v1 exists) is silenced: the paper
    suite pins v0 on purpose."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return gym.make(gym_id, **kwargs)


def make_env(spec: EnvSpec) -> gym.Env:
    """A fresh env for one episode (v0.1.0 builds a new env per episode); thread-safe."""
    package = _FAMILY_PACKAGES.get(spec.family)
    with IMPORT_LOCK:
        if package:
            _register(package)
        if spec.slug not in _WARMED:
            _warm(spec)
        return _make(spec.gym_id, dict(spec.kwargs))


_WARMED: set[str] = set()


def _warm(spec: EnvSpec) -> None:
    """Once per env and process, under IMPORT_LOCK: build a throwaway env, reset it and take
    one step, so the modules an env imports lazily (CarRacing imports `pygame.surfarray` on
    its first reset) are imported here, not by several threads at once. An env that fails
    here fails again, with its own error, for the caller."""
    try:
        env = _make(spec.gym_id, dict(spec.kwargs))
        try:
            env.reset(seed=0)
            env.step(env.action_space.sample())
        finally:
            env.close()
    except Exception:  # noqa: BLE001 - the caller's own make/reset/step reports it
        return
    _WARMED.add(spec.slug)


def reset_episode(env: gym.Env, seed: int) -> tuple[Any, dict]:
    """Reset for the case seed `seed`: `reset(seed=seed mod 2**32)`, action space seeded
    with `seed+1` (drives the fallback `sample()`), observation space with `seed+2`."""
    obs, info = env.reset(seed=seed % SEED_MODULUS)
    env.action_space.seed(seed + 1)
    env.observation_space.seed(seed + 2)
    return obs, info


def step_info(info: dict) -> dict:
    """The env's `info` dict, every key kept, made JSON-safe."""
    return to_jsonable(dict(info))


# ---------------------------------------------------------------- /info


@functools.cache
def _schemas(slug: str) -> tuple[dict, dict]:
    """(obs_space, action_space) schemas; cached because some envs are slow to build."""
    env = make_env(resolve(slug))
    try:
        return space_schema(env.observation_space), space_schema(env.action_space)
    finally:
        env.close()


@functools.cache
def _storage(slug: str) -> str:
    """Where the feedback writer puts a max-length episode's observations (issue 13: /info must
    say what the writer does, e.g. `external` for Acrobot, whose 500 x 6 floats exceed 4 KiB).
    Decided on fixed-seed samples of the observation space, never on a task instance."""
    from evogym.feedback import storage
    spec = resolve(slug)
    env = make_env(spec)
    try:
        env.observation_space.seed(0)
        return storage([env.observation_space.sample() for _ in range(max(1, spec.max_steps))])
    finally:
        env.close()


def spaces_of(spec: EnvSpec) -> tuple[dict, dict]:
    """The compact `(obs_space, action_space)` schemas of an env (cached per slug)."""
    obs, act = _schemas(spec.slug)
    return to_jsonable(obs), to_jsonable(act)


def env_meta(spec: EnvSpec, n_env_instances: int = DEFAULT_N_ENV_INSTANCES) -> dict:
    """The `/info.env_meta` object (§1.2); `artifacts` only for external observations."""
    obs_space, action_space = spaces_of(spec)
    storage = _storage(spec.slug)
    meta = {
        "action_space": action_space,
        "env": spec.slug,
        "env_version": ENV_VERSION,
        "max_episode_steps": spec.max_steps,
        "n_env_instances": int(n_env_instances),
        "obs_space": obs_space,
        "obs_storage": storage,
        "reward_components": dict(REWARD_COMPONENTS),
    }
    if storage == "external":
        meta["artifacts"] = {"observations": True, "video": False}
    return meta
