"""Gate statistics and criteria: null false-positive rate, power, each criterion blocks alone."""
from __future__ import annotations

import json

import numpy as np
import pytest

from ole.errors import NotFound, ValidationError
from ole.gate import GateConfig, GateDecision, compute_stats, decide, load_config
from ole.paired import RunResult, instance_key, make_pair
from ole.trace import RunCondition, TaskSpec

ENVS = (("gym/acrobot", "curated"), ("gym/reacher5", "generic"), ("gymnasium/MiniGrid-FourRooms-v0", "minigrid"))


def _run(q, *, tid="t", episodes=16, wall=10.0, tokens=0, verified=True, breaches=()):
    return RunResult(trace_id=tid, bundle_hash="h", q=q, q_source="normalized" if q is not None else "none",
                     status="completed" if q is not None else "error", verified=verified, episodes=episodes,
                     wall_s=wall, tokens=tokens, within_contract=not breaches, contract_breaches=tuple(breaches))


def pairs_from(r_values, *, base=50.0, pool0=100, **challenger_kw):
    pairs = []
    for i, r in enumerate(r_values):
        env, family = ENVS[i % len(ENVS)]
        task = TaskSpec(env=env, budget=16, pool_seed=pool0 + i)
        cond = RunCondition(host="builtin", seed=i)
        champ = _run(base, tid=f"c{i}")
        chall = _run(base * (1 + r), tid=f"x{i}", **challenger_kw)
        pairs.append(make_pair(task, cond, family, champ, chall))
    return pairs


LOOSE = GateConfig(min_pairs=2, min_families=1, max_pairs=None, max_regressions=100, min_cvar=-1e9, min_worst_r=-1e9,
                   cost_kappa={}, min_win_rate=0.0)


def test_default_config_loads_and_missing_path_is_an_error(tmp_path):
    cfg = load_config()
    assert cfg.alpha == 0.1 and cfg.min_pairs == 6
    with pytest.raises(NotFound):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("alpha: 0.1\nalpah: 0.2\n")
    with pytest.raises(ValidationError, match="alpah"):
        load_config(bad)
    for text, field in (("alpha: '0.1'\n", "alpha"), ("min_pairs: 6.0\n", "min_pairs"), ("seed: -5\n", "seed"),
                        ("analysis:\n  deadline: '16'\n", "analysis.deadline")):
        bad.write_text(text)  # strict like bundles: never coerced (a seed -5 once failed at the gate itself)
        with pytest.raises(ValidationError, match=field):
            load_config(bad)


def test_config_rejects_positive_loss_bounds_and_unknown_resources():
    with pytest.raises(Exception, match="loss bounds"):
        GateConfig(min_worst_r=0.1)
    with pytest.raises(Exception, match="unknown cost_kappa"):
        GateConfig(cost_kappa={"gpu_hours": 0.1})


@pytest.mark.parametrize("test", ["wilcoxon", "bootstrap"])
def test_false_positive_rate_under_the_null_is_at_most_alpha_plus_tolerance(test):
    cfg = LOOSE.model_copy(update={"test": test, "bootstrap_resamples": 400})
    rng = np.random.default_rng(7)
    sims, releases = 300, 0
    for _ in range(sims):
        r = rng.normal(0.0, 0.2, size=10)
        releases += decide(pairs_from(r), cfg, champion="a@1", challenger="a@2").verdict == "release"
    assert releases / sims <= cfg.alpha + 0.05


@pytest.mark.parametrize("test", ["wilcoxon", "bootstrap"])
def test_power_on_a_known_effect(test):
    cfg = LOOSE.model_copy(update={"test": test, "bootstrap_resamples": 400})
    rng = np.random.default_rng(11)
    sims, releases = 100, 0
    for _ in range(sims):
        r = rng.normal(0.2, 0.2, size=10)
        releases += decide(pairs_from(r), cfg, champion="a@1", challenger="a@2").verdict == "release"
    assert releases / sims >= 0.8


GOOD = [0.2, 0.15, 0.3, 0.1, 0.25, 0.2, 0.12, 0.18]
STRICT = GateConfig(min_pairs=6, min_families=2, max_pairs=None)


def test_a_clear_improvement_is_released_and_the_record_round_trips():
    d = decide(pairs_from(GOOD), STRICT, champion="a@1", challenger="a@2")
    assert d.verdict == "release", d.reasons
    again = GateDecision.model_validate_json(d.model_dump_json())
    assert again == d and len(again.pairs) == len(GOOD) and again.stats.r == tuple(p.r for p in d.pairs)


