"""Case pools (train / valid / heldout seeds), their data files, and run profiles.

Pools are generated, not shipped. The paper's files (`data/main-128/<slug>/*.json @
v0.1.0`) are a pure function of the slug and the pool seed, so `render_split`
reproduces them byte for byte and `pools_for` hashes the rendered bytes: the sha256
values recorded in `run.json.versions` equal the paper's (reference §5.1) without any
file on disk. Seeds therefore never exist inside a run workspace; only the trusted host
process computes them. `write_data` exports the files for inspection or for another
host, and `pools_for(..., data_dir=…)` reads such an export back through the loader
rules instead (a given directory that lacks a file is an error, never a fallback).

`pool_seed` 0 gives the paper pools; any other value gives alternative pools with the
same structure (1024 / 64 / 256 distinct seeds), used for disjoint evaluation conditions.
"""
from __future__ import annotations

import hashlib
import json
import random
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict

from evogym.errors import ConfigError, DataError

TRAIN_SIZE = 1024
VALID_SIZE = 64
HELDOUT_SIZE = 256
SEED_RANGE = 2**31
"""Seeds are drawn with `random.Random(pool_seed).randrange(SEED_RANGE)` (v0.1.0 `data make`)."""

Split = Literal["train", "valid", "heldout"]
SPLITS: tuple[Split, ...] = ("train", "valid", "heldout")
_REF_SUFFIX = {"train": "train", "valid": "validation", "heldout": "heldout"}


def make_pools(pool_seed: int = 0) -> tuple[list[int], list[int], list[int]]:
    """The full (train, valid, heldout) seed lists: 1024 / 64 / 256 distinct seeds drawn in
    that order from one Mersenne Twister stream, duplicates skipped."""
    rng = random.Random(pool_seed)
    seen: set[int] = set()
    seeds: list[int] = []
    while len(seeds) < TRAIN_SIZE + VALID_SIZE + HELDOUT_SIZE:
        seed = rng.randrange(SEED_RANGE)
        if seed not in seen:
            seen.add(seed)
            seeds.append(seed)
    return seeds[:TRAIN_SIZE], seeds[TRAIN_SIZE:TRAIN_SIZE + VALID_SIZE], seeds[TRAIN_SIZE + VALID_SIZE:]


def render_split(slug: str, split: Split, seeds: list[int], pool_seed: int = 0) -> str:
    """The data file text exactly as v0.1.0 writes it: indent 2, sorted keys, final newline."""
    doc = {
        "cases": [{"seed": s} for s in seeds],
        "env": slug,
        "generator": {"kind": "seed", "seed": pool_seed, "size": len(seeds)},
        "ref": f"{slug}/{_REF_SUFFIX[split]}",
        "split": split,
    }
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _slug_dir(data_dir: Path, slug: str) -> Path:
    return Path(data_dir) / slug


def write_data(data_dir: Path, slug: str, pool_seed: int = 0) -> dict[Split, Path]:
    """Write `<data_dir>/<slug>/{train,valid,heldout}.json`; returns the paths."""
    out_dir = _slug_dir(data_dir, slug)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[Split, Path] = {}
    for split, seeds in zip(SPLITS, make_pools(pool_seed)):
        path = out_dir / f"{split}.json"
        path.write_text(render_split(slug, split, seeds, pool_seed), encoding="utf-8")
        paths[split] = path
    return paths


# ---------------------------------------------------------------- loading


def parse_split(text: str, *, source: str, env: str | None = None, split: Split | None = None) -> list[int]:
    """Seeds of one data file, checked with the v0.1.0 loader rules: an object with
    `cases` or a bare array; `env`/`split` must match when present; not empty; no
    duplicate rows (compared as canonical JSON); every row a `{"seed": int}`."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{source}: not valid JSON ({exc})", hint="regenerate it with `evogym data`") from exc
    cases = doc.get("cases") if isinstance(doc, dict) else doc
    if not isinstance(cases, list):
        raise DataError(f"{source}: expected an object with `cases` or a bare array, got {type(doc).__name__}",
                        hint="regenerate it with `evogym data`")
    if isinstance(doc, dict):
        _check_label(doc, "env", env, source)
        _check_label(doc, "split", split, source)
    if not cases:
        raise DataError(f"{source}: split is empty; expected at least one case", hint="regenerate it")
    return _case_seeds(cases, source)


def _check_label(doc: dict, key: str, expected: str | None, source: str) -> None:
    if expected is not None and key in doc and doc[key] != expected:
        raise DataError(f"{source}: `{key}` is {doc[key]!r}, expected {expected!r}",
                        hint="the file belongs to another env or split; check the data directory")


def _case_seeds(cases: list, source: str) -> list[int]:
    seen: set[str] = set()
    seeds: list[int] = []
    for index, case in enumerate(cases):
        seed = case.get("seed") if isinstance(case, dict) else None
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise DataError(f"{source}: case {index} is {case!r}, expected {{\"seed\": <int >= 0>}}",
                            hint="regenerate the file")
        key = json.dumps(case, sort_keys=True)
        if key in seen:
            raise DataError(f"{source}: case {index} {key} is a duplicate", hint="each case must be distinct")
        seen.add(key)
        seeds.append(seed)
    return seeds


def load_split(path: Path, *, env: str | None = None, split: Split | None = None) -> list[int]:
    """Read and check one data file (see `parse_split`)."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"data file {path} does not exist", hint="run `evogym data` to write it")
    return parse_split(path.read_text(encoding="utf-8"), source=str(path), env=env, split=split)


def check_disjoint(pools: dict[str, list[int]], source: str) -> None:
    """Raise `DataError` when two splits share a case."""
    names = list(pools)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            shared = set(pools[a]) & set(pools[b])
            if shared:
                raise DataError(f"{source}: splits {a} and {b} share {len(shared)} case(s), e.g. seed {min(shared)}",
                                hint="splits must be disjoint; regenerate the data")


