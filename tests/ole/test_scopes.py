"""Scoped champions: scope keys, specificity, `within`, per-scope release/rollback/activation,
routing with `Registry.select`, specialisation edges, old registries, fsck, concurrency."""
from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ole.bundle import (GENERAL_SCOPE, HOSTS, Applicability, TaskContext, bundle_from_data, parse_scope,
                        validate_data)
from ole.errors import Conflict, NotFound, ValidationError
from ole.registry.lineage import Lineage
from ole.registry import Registry
from ole.registry.scopes import features_of, rank, task_context

PROJECT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).resolve().parent / "fixtures"
FOURROOMS = "gymnasium/MiniGrid-FourRooms-v0"
DOORKEY = "gymnasium/MiniGrid-DoorKey-16x16-v0"
ACROBOT = "gym/acrobot"


def ctx(env: str = ACROBOT, host: str = "builtin", budget: int = 32, model: str | None = None) -> TaskContext:
    return task_context(env, host, budget, model)


def app(**kw) -> Applicability:
    return validate_data(Applicability, kw)


# ----- scope keys, specificity, within (pure) ----------------------------------------------

families = st.lists(st.sampled_from(["curated", "generic", "minigrid", "highway", "robotics"]), unique=True,
                    max_size=3)
env_ids = st.lists(st.sampled_from([ACROBOT, FOURROOMS, DOORKEY, "gym/ant5", "gymnasium/parking-v0"]), unique=True,
                   max_size=3)
models = st.lists(st.sampled_from(["gpt", "gpt-4o", "claude", "claude-3", "llama"]), unique=True, max_size=2)


kinds = st.lists(st.sampled_from(["box", "discrete", "dict", "image"]), unique=True, max_size=2)


@st.composite
def ranges(draw, top: int) -> tuple[int | None, int | None]:
    low = draw(st.one_of(st.none(), st.integers(1, top)))
    high = draw(st.one_of(st.none(), st.integers(low or 1, top * 2)))
    return low, high


@st.composite
def applicabilities(draw) -> Applicability:
    low = draw(st.integers(1, 64))
    high = draw(st.one_of(st.none(), st.integers(low, 256)))
    hosts = draw(st.lists(st.sampled_from(HOSTS), unique=True, min_size=1))
    regional = draw(st.booleans())
    adim, horizon = draw(ranges(8)), draw(ranges(1000))
    region = dict(obs_kinds=draw(kinds), action_kinds=draw(kinds), min_action_dim=adim[0], max_action_dim=adim[1],
                  min_horizon=horizon[0], max_horizon=horizon[1]) if regional else {}
    return app(hosts=hosts, env_families=draw(families), env_ids=draw(env_ids), min_budget=low, max_budget=high,
               model_families=draw(models), **region)


FAMILY = {ACROBOT: "curated", FOURROOMS: "minigrid", DOORKEY: "minigrid", "gym/ant5": "generic",
          "gymnasium/parking-v0": "highway"}
FEATURES = {env: features_of(env) for env in FAMILY}


@st.composite
def tasks(draw) -> TaskContext:
    env = draw(st.sampled_from(sorted(FAMILY)))
    model = draw(st.sampled_from([None, "openai/gpt-4o-mini", "gpt-3.5", "anthropic/claude-3-5", "llama3"]))
    f = FEATURES[env]
    return TaskContext(host=draw(st.sampled_from(HOSTS)), env=env, family=FAMILY[env],
                       budget=draw(st.sampled_from([1, 8, 32, 64, 128, 300])), model=model,
                       obs=f.obs, act=f.act, action_dim=f.action_dim, horizon=f.horizon)


@settings(max_examples=200, deadline=None)
@given(applicabilities())
def test_scope_keys_round_trip_and_name_the_scope(a):
    key = a.scope_key
    assert parse_scope(key).scope_key == key
    assert parse_scope(key).within(a) and a.within(parse_scope(key))
    reordered = a.model_copy(update={f: tuple(reversed(getattr(a, f)))
                                     for f in ("hosts", "env_families", "env_ids", "model_families", "obs_kinds",
                                               "action_kinds")})
    assert reordered.scope_key == key


