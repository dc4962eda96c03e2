"""A small registry + evolve workdir with every version status, for the report tests.

Built through the public APIs only (Registry, ole.gate.decide, EvaluationStore), so it
does not depend on how a driver schedules its steps. What it holds:

    coder@1      seed                    -> retired (coder@5 took over)
    coder-llm@1  seed, never touched     -> seed
    coder@2      gen 1, step_size 0.5    -> released (pending on default)
    coder@3      gen 1                   -> rejected by gate #A (negative r)
    coder@4      gen 2                   -> released by gate #B, activated, then rolled back -> rolled_back
    coder@5      gen 2, recombination of coder@2 + coder@3 -> active
    coder@6      gen 2, scoped to the curated family + gym/acrobot, evaluated only -> evaluated
    coder@7      manual, registered only -> registered

plus one host run folder per gate pair (run.json, feedback summaries), so the report
draws best-so-far curves.
"""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from ole.evolve.store import EvaluationStore
from ole.gate import GateConfig, decide
from ole.paired import RunResult, eval_key, instance_key, make_pair
from ole.registry import Registry
from ole.trace import RunCondition, TaskSpec

PROJECT = Path(__file__).resolve().parents[2]
EXPECTED_STATUS = {"coder@1": "retired", "coder-llm@1": "seed", "coder@2": "released", "coder@3": "rejected",
                   "coder@4": "rolled_back", "coder@5": "active", "coder@6": "evaluated", "coder@7": "registered"}
GATE = GateConfig(min_pairs=4, min_families=2, max_pairs=None)
ENVS = (("gym/acrobot", "curated"), ("gym/reacher5", "generic"))
CHAMPION_SCORES = {"gym/acrobot": [-120.0, -135.0], "gym/reacher5": [-9.0, -11.0]}
"""Raw held-out returns of coder@1 per env on gate pools 201 and 202."""


@dataclass
class Fixture:
    root: Path
    workdir: Path
    reject_seq: int
    release_seq: int
    decisions: dict


def _variant(root: Path, generation: int, note: str, applicability: dict | None = None, **changes):
    """coder.yaml with `component__field=value` changes, a generation and a note (no parents: stamped later)."""
    from ole.bundle import bundle_from_data
    from ole.yamlio import read_yaml_file
    data = read_yaml_file(root / "coder.yaml")
    for key, value in changes.items():
        component, field = key.split("__")
        assert field in data["loop_policy"][component], key
        data["loop_policy"][component][field] = value
    if applicability:
        data["applicability"] = {**data.get("applicability", {}), **applicability}
    data["provenance"] = {"generation": generation, "proposer": "builtin", "note": note}
    return bundle_from_data(data, source=note)


def _result(tid: str, bundle_hash: str, score: float, env: str, episodes: int = 8) -> RunResult:
    from evogym.anchors import normalized
    return RunResult(trace_id=tid, bundle_hash=bundle_hash, q=normalized(env, score), q_source="normalized",
                     score=score, status="completed", verified=True, episodes=episodes, wall_s=2.0)


def _write_run(workdir: Path, result: RunResult, env: str, pool: int, vals: list[float]) -> None:
    host = workdir / "runs" / result.trace_id / "host"
    if host.exists():  # the champion's run is cached and shared by every challenger
        return
    for i, v in enumerate(vals):
        fb = host / "workspace" / "feedback" / f"submit_{i:03d}"
        fb.mkdir(parents=True)
        (fb / "summary.json").write_text(json.dumps({"submit_index": i, "n_episodes": 2, "mean_return": v - 5}))
    doc = {"env": env, "profile": "quick", "experiment_dimensions": {"pool_seed": pool},
           "outcome": {"status": "completed", "final_score": result.score,
                       "val_scores": {str(i): v for i, v in enumerate(vals)}}}
    (host / "run.json").write_text(json.dumps(doc))


def _gate(reg: Registry, store: EvaluationStore, workdir: Path, champ, chall, factor: float) -> tuple[int, dict]:
    """Pairs on 2 envs x 2 pools; the challenger's raw return is the champion's times (1 - factor) (returns are negative here: factor > 0 is better)."""
    pairs = []
    for env, family in ENVS:
        for k, pool in enumerate((201, 202)):
            task = TaskSpec(env=env, profile="quick", budget=8, pool_seed=pool)
            cond = RunCondition(host="builtin", seed=0)
            base = CHAMPION_SCORES[env][k]
            slug = env.replace("/", "_")
            a = _result(f"{slug}-{champ.ref}-p{pool}", champ.content_hash, base, env)
            b = _result(f"{slug}-{chall.ref}-p{pool}", chall.content_hash, base * (1 - factor) - 0.5 * k, env)
            for res, bundle in ((a, champ), (b, chall)):
                store.put(eval_key(bundle.content_hash, task, cond), instance_key(task, cond), family, res)
                _write_run(workdir, res, env, pool, [res.score - 30, res.score - 10, res.score])
            pairs.append(make_pair(task, cond, family, a, b))
    decision = decide(pairs, GATE, champion=champ.ref, challenger=chall.ref)
    payload = {**decision.model_dump(mode="json"), "accepted": decision.verdict == "release"}
    return reg.record_gate_decision(chall.ref, payload), payload


