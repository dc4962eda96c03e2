"""Case pools, data files byte-identical to v0.1.0 (§5.1), loader rules, profiles."""
from __future__ import annotations

import hashlib
import json

import pytest

from evogym.pools import (PROFILES, SPLITS, load_split, make_pools, parse_split, pools_for, profile,
                         render_split, write_data)
from evogym.envs import CORE16
from evogym.errors import ConfigError, DataError

# sha256 prefixes of data/main-128/<slug>/{train,valid,heldout}.json @ v0.1.0 (reference §5.1)
PAPER_HASHES = {
    "gym/acrobot": ("bcfb3aca8be7dc7d", "163319621aaf7ce4", "d7f00a779ec4e417"),
    "gym/continuouscar": ("badcc2afeb9a521b", "547e8042f2200bde", "65186c75cbdbfb43"),
    "gym/bipedal": ("134d5a55bfc2a3a4", "ffde404919232267", "ff76f1d24abe4bf9"),
    "gym/racing": ("f18c5fa76ad35395", "5f2fa0a9c9982975", "41565fbded8719e3"),
    "gym/halfcheetah5": ("3b60824dab5e1985", "722f01dea33b53ff", "66a92b135741ab03"),
    "gym/ant5": ("fc131469bdab7cc8", "a7b676f59cafec65", "2b89a433773053a6"),
    "gym/pusher5": ("8feb9cb04235ae71", "68ee2bf1562d9cde", "fb0d2b792954b20c"),
    "gym/reacher5": ("0c5e31e0a69e75fd", "fbb778ebcac1e9b2", "933b9621ca1950b4"),
    "gymnasium/MiniGrid-DoorKey-16x16-v0": ("82b68b98a3e7c13c", "ab3383b5f197553f", "878e99f34834ee85"),
    "gymnasium/MiniGrid-KeyCorridorS4R3-v0": ("539bfdd2841654f9", "9b5e21920932eaf5", "9bdfa86d79b6bb53"),
    "gymnasium/MiniGrid-FourRooms-v0": ("f1ffdc02a9de53dd", "47471e6bd7395c0e", "bac63da72ee82f9e"),
    "gymnasium/MiniGrid-ObstructedMaze-1Q-v1": ("5e2eb656d3857064", "259d0a01c5b79b82", "6d5a670b1df12b08"),
    "gymnasium/parking-v0": ("10ae4f9a763c75e5", "22d36a4b016d5deb", "34c1156728227d16"),
    "gymnasium/roundabout-v0": ("564ebfb884d167fe", "f30d7cb47ce21036", "36ca8b16555d45f4"),
    "gymnasium/FetchPush-v4": ("1e3175bdefb07fee", "f097db507d556aba", "e938990a0b2f240d"),
    "gymnasium/FetchPickAndPlace-v4": ("0317e92c9b43a3a8", "c1abc03af68ee693", "3bad3d6a8261fc80"),
}


def test_paper_pools_start_and_end_where_published():
    train, valid, heldout = make_pools(0)
    assert (len(train), len(valid), len(heldout)) == (1024, 64, 256)
    assert train[:3] == [1654615998, 1806341205, 173879092] and train[-1] == 2063356109
    assert valid[:2] == [1106378843, 805970311]
    assert heldout[:2] == [47113601, 1076138659] and heldout[-1] == 1271493326
    assert len(set(train) | set(valid) | set(heldout)) == 1344


@pytest.mark.parametrize("slug", sorted(PAPER_HASHES))
def test_generated_files_hash_like_the_paper(slug, tmp_path):
    assert set(PAPER_HASHES) == set(CORE16)
    pools = pools_for(slug, "paper")
    for split, prefix in zip(SPLITS, PAPER_HASHES[slug]):
        assert pools.hashes[f"data_{split}_hash"].startswith(prefix)
    paths = write_data(tmp_path, slug)
    for split, prefix in zip(SPLITS, PAPER_HASHES[slug]):
        assert hashlib.sha256(paths[split].read_bytes()).hexdigest().startswith(prefix)


def test_file_format_fields(tmp_path):
    text = render_split("gym/acrobot", "valid", [5, 7])
    assert text.endswith("}\n") and text.startswith('{\n  "cases": [\n    {\n      "seed": 5')
    doc = json.loads(text)
    assert doc == {"cases": [{"seed": 5}, {"seed": 7}], "env": "gym/acrobot",
                   "generator": {"kind": "seed", "seed": 0, "size": 2},
                   "ref": "gym/acrobot/validation", "split": "valid"}


def test_profiles_trim_valid_and_heldout_from_the_front():
    full = pools_for("gym/acrobot", "paper")
    for name, valid, heldout, budget in (("paper", 64, 256, 128), ("bench", 16, 64, 128), ("quick", 8, 16, 32)):
        pools = pools_for("gym/acrobot", name)
        assert pools.valid == full.valid[:valid] and pools.heldout == full.heldout[:heldout]
        assert pools.train == full.train and pools.hashes == full.hashes
        assert PROFILES[name].budget == budget
    assert PROFILES["quick"].max_per_submit == 32 and PROFILES["paper"].min_per_submit == 1
    with pytest.raises(ConfigError, match="bench"):
        profile("benchmark")


def test_other_pool_seeds_give_disjoint_pools_of_the_same_shape():
    a, b = pools_for("gym/acrobot", "paper", pool_seed=1), pools_for("gym/acrobot", "paper", pool_seed=0)
    assert (len(a.train), len(a.valid), len(a.heldout)) == (1024, 64, 256)
    assert a.hashes != b.hashes
    assert not set(a.heldout) & set(b.heldout)
    assert make_pools(1) == make_pools(1)


def test_data_dir_round_trip_and_missing_file(tmp_path):
    write_data(tmp_path, "gym/acrobot")
    assert pools_for("gym/acrobot", "bench", data_dir=tmp_path) == pools_for("gym/acrobot", "bench")
    (tmp_path / "gym/acrobot/valid.json").unlink()
    with pytest.raises(DataError, match="valid.json does not exist"):
        pools_for("gym/acrobot", "bench", data_dir=tmp_path)


@pytest.mark.parametrize("text, match", [
    ("{not json", "not valid JSON"),
    ('{"cases": []}', "empty"),
    ("[]", "empty"),
    ('{"cases": [{"seed": 1}, {"seed": 1}]}', "duplicate"),
    ('{"cases": [{"seed": "1"}]}', "expected"),
    ('{"cases": [{"seed": 1}], "env": "gym/other"}', "`env` is 'gym/other'"),
    ('{"cases": [{"seed": 1}], "split": "train"}', "`split` is 'train'"),
    ('{"rows": []}', "expected an object with `cases`"),
])
def test_loader_rejects_bad_files(text, match):
    with pytest.raises(DataError, match=match):
        parse_split(text, source="f.json", env="gym/acrobot", split="valid")


def test_loader_accepts_bare_arrays_and_rejects_overlaps(tmp_path):
    assert parse_split('[{"seed": 3}, {"seed": 4}]', source="x", env="gym/acrobot", split="train") == [3, 4]
    paths = write_data(tmp_path, "gym/acrobot")
    assert load_split(paths["heldout"], env="gym/acrobot", split="heldout") == make_pools(0)[2]
    valid = json.loads(paths["valid"].read_text())
    valid["cases"][0] = {"seed": make_pools(0)[0][0]}
    paths["valid"].write_text(json.dumps(valid))
    with pytest.raises(DataError, match="share 1 case"):
        pools_for("gym/acrobot", "paper", data_dir=tmp_path)
    with pytest.raises(DataError, match="does not exist"):
        load_split(tmp_path / "nope.json")