@settings(max_examples=300, deadline=None)
@given(applicabilities(), applicabilities(), st.lists(tasks(), min_size=1, max_size=20))
def test_matches_mismatch_and_within_agree(a, b, sample):
    for task in sample:
        assert (a.mismatch(task) is None) == a.matches_task(task)
        if a.within(b, features_of=FEATURES.get) and a.matches_task(task):
            assert b.matches_task(task), (a.scope_key, b.scope_key, task)
    assert a.within(Applicability()) and a.within(a, features_of=FEATURES.get)


@settings(max_examples=200, deadline=None)
@given(st.lists(applicabilities(), min_size=1, max_size=8, unique_by=lambda a: a.scope_key), st.randoms())
def test_specificity_is_a_total_order_with_general_last(scopes, rnd):
    keys = [a.scope_key for a in scopes] + [GENERAL_SCOPE]
    shuffled = list(dict.fromkeys(keys))
    rnd.shuffle(shuffled)
    assert rank(shuffled) == rank(sorted(set(keys)))
    assert rank(shuffled)[-1] == GENERAL_SCOPE
    specificities = [parse_scope(k).specificity() for k in set(keys)]
    assert len(set(specificities)) == len(specificities)


def test_the_documented_specificity_order():
    ordered = ["envs=gym/acrobot", "envs=gym/acrobot,gym/ant5", "act=box;adim=2-8;horizon=100-1000",
               "act=box;adim=2-4", "act=box;adim=2-8", "act=box;adim=2-", "hosts=builtin;families=curated",
               "families=curated", "families=curated,minigrid", "hosts=builtin;budget=1-32", "hosts=builtin",
               "budget=1-32", "budget=8-", "models=gpt-4o", "models=gpt", GENERAL_SCOPE]
    assert rank(reversed(ordered)) == ordered


REGION_ENVS = [ACROBOT, FOURROOMS, "gym/ant5", "gym/halfcheetah5", "gym/pusher5", "gym/reacher5", "gym/bipedal",
               "gymnasium/parking-v0", "gymnasium/roundabout-v0", "gymnasium/FetchPush-v4", "gym/racing",
               "gymnasium/CartPole-v1", "gymnasium/Pendulum-v1"]


@pytest.mark.parametrize("key", ["act=box", "act=box;adim=2-6", "obs=box;act=discrete", "horizon=-200",
                                 "families=generic;adim=4-;horizon=1000-", "obs=image,dict",
                                 "act=box;adim=1-2;envs=gymnasium/CartPole-v1"])
def test_a_feature_scope_admits_exactly_the_envs_whose_features_meet_it(key):
    scope = parse_scope(key)
    for env in REGION_ENVS:
        f = features_of(env)
        expected = env in scope.env_ids or (
            (not scope.env_families or f.family in scope.env_families)
            and (not scope.obs_kinds or f.obs in scope.obs_kinds)
            and (not scope.action_kinds or f.act in scope.action_kinds)
            and (scope.min_action_dim is None or f.action_dim >= scope.min_action_dim)
            and (scope.max_action_dim is None or f.action_dim <= scope.max_action_dim)
            and (scope.min_horizon is None or f.horizon >= scope.min_horizon)
            and (scope.max_horizon is None or f.horizon <= scope.max_horizon))
        assert scope.matches_task(ctx(env)) is expected, (key, env)
        assert (scope.mismatch(ctx(env)) is None) is expected


def test_a_task_whose_features_are_unknown_is_in_no_region():
    unknown = TaskContext(host="builtin", env="gym/ant5", family="generic", budget=32)
    assert not parse_scope("act=box").matches_task(unknown)
    assert parse_scope("families=generic").matches_task(unknown)  # the family is always known
    assert parse_scope("envs=gym/ant5").matches_task(unknown)