def _evaluation(reg: Registry, ref: str, stage: str, r: list[float]) -> None:
    reg.record_evaluation(ref, {"stage": stage, "champion": "coder@1", "n": len(r), "mean_r": sum(r) / len(r),
                                "cvar": min(r), "cost": 1.0, "r": r, "instances": [], "trace_ids": []})


def build(tmp: Path) -> Fixture:
    """Write the fixture under `tmp` and return where it is."""
    root, workdir = tmp / "bundles", tmp / "work"
    root.mkdir()
    for seed in ("coder.yaml", "coder-llm.yaml"):
        shutil.copy(PROJECT / "bundles" / seed, root / seed)
    store = EvaluationStore(workdir / "evaluations.sqlite3")
    with Registry(root) as reg:
        c1 = reg.get("coder@1")
        reg.register(_variant(root, 1, "bigger steps", action__step_size=0.5), parents=[1], edge="offline_mutation")
        c3 = reg.register(_variant(root, 1, "fewer retests", verification__retest_episodes=2), parents=[1],
                          edge="offline_mutation")
        c4 = reg.register(_variant(root, 2, "bigger steps again", action__step_size=0.6), parents=[2],
                          edge="offline_mutation")
        reg.register(_variant(root, 2, "recombined", action__step_size=0.5, verification__retest_episodes=2),
                     parents=[2, 3], edge="recombination")
        reg.register(_variant(root, 2, "acrobot specialist", {"env_families": ["curated"], "env_ids": ["gym/acrobot"]},
                              action__population=8), parents=[2], edge="offline_mutation")
        manual = _variant(root, 0, "", action__population=4)
        reg.register(manual.model_copy(update={"provenance": manual.provenance.model_copy(
            update={"proposer": "human"})}), parents=[1], note="manual tweak")
        for ref, stage, r in (("coder@2", "search-g1", [0.05, 0.1]), ("coder@3", "search-g1", [-0.1, -0.05]),
                              ("coder@4", "search-g2", [0.2, 0.15]), ("coder@5", "search-g2", [0.12, 0.08]),
                              ("coder@6", "search-g2", [0.01, -0.01])):
            _evaluation(reg, ref, stage, r)
        reject_seq, rejected = _gate(reg, store, workdir, c1, c3, factor=-0.2)
        release_seq, released = _gate(reg, store, workdir, c1, c4, factor=0.3)
        assert rejected["verdict"] == "reject" and released["verdict"] == "release", (rejected, released)
        reg.release("coder@4", reason="offline gate", channel="default")
        reg.activate_pending("default")
        scope = reg.events(kind="release")[-1].payload["scope"]  # bounded by what its gate covered
        reg.rollback("default", scope=scope, reason="regressed on a live task")
        reg.activate_pending("default")
        reg.release("coder@5", reason="manual promotion")
        reg.activate_pending("default")
        reg.release("coder@2", reason="canary")
    store.close()
    return Fixture(root=root, workdir=workdir, reject_seq=reject_seq, release_seq=release_seq,
                   decisions={"reject": rejected, "release": released})


LARGE_GENERATIONS, LARGE_POPULATION = 3, 8
"""The size of a real `make evolve`: 3 generations of 8 candidates, 25 versions, one release."""


@dataclass
class LargeFixture:
    root: Path
    workdir: Path
    path: list[str]
    """coder@1 -> the best of each generation -> the released one (the champion's path)."""
    released: str


def build_large(tmp: Path) -> LargeFixture:
    """A 25-version evolve with one release: each generation's 8 candidates are children of the last
    generation's best, their search scores crowd one narrow band, and the final best is gated,
    released and activated."""
    root, workdir = tmp / "bundles", tmp / "work"
    root.mkdir()
    shutil.copy(PROJECT / "bundles" / "coder.yaml", root / "coder.yaml")
    store = EvaluationStore(workdir / "evaluations.sqlite3")
    path = ["coder@1"]
    with Registry(root) as reg:
        parent, step = 1, 0
        for gen in range(1, LARGE_GENERATIONS + 1):
            scores = {}
            for i in range(LARGE_POPULATION):
                step += 1
                entry = reg.register(_variant(root, gen, f"candidate {i} of generation {gen}",
                                              action__step_size=round(0.30 + 0.01 * step, 2)),
                                     parents=[parent], edge="offline_mutation")
                r = 0.02 * gen + 0.004 * i - 0.01
                _evaluation(reg, entry.ref, f"search-g{gen}", [r - 0.002, r + 0.002])
                scores[entry.ref] = r
            best = max(scores, key=scores.get)
            path.append(best)
            parent = reg.get(best).version
        champion = reg.get("coder@1")
        _gate(reg, store, workdir, champion, reg.get(path[-1]), factor=0.3)
        reg.release(path[-1], reason="offline gate", channel="default")
        reg.activate_pending("default")
    store.close()
    return LargeFixture(root=root, workdir=workdir, path=path, released=path[-1])