def _case(case: str):
    """The decision of one criterion case (`good`: every criterion holds)."""
    r, kw, cfg, seen = list(GOOD), {}, STRICT, ()
    if case == "flat":
        r = [0.01, -0.02, 0.0, 0.01, -0.01, 0.02, -0.01, 0.0]
    elif case == "thin":
        r = GOOD[:4]
    elif case == "one_family":
        cfg = STRICT.model_copy(update={"min_families": 4})
    elif case == "unverified":
        kw = {"verified": False}
    elif case == "leak":
        p0 = pairs_from(GOOD)[0]
        seen = (instance_key(p0.task, p0.condition),)
    elif case == "tail":
        r, cfg = GOOD[:-1] + [-0.9], STRICT.model_copy(update={"min_worst_r": -0.5})
    elif case == "cost":
        kw = {"episodes": 32}
    elif case == "contract":
        kw = {"breaches": ("episodes: 40 > 32",)}
    return decide(pairs_from(r, **kw), cfg, champion="a@1", challenger="a@2", seen_keys=seen)


@pytest.mark.parametrize("case,verdict,criterion", [
    ("flat", "reject", "benefit"),
    ("thin", "indecisive", "evidence"),
    ("one_family", "indecisive", "evidence"),
    ("unverified", "indecisive", "evidence"),
    ("leak", "indecisive", "evidence"),
    ("tail", "reject", "tail"),
    ("cost", "reject", "cost"),
    ("contract", "reject", "cost"),
])
def test_each_criterion_blocks_a_release_on_its_own(case, verdict, criterion):
    d = _case(case)
    assert d.verdict == verdict, d.reasons
    failed = [c.name for c in d.criteria if not c.passed]
    assert criterion in failed
    if case not in ("flat", "tail"):
        assert failed == [criterion]


def test_contract_breach_cannot_be_relaxed_by_config():
    cfg = STRICT.model_copy(update={"cost_kappa": {}})
    d = decide(pairs_from(GOOD, breaches=("usd: 9 > 5",)), cfg, champion="a@1", challenger="a@2")
    assert d.verdict == "reject" and any("contract budget" in r for r in d.reasons)


def test_failure_aware_change_is_bounded():
    task, cond = TaskSpec(env="gym/acrobot"), RunCondition(host="builtin")
    lost = make_pair(task, cond, "curated", _run(40.0), _run(None))
    won = make_pair(task, cond, "curated", _run(None), _run(40.0))
    both = make_pair(task, cond, "curated", _run(None), _run(None))
    assert (lost.r, won.r, both.r) == (-1.0, 1.0, 0.0)
    near_zero = make_pair(task, cond, "minigrid", _run(0.0), _run(100.0))
    assert near_zero.r == 4.0


def test_stats_keep_per_pair_values_and_tail_numbers():
    r = [0.5, 0.4, -0.3, 0.2, 0.1, -0.6, 0.3, 0.2]
    s = compute_stats(pairs_from(r), STRICT)
    assert s.r == pytest.approx(r)
    assert s.worst_r == pytest.approx(-0.6)
    assert s.cvar == pytest.approx((-0.6 - 0.3) / 2)
    assert s.n_regressions == 2
    assert s.ci_low < s.mean_r < s.ci_high
    json.loads(s.model_dump_json())


@pytest.mark.parametrize("alpha", [0.1, 0.05])
def test_the_interval_covers_its_labelled_two_sided_level(alpha):
    """[ci_low, ci_high] are the alpha / 1 - alpha bootstrap percentiles: coverage 1 - 2 alpha, labelled so."""
    from ole.gate import ci_text
    cfg = GateConfig(alpha=alpha, bootstrap_resamples=1000, min_pairs=2, max_pairs=None)
    rng = np.random.default_rng(7)
    covered, trials = 0, 300
    for _ in range(trials):
        s = compute_stats(pairs_from(list(rng.normal(0.1, 0.2, size=30))), cfg)
        covered += s.ci_low <= 0.1 <= s.ci_high
    level = 1 - 2 * alpha
    assert s.ci_level == pytest.approx(level) and ci_text(s).startswith(f"{level:.0%} CI [")
    assert abs(covered / trials - level) < 0.06  # the percentile bootstrap slightly under-covers at n=30