def test_a_feature_scope_routes_exactly_the_matching_tasks(reg):
    region = specialise(reg, 0.5, hosts=["builtin"], action_kinds=["box"], min_action_dim=2, max_action_dim=6,
                        min_budget=32, max_budget=128)
    reg.release(region, reason="gains on box-action envs of 2-6 dimensions")
    scope = "hosts=builtin;act=box;adim=2-6;budget=32-128"
    for env in REGION_ENVS:
        f = features_of(env)
        inside = f.act == "box" and 2 <= f.action_dim <= 6
        for budget in (16, 32, 128):
            chosen = reg.select("default", ctx(env, budget=budget))
            expected = inside and 32 <= budget <= 128
            assert (chosen.ref, chosen.scope) == ((region, scope) if expected else ("coder@1", GENERAL_SCOPE)), \
                (env, budget)
    assert "act [box], action dim 2–6" in reg.select("default", ctx(ACROBOT)).reason


def test_old_scope_keys_and_hashes_read_unchanged():
    old = app(env_families=["minigrid"], min_budget=8)
    assert old.scope_key == "families=minigrid;budget=8-" and parse_scope(old.scope_key) == old
    seed = bundle_from_data({"name": "coder", "loop_policy": {}, "applicability": {"env_families": ["minigrid"]}})
    with_region_fields = seed.model_copy(update={"applicability": app(env_families=["minigrid"], obs_kinds=[],
                                                                      min_horizon=None)})
    assert seed.content_hash == with_region_fields.content_hash
    assert seed.content_hash != seed.model_copy(update={"applicability": app(env_families=["minigrid"],
                                                                             min_horizon=10)}).content_hash


@pytest.mark.parametrize("text, message", [
    ("", "empty scope"), ("envs", "is not FIELD=VALUE"), ("colour=red", "unknown field `colour`"),
    ("families=a;families=b", "given twice"), ("envs=x;families=a", "in the order"),
    ("budget=0-5", "not MIN-MAX"), ("budget=9-3", "below min_budget"), ("hosts=robot", "hosts"),
    ("adim=-", "not MIN-MAX"), ("adim=8-2", "below min_action_dim"), ("act=wheel", "not a space kind"),
    ("horizon=0-10", "greater than or equal to 1"), ("envs=gym/acrobot;act=box", "in the order"),
])
def test_bad_scope_keys_are_one_line_errors(text, message):
    with pytest.raises(ValidationError, match=message):
        parse_scope(text)


def test_values_that_would_break_the_scope_key_are_refused():
    with pytest.raises(ValidationError, match="not a plain name"):
        app(env_ids=["gym/a,gym/b"])


def test_within_nests_families_env_ids_budgets_and_models():
    assert app(env_ids=[ACROBOT]).within(app(env_families=["curated"]), family_of=FAMILY.get)
    assert not app(env_ids=[ACROBOT]).within(app(env_families=["curated"]))  # without a family lookup
    assert not app(env_families=["curated"]).within(app(env_ids=[ACROBOT]), family_of=FAMILY.get)
    assert app(min_budget=8, max_budget=32).within(app(max_budget=64))
    assert not app(min_budget=8).within(app(max_budget=64))
    assert app(model_families=["gpt-4o"]).within(app(model_families=["gpt"]))
    assert not app().within(app(model_families=["gpt"]))
    assert app(hosts=["llm"]).narrower_than(Applicability()) and not Applicability().narrower_than(Applicability())


# ----- the registry: per-scope release, routing, rollback -----------------------------------

@pytest.fixture
def root(tmp_path) -> Path:
    target = tmp_path / "bundles"
    target.mkdir()
    for name in ("coder.yaml", "coder-llm.yaml"):
        shutil.copy(PROJECT / "bundles" / name, target / name)
    return target


@pytest.fixture
def reg(root):
    with Registry(root) as registry:
        yield registry


def scoped(step: float, **applicability):
    return bundle_from_data({"name": "coder", "loop_policy": {"action": {"step_size": step}},
                             "applicability": applicability})


def specialise(reg: Registry, step: float, parent: int = 1, **applicability) -> str:
    return reg.register(scoped(step, **applicability), parents=[parent], edge="specialization").ref


