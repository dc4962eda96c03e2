"""Task features the host knows for any env at lookup: what a scope may name besides env ids.

A release scope may name a *region* of tasks by their features instead of listing env ids
(`ole.bundle.Applicability`): the family (`evogym.envs.Family`), the kind of the observation
and of the action space, the action dimension and the horizon (the episode step limit). Each is
read from the env's spaces and step cap, the same facts `/info.env_meta` reports, so a host,
an agent inside any harness (from `/info`) and the registry see the same features for the same
env, Core16 or any registered Gymnasium id.

* **kinds** (`SpaceKind`): `box` (a vector or array of floats/ints), `image` (a uint8
  height x width [x channels] array, `evogym.spaces`), `discrete`, `multidiscrete`,
  `multibinary`, `tuple`, `dict`, `text`, `other`.
* **action_dim**: the number of scalar components of one action: a Box's element count, 1 for
  Discrete, the length of a MultiDiscrete's nvec, a MultiBinary's bit count, the sum over the
  parts of a Tuple or Dict (0 for a space with no fixed size).
* **horizon**: the step cap of one episode (`EnvSpec.max_steps`).

Core16's features are read from a table here (building a MuJoCo or Box2D env only to read its
spaces costs a second at every `ole champion show --env`); `tests/evogym/test_features.py` builds
each Core16 env and checks the table against its real spaces. Any other id is read from its
spaces once per process (`evogym.envs.spaces_of`, cached).
"""
from __future__ import annotations

import functools
import math
from typing import Any, Literal, get_args

from pydantic import BaseModel, ConfigDict

SpaceKind = Literal["box", "image", "discrete", "multidiscrete", "multibinary", "tuple", "dict", "text", "other"]
SPACE_KINDS: tuple[str, ...] = get_args(SpaceKind)
_BY_TYPE = {"Box": "box", "Image": "image", "Discrete": "discrete", "MultiDiscrete": "multidiscrete",
            "MultiBinary": "multibinary", "Tuple": "tuple", "Dict": "dict", "Text": "text"}


class EnvFeatures(BaseModel):
    """The features of one env a scope can name (module docstring)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    env: str
    """Canonical env slug."""
    family: str
    """Env family (`evogym.envs.Family`)."""
    obs: SpaceKind
    """Kind of the observation space."""
    act: SpaceKind
    """Kind of the action space."""
    action_dim: int
    """Scalar components of one action (module docstring)."""
    horizon: int
    """Step cap of one episode."""


# slug -> (obs kind, action kind, action dim); checked against the built envs by the tests
_CORE16: dict[str, tuple[SpaceKind, SpaceKind, int]] = {
    "gym/acrobot": ("box", "discrete", 1),
    "gym/continuouscar": ("box", "box", 1),
    "gym/bipedal": ("box", "box", 4),
    "gym/racing": ("image", "box", 3),
    "gym/halfcheetah5": ("box", "box", 6),
    "gym/ant5": ("box", "box", 8),
    "gym/pusher5": ("box", "box", 7),
    "gym/reacher5": ("box", "box", 2),
    "gymnasium/MiniGrid-DoorKey-16x16-v0": ("dict", "discrete", 1),
    "gymnasium/MiniGrid-KeyCorridorS4R3-v0": ("dict", "discrete", 1),
    "gymnasium/MiniGrid-FourRooms-v0": ("dict", "discrete", 1),
    "gymnasium/MiniGrid-ObstructedMaze-1Q-v1": ("dict", "discrete", 1),
    "gymnasium/parking-v0": ("dict", "box", 2),
    "gymnasium/roundabout-v0": ("box", "discrete", 1),
    "gymnasium/FetchPush-v4": ("dict", "box", 4),
    "gymnasium/FetchPickAndPlace-v4": ("dict", "box", 4),
}


def kind_of(schema: dict[str, Any]) -> SpaceKind:
    """The kind of a space from its `evogym.spaces.space_schema`."""
    return _BY_TYPE.get(str(schema.get("type")), "other")  # type: ignore[return-value]


def dim_of(schema: dict[str, Any]) -> int:
    """Scalar components of one value of a space, from its schema (module docstring)."""
    kind = kind_of(schema)
    if kind in ("box", "image"):
        return math.prod(int(x) for x in schema.get("shape") or [1])
    if kind == "discrete":
        return 1
    if kind == "multidiscrete":
        return int(math.prod(_shape(schema.get("nvec"))))
    if kind == "multibinary":
        n = schema.get("n")
        return int(n) if isinstance(n, int) else math.prod(int(x) for x in n or [])
    if kind == "tuple":
        return sum(dim_of(s) for s in schema.get("spaces") or [])
    if kind == "dict":
        return sum(dim_of(s) for s in (schema.get("spaces") or {}).values())
    return 0


def _shape(nested: Any) -> list[int]:
    if isinstance(nested, list):
        if nested and isinstance(nested[0], list):
            return [len(nested)] + _shape(nested[0])
        return [len(nested)]
    return [1]


def from_meta(env: str, family: str, env_meta: dict[str, Any]) -> EnvFeatures:
    """The features of a task from its `/info.env_meta` (what an agent inside any harness knows)."""
    obs, act = env_meta["obs_space"], env_meta["action_space"]
    return EnvFeatures(env=env, family=family, obs=kind_of(obs), act=kind_of(act), action_dim=dim_of(act),
                       horizon=int(env_meta["max_episode_steps"]))


@functools.cache
def features_of(slug: str) -> EnvFeatures:
    """The features of an env slug (`evogym.envs.resolve` grammar); raises `EnvNotFound` for an
    unknown one. Core16 from the table, any other id from its spaces (built once per process)."""
    from evogym.envs import resolve, spaces_of
    spec = resolve(slug)
    if spec.slug in _CORE16:
        obs, act, dim = _CORE16[spec.slug]
        return EnvFeatures(env=spec.slug, family=spec.family, obs=obs, act=act, action_dim=dim,
                           horizon=spec.max_steps)
    obs_schema, act_schema = spaces_of(spec)
    return EnvFeatures(env=spec.slug, family=spec.family, obs=kind_of(obs_schema), act=kind_of(act_schema),
                       action_dim=dim_of(act_schema), horizon=spec.max_steps)