# ----- adaptive sample: looks, alpha spending, when to extend ------------------------------------
from ole.gate import look_alpha, should_extend  # noqa: E402

ADAPTIVE = LOOSE.model_copy(update={"max_pairs": 24, "min_pairs": 6, "bootstrap_resamples": 400})


def _sequential(r_all, cfg, looks=(12, 18, 24)):
    """Judge at each look like `Engine.decide_gate`: extend only while `should_extend` says so."""
    n_prev, d = 0, None
    for n in looks:
        if d is not None and should_extend(d, n) is None:
            break
        pairs = pairs_from(r_all[:n])
        d = decide(pairs, cfg, champion="a@1", challenger="a@2", alpha=look_alpha(cfg, n, n_prev))
        n_prev = n
    return d


def test_alpha_spending_shares_sum_to_at_most_alpha():
    looks = (12, 18, 24)
    shares = [look_alpha(ADAPTIVE, n, p) for n, p in zip(looks, (0, *looks[:-1]))]
    assert shares == pytest.approx([0.05, 0.025, 0.025]) and sum(shares) <= ADAPTIVE.alpha + 1e-12
    assert look_alpha(LOOSE, 12, 0) == LOOSE.alpha  # no cap: one look at the full alpha
    with pytest.raises(Exception, match="max_pairs"):
        GateConfig(min_pairs=6, max_pairs=4)


@pytest.mark.parametrize("test", ["wilcoxon", "bootstrap"])
def test_adaptive_sample_keeps_the_false_positive_rate_under_the_null(test):
    cfg = ADAPTIVE.model_copy(update={"test": test})
    rng = np.random.default_rng(11)
    released = sum(_sequential(rng.normal(0.0, 0.2, 24), cfg).verdict == "release" for _ in range(300))
    assert released / 300 <= cfg.alpha + 0.05


def test_adaptive_sample_extends_an_open_verdict_and_releases_a_real_gain():
    rng = np.random.default_rng(3)
    extended = released = 0
    for _ in range(100):
        r = rng.normal(0.08, 0.2, 24)
        first = decide(pairs_from(r[:12]), ADAPTIVE, champion="a@1", challenger="a@2",
                       alpha=look_alpha(ADAPTIVE, 12, 0))
        extended += first.verdict != "release" and should_extend(first, 18) is not None
        released += _sequential(r, ADAPTIVE).verdict == "release"
    assert extended > 10  # thin evidence of a modest gain is looked at again, not rejected
    fixed = sum(decide(pairs_from(np.random.default_rng(3 + i).normal(0.08, 0.2, 12)), ADAPTIVE,
                       champion="a@1", challenger="a@2", alpha=look_alpha(ADAPTIVE, 12, 0)).verdict == "release"
                for i in range(100))
    assert released > fixed  # the added pairs buy power


@pytest.mark.heavy
def test_should_extend_only_open_verdicts():
    cfg = ADAPTIVE.model_copy(update={"min_worst_r": -0.5})
    thin = decide(pairs_from([0.1] * 4), cfg, champion="a@1", challenger="a@2", alpha=0.05)
    assert thin.verdict == "indecisive" and "thin evidence" in should_extend(thin, 12)
    wrong_side = decide(pairs_from([-0.05] * 12), cfg, champion="a@1", challenger="a@2", alpha=0.05)
    assert should_extend(wrong_side, 18) is None  # futility: a mean on the wrong side stops
    tail = decide(pairs_from([0.2] * 11 + [-0.9]), cfg, champion="a@1", challenger="a@2", alpha=0.05)
    assert should_extend(tail, 18) is None  # a regressing pair cannot be undone by more pairs
    noisy = decide(pairs_from([0.3, -0.2] * 6), cfg, champion="a@1", challenger="a@2", alpha=0.05)
    assert noisy.verdict == "reject" and "not yet significant" in should_extend(noisy, 18)
    assert should_extend(noisy, 30) is None  # never beyond max_pairs
    fixed = decide(pairs_from([0.3, -0.2] * 6), LOOSE, champion="a@1", challenger="a@2")
    assert should_extend(fixed, 18) is None  # no cap: a fixed sample


