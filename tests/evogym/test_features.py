"""Task features (`evogym.features`): the Core16 table matches the real spaces, any id is read from
its spaces, and an agent reading `/info` derives the same features as the registry."""
from __future__ import annotations

import pytest

from evogym import features as feat
from evogym.envs import CORE16, env_meta, resolve, spaces_of
from evogym.errors import EnvNotFound


@pytest.mark.parametrize("slug", CORE16)
def test_the_core16_table_matches_the_built_env(slug: str) -> None:
    spec = resolve(slug)
    obs, act = spaces_of(spec)
    table = feat.features_of(slug)
    assert (table.obs, table.act, table.action_dim, table.horizon, table.family) == \
        (feat.kind_of(obs), feat.kind_of(act), feat.dim_of(act), spec.max_steps, spec.family)


def test_any_registered_id_is_read_from_its_spaces_and_info_agrees() -> None:
    cartpole = feat.features_of("gymnasium/CartPole-v1")
    assert (cartpole.family, cartpole.obs, cartpole.act, cartpole.action_dim, cartpole.horizon) == \
        ("generic", "box", "discrete", 1, 500)
    hopper = feat.features_of("gymnasium/Hopper-v5")
    assert (hopper.act, hopper.action_dim, hopper.horizon) == ("box", 3, 1000)
    for slug in ("gymnasium/CartPole-v1", "gym/halfcheetah5", "gymnasium/MiniGrid-FourRooms-v0"):
        spec = resolve(slug)
        assert feat.from_meta(slug, spec.family, env_meta(spec)) == feat.features_of(slug)


def test_dimensions_of_every_space_kind() -> None:
    assert feat.dim_of({"type": "Box", "shape": [3, 2]}) == 6
    assert feat.dim_of({"type": "Discrete", "n": 7}) == 1
    assert feat.dim_of({"type": "MultiDiscrete", "nvec": [[2, 3], [4, 5]]}) == 4
    assert feat.dim_of({"type": "MultiBinary", "n": 5}) == 5
    assert feat.dim_of({"type": "MultiBinary", "n": [2, 3]}) == 6
    assert feat.dim_of({"type": "Tuple", "spaces": [{"type": "Discrete", "n": 2}, {"type": "Box", "shape": [2]}]}) == 3
    assert feat.dim_of({"type": "Dict", "spaces": {"a": {"type": "Box", "shape": [4]}}}) == 4
    assert feat.kind_of({"type": "Graph"}) == "other" and feat.dim_of({"type": "Graph"}) == 0


def test_an_unknown_env_has_no_features() -> None:
    with pytest.raises(EnvNotFound):
        feat.features_of("gymnasium/NoSuchEnv-v9")