def test_in_scope_tasks_get_the_scope_champion_and_others_the_general_one(reg):
    mini = specialise(reg, 0.5, env_families=["minigrid"])
    reg.release(mini, reason="better on minigrid")
    chosen = reg.select("default", ctx(FOURROOMS))
    assert (chosen.ref, chosen.scope, chosen.bundle.ref, chosen.in_scope) == (mini, "families=minigrid", mini, True)
    assert "most specific" in chosen.reason and "coder@1" in chosen.reason
    other = reg.select("default", ctx(ACROBOT))
    assert (other.ref, other.scope, other.matched) == ("coder@1", GENERAL_SCOPE, (GENERAL_SCOPE,))
    assert ("not matching: `families=minigrid`: env gym/acrobot (family curated, obs box, act discrete, action dim 1, "
            "horizon 500) is not in families [minigrid]") in other.reason
    assert reg.get(mini).status == "active" and reg.get("coder@1").status == "active"


def test_the_most_specific_matching_champion_wins(reg):
    family = specialise(reg, 0.5, env_families=["minigrid"])
    env = specialise(reg, 0.6, parent=2, env_ids=[FOURROOMS], env_families=[])
    hosts = specialise(reg, 0.7, parent=2, env_families=["minigrid"], hosts=["builtin"])
    for ref in (family, env, hosts):
        reg.release(ref, reason="scope champion")
    assert reg.select("default", ctx(FOURROOMS)).ref == env
    picked = reg.select("default", ctx(DOORKEY))
    assert picked.ref == hosts and picked.matched == ("hosts=builtin;families=minigrid", "families=minigrid",
                                                      GENERAL_SCOPE)
    assert reg.select("default", ctx(DOORKEY, host="llm", model="gpt-4o")).ref == family
    assert reg.select("default", ctx(ACROBOT)).ref == "coder@1"
    assert [c.scope for c in reg.scope_champions()] == [GENERAL_SCOPE, f"envs={FOURROOMS}",
                                                        "hosts=builtin;families=minigrid", "families=minigrid"]


def test_pending_releases_activate_per_scope_only_at_the_next_task_boundary(reg):
    mini = specialise(reg, 0.5, env_families=["minigrid"])
    general = reg.register(scoped(0.4), parents=[1]).ref
    reg.release(mini, reason="scope")
    before = len(reg.events())
    peek = reg.select("default", ctx(FOURROOMS), activate=False)
    assert peek.ref == mini and "pending: release" in peek.reason and len(reg.events()) == before
    assert reg.champion().ref == "coder@1" and reg.state().champion("default", "families=minigrid") is None
    assert reg.select("default", ctx(ACROBOT)).ref == "coder@1"  # the boundary activates every scope ...
    activations = reg.events(kind="activation")
    assert [(e.ref, e.payload["scope"]) for e in activations] == [(mini, "families=minigrid")]
    reg.release(general, reason="general moves on")  # ... and a later release waits for the next one
    assert reg.select("default", ctx(FOURROOMS)).ref == mini
    assert reg.select("default", ctx(ACROBOT)).ref == general
    assert len(reg.events(kind="activation")) == 2
    reg.select("default", ctx(ACROBOT))
    assert len(reg.events(kind="activation")) == 2  # nothing pending: nothing recorded