def test_a_specialisation_needs_only_the_families_in_its_scope():
    cfg = GateConfig(min_pairs=6, min_families=2, max_regressions=100, min_cvar=-1e9, min_worst_r=-1e9,
                     cost_kappa={}, min_win_rate=0.0, max_pairs=None)
    one_family = [p.model_copy(update={"family": "curated"}) for p in pairs_from([0.2] * 8)]
    general = decide(one_family, cfg, champion="a@1", challenger="a@2")
    assert general.verdict == "indecisive"
    scoped = decide(one_family, cfg, champion="a@1", challenger="a@2", scope_families=["curated"])
    assert scoped.verdict == "release"


def _cases():
    """Every decision this module's criterion cases make, plus a per-env loss and a scoped one."""
    out = [_case(case) for case in ("flat", "thin", "one_family", "unverified", "leak", "tail", "cost", "contract",
                                    "good")]
    # only the per-env check fails: reacher5 (every third pair) loses 5 % while the others gain
    per_env = [0.3 if i % 3 != 1 else -0.05 for i in range(9)]
    out.append(decide(pairs_from(per_env), STRICT.model_copy(update={"min_worst_r": -0.5}),
                      champion="a@1", challenger="a@2"))
    out.append(decide(pairs_from(GOOD[:6]), STRICT.model_copy(update={"min_families": 3}), champion="a@1",
                      challenger="a@2", scope_families=["curated"]))
    return out


@pytest.mark.parametrize("i", range(11))
def test_the_report_shows_the_gates_own_checks(i):
    """Report check passed <=> gate criterion passed: the report reads the decision's checks, never
    re-derives them; an old record without checks is rebuilt by the gate's own functions."""
    from types import SimpleNamespace

    from ole.gate import criteria_of
    from ole.report.collect import gate_from_event
    d = _cases()[i]
    for c in d.criteria:
        assert c.checks and c.passed == all(k.passed for k in c.checks)
        assert c.reasons == tuple(r for k in c.checks if not k.passed for r in k.reasons)
    payload = json.loads(json.dumps(d.event_payload()))
    old = json.loads(json.dumps(payload))
    for c in old["criteria"]:
        del c["checks"]  # a record from before checks were stored
    for record in (payload, old):
        shown = gate_from_event(SimpleNamespace(payload=record, seq=1, ts="t", ref="a@2"))
        assert [(c.name, c.passed, c.reasons) for c in shown.criteria] == \
            [(c.name, c.passed, c.reasons) for c in d.criteria]
        for gate_c, report_c in zip(d.criteria, shown.criteria):
            assert report_c.passed == all(k.passed for k in report_c.checks)
            assert [(k.what, k.measured, k.passed) for k in report_c.checks] == \
                [(k.what, k.measured, k.passed) for k in gate_c.checks]
            if record is payload:  # an old record does not say a scope's family bound: only the new one's text
                assert [k.required for k in report_c.checks] == [k.required for k in gate_c.checks]
    assert criteria_of(payload) == d.criteria


def test_a_per_env_loss_fails_tail_by_its_own_check():
    d = _cases()[9]
    assert d.verdict == "reject" and [c.name for c in d.criteria if not c.passed] == ["tail"]
    tail = next(c for c in d.criteria if c.name == "tail")
    failed = [k for k in tail.checks if not k.passed]
    assert [k.what for k in failed] == ["env gym/reacher5 mean r"] and failed[0].required == ">= -0.0200"
    assert failed[0].reasons == tail.reasons


@pytest.mark.parametrize("i", range(11))
def test_a_release_reads_the_coverage_and_bound_the_gate_recorded(i):
    """The registry's release bound is the decision's own (coverage, bound); a record older than
    those fields gets the same from its stored pairs."""
    from ole.coverage import decision_evidence
    d = _cases()[i]
    payload = json.loads(json.dumps(d.event_payload()))
    cov, bound = decision_evidence(payload)
    assert cov == d.coverage and (bound.scope_key if bound is not None else None) == d.bound
    old = {k: v for k, v in payload.items() if k not in ("coverage", "bound")}
    cov_old, bound_old = decision_evidence(old)
    assert cov_old == cov and bound_old == bound


def test_the_packaged_gate_file_states_the_class_defaults():
    """One set of defaults: `GateConfig()` in code gates as the packaged gate.yaml does (its analysis
    and transfer sections included), so neither can drift from the other."""
    from ole.gate import load_config
    assert load_config() == GateConfig()
    assert load_config().model_dump() == GateConfig().model_dump()