# ---------------------------------------------------------------- profiles


class Profile(BaseModel):
    """Budget and pool sizes of one kind of run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    """Profile name as given on the command line."""
    budget: int
    """Training episodes the agent may spend."""
    min_per_submit: int
    """Fewest episodes one accepted submit may request."""
    max_per_submit: int
    """Most episodes one accepted submit may request."""
    valid: int
    """Validation episodes per candidate checkpoint: the first `valid` seeds of the valid pool."""
    heldout: int
    """Held-out episodes of the selected checkpoint: the first `heldout` seeds of the heldout pool."""
    act_wall_s: float
    """Wall clock of one `reset()`/`act()` call of the policy (`sandbox.Limits.act_wall_s`):
    an endless act() ends its episode as `act_timeout` after this, not after the whole
    episode budget."""
    pool: int = TRAIN_SIZE
    """Train episode ids the agent may choose from (`0 … pool-1`): the first `pool` train seeds."""
    heldout_by_family: dict[str, int] = {}
    """Held-out episodes for envs of these families instead of `heldout` (`envs.EnvSpec.family`)."""
    max_submissions: int | None = None
    """Most charged submits; None = as many as the budget allows."""
    require_budget_exhaustion: bool = False
    """The run finishes only once the budget is spent (`/finish` refused before; a submit too
    small to leave that possible within `max_submissions` is refused as `budget_allocation`)."""
    max_candidates: int | None = None
    """Candidates hidden validation compares (the agent names them when it finishes, else the
    latest ok submits); None = every ok submit."""

    def heldout_for(self, family: str) -> int:
        return self.heldout_by_family.get(family, self.heldout)


PROFILES: dict[str, Profile] = {
    p.name: p
    for p in (
        Profile(name="paper", budget=128, min_per_submit=1, max_per_submit=128, valid=64, heldout=256,
                act_wall_s=10.0),
        Profile(name="bench", budget=128, min_per_submit=1, max_per_submit=128, valid=16, heldout=64,
                act_wall_s=5.0),
        Profile(name="quick", budget=32, min_per_submit=1, max_per_submit=32, valid=8, heldout=16,
                act_wall_s=5.0),
        # EvoPolicyGym main's "strict" leaderboard profile (shared/reference/evopolicygym-v3-notes.md):
        # budget and pool 128, at most 128 submissions of up to 32 episodes, the whole budget must be
        # spent, one candidate (the agent picks the final program) validated on one episode, held-out
        # ("assessment") 64 episodes, 128 for MiniGrid.
        Profile(name="strict", budget=128, min_per_submit=1, max_per_submit=32, valid=1, heldout=64,
                act_wall_s=5.0, pool=128, heldout_by_family={"minigrid": 128}, max_submissions=128,
                require_budget_exhaustion=True, max_candidates=1),
    )
}


def profile(name: str) -> Profile:
    """Look up a profile by name; `ConfigError` lists the known ones."""
    if name not in PROFILES:
        raise ConfigError(f"unknown profile {name!r}; expected one of {sorted(PROFILES)}",
                          hint="pass --profile paper, bench, quick or strict")
    return PROFILES[name]


class Pools(BaseModel):
    """The seeds one run uses and the hashes of the full data files they came from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    train: list[int]
    """All train seeds; agent case id `i` is `train[i]`."""
    valid: list[int]
    """Validation seeds, trimmed to the profile."""
    heldout: list[int]
    """Held-out seeds, trimmed to the profile."""
    hashes: dict[str, str]
    """sha256 of each full data file, keyed `data_train_hash` / `data_valid_hash` / `data_heldout_hash`."""


def pools_for(slug: str, prof: Profile | str, pool_seed: int = 0, data_dir: Path | None = None,
              heldout: int | None = None) -> Pools:
    """Seeds for one run of `slug` under a profile, plus the data-file hashes for `run.json`;
    `heldout`: the run's held-out size where it differs from the profile's (`Profile.heldout_for`)."""
    prof = profile(prof) if isinstance(prof, str) else prof
    if heldout is not None:
        prof = prof.model_copy(update={"heldout": heldout})
    texts = _split_texts(slug, pool_seed, data_dir)
    source = str(_slug_dir(data_dir, slug)) if data_dir is not None else f"generated pools of {slug}"
    seeds: dict[str, list[int]] = {s: parse_split(texts[s], source=f"{source}/{s}.json", env=slug, split=s)
                                   for s in SPLITS}
    check_disjoint(seeds, source)
    for split, want in (("valid", prof.valid), ("heldout", prof.heldout)):
        if len(seeds[split]) < want:
            raise DataError(f"{source}: {split} has {len(seeds[split])} cases, profile {prof.name} needs {want}",
                            hint="use a smaller profile or regenerate the data")
    return Pools(
        train=seeds["train"],
        valid=seeds["valid"][: prof.valid],
        heldout=seeds["heldout"][: prof.heldout],
        hashes={f"data_{s}_hash": _sha256(texts[s]) for s in SPLITS},
    )


def _split_texts(slug: str, pool_seed: int, data_dir: Path | None) -> dict[Split, str]:
    if data_dir is None:
        return {s: render_split(slug, s, seeds, pool_seed) for s, seeds in zip(SPLITS, make_pools(pool_seed))}
    texts: dict[Split, str] = {}
    for split in SPLITS:
        path = _slug_dir(data_dir, slug) / f"{split}.json"
        if not path.is_file():
            raise DataError(f"data file {path} does not exist", hint=f"run `evogym data --env {slug}` or drop --data-dir")
        texts[split] = path.read_text(encoding="utf-8")
    return texts