def test_rollback_of_one_scope_leaves_the_others_untouched(reg):
    mini = specialise(reg, 0.5, env_families=["minigrid"])
    curated = specialise(reg, 0.6, env_families=["curated"])
    mini2 = reg.register(scoped(0.55, env_families=["minigrid"]), parents=[2], edge="manual").ref
    general = reg.register(scoped(0.4), parents=[1]).ref
    for ref in (mini, curated, general):
        reg.release(ref, reason="setup")
    reg.activate_pending()
    reg.release(mini2, reason="minigrid step two")
    reg.activate_pending()
    before = {c.scope: c.active for c in reg.scope_champions()}
    assert reg.rollback(scope="families=minigrid", reason="mini2 regressed").ref == mini  # parent is in the scope
    reg.activate_pending()
    after = {c.scope: c.active for c in reg.scope_champions()}
    assert after == {**before, "families=minigrid": mini}
    assert reg.get(mini2).status == "rolled_back"
    removed = reg.rollback(scope="families=minigrid", reason="minigrid champion regressed too")
    assert removed.ref == mini  # its parent is the general coder@1: the scope's pointer goes
    assert reg.select("default", ctx(FOURROOMS), activate=False).ref == general
    reg.activate_pending()
    assert {c.scope: c.active for c in reg.scope_champions()} == {GENERAL_SCOPE: general, "families=curated": curated}
    assert reg.get(mini).status == "rolled_back" and reg.select("default", ctx(DOORKEY)).ref == general
    assert reg.select("default", ctx(ACROBOT)).ref == curated
    with pytest.raises(NotFound, match="scope `families=minigrid` has no champion"):
        reg.rollback(scope="families=minigrid", reason="again")
    with pytest.raises(Conflict, match="has scope `general` \(its own\), not `families=curated`"):
        reg.rollback(scope="families=curated", to="coder@1", reason="wrong scope")
    with pytest.raises(Conflict, match="has scope `families=curated`, not `general`"):  # nor narrow into general:
        reg.rollback(to=curated, reason="wrong scope")  # it would be routed to every task
    with pytest.raises(NotFound, match="did you mean `families=curated`"):
        reg.rollback(scope="families=curate", reason="typo")
    assert reg.rollback(reason="general regressed").ref == "coder@1"  # general only
    reg.activate_pending()
    assert {c.scope: c.active for c in reg.scope_champions()} == {GENERAL_SCOPE: "coder@1",
                                                                  "families=curated": curated}
    assert reg.fsck().ok


def test_a_released_scope_can_be_re_released_after_removal(reg):
    mini = specialise(reg, 0.5, env_families=["minigrid"])
    reg.release(mini, reason="first")
    reg.activate_pending()
    with pytest.raises(Conflict, match="already the release of channel `default` scope `families=minigrid`"):
        reg.release(mini, reason="again")
    reg.rollback(scope="families=minigrid", reason="remove")
    reg.release(mini, reason="back again")
    reg.activate_pending()
    assert reg.select("default", ctx(FOURROOMS)).ref == mini


def test_other_channels_inherit_default_scopes_until_they_own_them(reg):
    mini = specialise(reg, 0.5, env_families=["minigrid"])
    mini2 = reg.register(scoped(0.6, env_families=["minigrid"]), parents=[2]).ref
    reg.release(mini, reason="default scope")
    reg.activate_pending()
    reg.release("coder@1", channel="exp", reason="create the channel")
    reg.activate_pending("exp")
    assert reg.select("exp", ctx(FOURROOMS)).ref == mini
    assert [c.inherited for c in reg.scope_champions("exp")] == [False, True]
    reg.release(mini2, channel="exp", reason="exp's own minigrid champion")
    assert reg.select("exp", ctx(FOURROOMS)).ref == mini2 and reg.select("default", ctx(FOURROOMS)).ref == mini
    with pytest.raises(NotFound, match="did you mean `exp`"):
        reg.select("exq", ctx())


def test_explicit_bundles_outside_their_scope_are_refused_unless_forced(reg):
    from ole.errors import OutOfScope
    from ole.runner import resolve_bundle
    mini = specialise(reg, 0.5, env_families=["minigrid"])
    with pytest.raises(OutOfScope) as info:
        resolve_bundle(reg, mini, "default", ctx(ACROBOT))
    assert "does not apply to gym/acrobot" in str(info.value) and "--force" in str(info.value)
    forced = resolve_bundle(reg, mini, "default", ctx(ACROBOT), force=True)
    assert forced.forced and not forced.in_scope and forced.record().forced
    assert resolve_bundle(reg, mini, "default", ctx(FOURROOMS)).record().model_dump() == {
        "ref": mini, "scope": "families=minigrid", "forced": False, "channel": None,
        "reason": f"{mini} was named explicitly and its scope `families=minigrid` admits "
                  f"{FOURROOMS} (host builtin, family minigrid, budget 32, no model)"}
    with pytest.raises(OutOfScope, match="host builtin is not in hosts"):
        resolve_bundle(reg, "coder-llm@1", "default", ctx(ACROBOT))


def test_specialization_edges_must_narrow_the_parent(reg):
    assert reg.get(specialise(reg, 0.5, env_families=["curated"])).bundle.provenance.mode == "manual"
    assert specialise(reg, 0.6, parent=2, env_ids=[ACROBOT]) == "coder@3"  # an env of the parent's family
    with pytest.raises(ValidationError, match="strictly narrower"):
        specialise(reg, 0.7)
    with pytest.raises(ValidationError, match="not within"):
        specialise(reg, 0.7, parent=2, env_families=["minigrid"])
    with pytest.raises(ValidationError, match="not within"):
        specialise(reg, 0.7, parent=3, env_ids=[FOURROOMS])
    before = len(reg.events())
    with pytest.raises(ValidationError, match="strictly narrower"):
        specialise(reg, 0.7, parent=2, env_families=["curated"])
    assert len(reg.events()) == before


def test_lineage_shows_scopes_and_scope_history(reg):
    mini = specialise(reg, 0.5, env_families=["minigrid"])
    reg.release(mini, reason="minigrid gain")
    reg.activate_pending()
    reg.rollback(scope="families=minigrid", reason="minigrid regressed")
    reg.activate_pending()
    lineage = Lineage.from_registry(reg)
    tree = lineage.render("tree", "coder")
    assert "coder@1 [active] seed (scope general)" in tree
    assert f"└── {mini} [rolled_back] specialization (scope families=minigrid)" in tree
    assert "scope families=minigrid" in lineage.render("mermaid") and "specialization" in lineage.render("dot")
    history = lineage.champion_history(scope="families=minigrid")
    assert [(t.ref, t.cause, t.reason, t.until is None) for t in history] == [(mini, "release", "minigrid gain", False)]
    assert lineage.champion_at(history[0].since, scope="families=minigrid").ref == mini
    assert lineage.champion_at(history[0].until, scope="families=minigrid") is None
    assert lineage.champion_at(history[0].since).ref == "coder@1"  # the general scope never changed
    assert lineage.scopes() == [GENERAL_SCOPE, "families=minigrid"]


# ----- old registries, fsck, concurrency ---------------------------------------------------

def _prescope_registry(tmp_path: Path) -> Path:
    source = FIXTURES / "prescope_registry"
    root = tmp_path / "old"
    root.mkdir()
    for seed in ("coder.yaml", "coder-llm.yaml"):
        shutil.copy(source / seed, root / seed)
    shutil.copytree(source / "blobs", root / ".registry" / "blobs")
    db = sqlite3.connect(root / ".registry" / "registry.sqlite3")
    db.executescript((source / "registry.sql").read_text())
    db.close()
    return root


def test_a_registry_written_before_scopes_loads_unchanged(tmp_path):
    with Registry(_prescope_registry(tmp_path)) as reg:
        assert len(reg.events()) == 12 and reg.fsck().ok
        assert reg.champion().ref == "coder@2" and reg.champion("minigrid").ref == "coder@3"
        assert reg.champion("llm").ref == "coder@2"  # pending coder-llm@1, inherited general until then
        assert [c.scope for c in reg.scope_champions("minigrid")] == [GENERAL_SCOPE]  # old releases are general
        chosen = reg.select("minigrid", ctx(ACROBOT))
        assert chosen.ref == "coder@3" and not chosen.in_scope and "does not admit the task" in chosen.reason
        assert reg.select("default", ctx()).ref == "coder@1"  # the pending rollback applied
        tree = Lineage.from_registry(reg).render("tree")
        assert "coder@3 [active] offline_mutation (scope families=minigrid)" in tree


def _inject(root: Path, kind: str, ref: str, channel: str, payload: str) -> None:
    name, version = ref.split("@")
    db = sqlite3.connect(root / ".registry" / "registry.sqlite3")
    db.execute("INSERT INTO events (ts, kind, name, version, channel, payload) VALUES "
               "('2026-12-01T00:00:00+00:00', ?, ?, ?, ?, ?)", (kind, name, int(version), channel, payload))
    db.commit()
    db.close()


def test_fsck_checks_scope_pointers(root):
    with Registry(root) as reg:
        mini = specialise(reg, 0.5, env_families=["minigrid"])
        reg.release(mini, reason="x")
        reg.activate_pending()
        report = reg.fsck()
        assert report.ok and report.scopes == {"default": {"families=minigrid": mini}}
    _inject(root, "activation", "coder@1", "default", '{"scope": "families=curated", "cause": "release"}')
    _inject(root, "release", "coder@2", "default", '{"scope": "envs=x;families=minigrid", "reason": "bad"}')
    with Registry(root) as reg:
        problems = reg.fsck().problems
    assert "channel `default` scope `families=curated` points at coder@1, whose scope is `general`" in problems
    assert any("names a malformed scope 'envs=x;families=minigrid'" in p for p in problems)


WORKER = """
    import sys
    from ole.registry import Registry
    from ole.registry.scopes import task_context
    root, ref, env = sys.argv[1], sys.argv[2], sys.argv[3]
    reg = Registry(root)
    for i in range(3):
        try:
            reg.release(ref, reason=f"race {i}")
        except Exception as exc:
            print("conflict", type(exc).__name__, flush=True)
        print("selected", reg.select("default", task_context(env, "builtin", 32)).ref, flush=True)
"""


@pytest.mark.heavy
def test_concurrent_writers_on_different_scopes_stay_consistent(root):
    with Registry(root) as reg:
        refs = [specialise(reg, 0.5, env_families=["minigrid"]), specialise(reg, 0.6, env_families=["curated"]),
                reg.register(scoped(0.4), parents=[1]).ref]
    envs = [FOURROOMS, ACROBOT, "gym/ant5"]
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(WORKER), str(root), ref, env],
                              env={**os.environ, "PYTHONPATH": str(PROJECT)}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for ref, env in zip(refs, envs) for _ in range(2)]
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    with Registry(root) as reg:
        releases = reg.events(kind="release")
        assert len(releases) == 3  # one per scope; every later attempt was a Conflict
        activations = reg.events(kind="activation")
        assert sorted(e.payload["scope"] for e in activations) == sorted(
            [GENERAL_SCOPE, "families=curated", "families=minigrid"])
        assert all(a.payload["cause_seq"] in {r.seq for r in releases} for a in activations)
        assert [reg.select("default", ctx(env)).ref for env in envs] == refs
        assert reg.fsck().ok


# ----- property-based: per-scope release / rollback / activation against a model ----------

from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule  # noqa: E402

VERSIONS = {  # version: (parent, scope key); registered once per machine
    2: (1, GENERAL_SCOPE), 3: (1, "families=minigrid"), 4: (3, "families=minigrid"), 5: (3, f"envs={FOURROOMS}")}
SCOPE_APPLICABILITY = {GENERAL_SCOPE: {}, "families=minigrid": {"env_families": ["minigrid"]},
                       f"envs={FOURROOMS}": {"env_ids": [FOURROOMS]}}


class ScopedRegistryMachine(RuleBasedStateMachine):
    """release / rollback(scope) / activate vs. a model of per-scope pointers; routing checked each step."""

    def __init__(self) -> None:
        super().__init__()
        import tempfile
        self.tmp = tempfile.TemporaryDirectory()
        root = Path(self.tmp.name)
        shutil.copy(PROJECT / "bundles" / "coder.yaml", root / "coder.yaml")
        self.reg = Registry(root)
        for version, (parent, scope) in VERSIONS.items():
            edge = "specialization" if scope != VERSIONS.get(parent, (0, GENERAL_SCOPE))[1] else "manual"
            entry = self.reg.register(scoped(version / 10, **SCOPE_APPLICABILITY[scope]), parents=[parent], edge=edge)
            assert entry.version == version
        self.scope_of = {1: GENERAL_SCOPE, **{v: s for v, (_, s) in VERSIONS.items()}}
        self.active: dict[str, int] = {GENERAL_SCOPE: 1}
        self.pending: dict[str, int | None] = {}
        self.kind: dict[str, str] = {}  # what is pending in a scope: a release or a rollback
        self.stack: dict[str, list[int]] = {GENERAL_SCOPE: [1]}  # what served each scope, oldest first
        self.pointed: set[str] = set()  # scopes with a pointer (an activation put it there)

    def teardown(self) -> None:
        self.reg.close()
        self.tmp.cleanup()

    @initialize(start=st.sampled_from([(), (4,), (5,), (4, 5)]))
    def start_with_scope_champions(self, start):
        """Often begin with scope champions active, so rollbacks and removals are reached early."""
        for version in start:
            self.release(version)
        self.activate()

    def _asked(self, scope: str):
        return self.pending[scope] if scope in self.pending else self.active.get(scope)

    @rule(version=st.sampled_from([1, 2, 3, 4, 5]))
    def release(self, version):
        scope = self.scope_of[version]
        untouched = scope not in self.pending and scope not in self.active
        if self._asked(scope) == version or (untouched and scope == GENERAL_SCOPE and version == 1):
            with pytest.raises(Conflict):
                self.reg.release(f"coder@{version}", reason="model")
            return
        self.reg.release(f"coder@{version}", reason="model")
        self._ask(scope, version, "release")

    def _ask(self, scope: str, target: int | None, kind: str) -> None:
        """A release or rollback is pending until the boundary unless it names what a pointer already
        serves (the seed serves `general` before any activation without a pointer: naming it is pending)."""
        if target is not None and target == self.active.get(scope) and scope in self.pointed:
            self.pending.pop(scope, None)
            self.kind.pop(scope, None)
        else:
            self.pending[scope], self.kind[scope] = target, kind

    @rule(scope=st.sampled_from(sorted(SCOPE_APPLICABILITY)))
    def rollback(self, scope):
        """A rollback goes back to what served the scope before (never the lineage parent); with a
        release pending it cancels that release; with nothing served before, a scope is removed."""
        cancelling = self.kind.get(scope) == "release"
        leaving = self.pending[scope] if cancelling else self.active.get(scope)
        if leaving is None:
            with pytest.raises(NotFound):
                self.reg.rollback(scope=scope, reason="model")
            return
        if cancelling:
            target = self.active.get(scope)
        else:
            served = [v for v in self.stack.get(scope, [])]
            while served and served[-1] == leaving:
                served.pop()
            target = served[-1] if served else None
        if target is None and scope == GENERAL_SCOPE:
            with pytest.raises(Conflict):
                self.reg.rollback(scope=scope, reason="model")
            return
        self.reg.rollback(scope=scope, reason="model")
        self._ask(scope, target, "rollback")

    @rule()
    def activate(self):
        for scope, target in self.pending.items():
            served = self.stack.setdefault(scope, [])
            if target is None:
                self.active.pop(scope, None)
                self.pointed.discard(scope)
                served.clear()
                continue
            self.active[scope] = target
            self.pointed.add(scope)
            if self.kind[scope] == "rollback" and target in served:
                del served[served.index(target) + 1:]
            elif not served or served[-1] != target:
                served.append(target)
        self.pending.clear()
        self.kind.clear()
        self.reg.activate_pending()

    def _expected(self, env: str, pointers: dict[str, int]) -> int:
        for scope in (f"envs={FOURROOMS}", "families=minigrid"):
            if scope in pointers and parse_scope(scope).matches_task(ctx(env)):
                return pointers[scope]
        return pointers[GENERAL_SCOPE]

    @invariant()
    def routing_matches_the_model(self):
        after = {s: self._asked(s) for s in SCOPE_APPLICABILITY if self._asked(s) is not None}
        state = self.reg.state()
        assert {s: v for s, (_, v) in state.champions("default").items()} == self.active
        for env in (FOURROOMS, DOORKEY, ACROBOT):
            assert self.reg.select("default", ctx(env), activate=False).ref == f"coder@{self._expected(env, after)}"


ScopedRegistryMachine.TestCase.settings = settings(max_examples=12, stateful_step_count=10, deadline=None)
test_scoped_registry_state_machine = ScopedRegistryMachine.TestCase
test_scoped_registry_state_machine.pytestmark = [pytest.mark.heavy]  # hypothesis runs many sequences: seconds


def test_the_space_kinds_of_scopes_are_the_hosts():
    from evogym.features import SPACE_KINDS as HOST_KINDS
    from ole.applicability import SPACE_KINDS
    assert SPACE_KINDS == HOST_KINDS
