"""Field by field: a Loop Policy differing in one field makes each host agent act differently.

Both agents drive the one `ole.agents.session.AgentSession`, so the test runs once over both:
the built-in agent against `SimHost`, an in-process protocol stand-in on Pendulum
(`tests/ole/sensitivity_builtin.py`: every field, fast), and the LLM agent with a scripted
model against a real host on Acrobot (`tests/ole/sensitivity_llm.py`: a few fields by
default, every field with -m slow). "Acting" is what the host sees -- the submitted index
lists, the program of each submit, the refused submits, /finish -- and, for an LLM, every
prompt it was sent. A slow variant repeats a few fields for the built-in agent through
`ole.runner.run_task` and a real `evogym serve`.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from ole.loop_policy import COMPONENTS, LoopPolicy
from ole.trace import RunCondition, TaskSpec
from tests.ole import sensitivity_builtin as builtin
from tests.ole import sensitivity_llm as llm

FIELDS = {(c, f) for c in COMPONENTS for f in type(getattr(LoopPolicy(), c)).model_fields}
CASES = {"builtin": set(builtin.CASES), "llm": set(llm.VARIANTS)}
"""The fields each agent's harness varies: every field the agent reads."""
NOT_READ = {"builtin": builtin.NOT_READ, "llm": llm.NOT_READ}
"""Fields an agent does not read: the LLM caps (the built-in agent calls no model), the CMA-ES
population (an LLM makes one proposal per round)."""


@pytest.fixture(scope="module")
def llm_baseline(tmp_path_factory):
    return llm.baseline_signature(tmp_path_factory)


@pytest.mark.parametrize("agent", sorted(CASES))
def test_cases_cover_every_field(agent):
    assert FIELDS - NOT_READ[agent] == CASES[agent]


def _params() -> list:
    out = [pytest.param("builtin", key, id="builtin-" + ".".join(key)) for key in builtin.CASES]
    for key in sorted(llm.VARIANTS):
        marks = () if key in llm.DEFAULT_TIER else (pytest.mark.slow,)
        out.append(pytest.param("llm", key, id="llm-" + ".".join(key), marks=marks))
    return out


@pytest.mark.heavy
@pytest.mark.parametrize("agent,key", _params())
def test_field_changes_actions(tmp_path, request, agent, key):
    if agent == "builtin":
        a, b = builtin.pair(tmp_path, key)
        assert a != b, f"{'.'.join(key)}={builtin.CASES[key][0]!r} did not change the agent's actions"
        return
    base, variant = llm.pair(tmp_path, key, request.getfixturevalue("llm_baseline"))
    assert variant != base, f"changing {'.'.join(key)} left the LLM agent's prompts and actions unchanged"


@pytest.mark.heavy
def test_same_policy_same_actions(tmp_path):
    """Determinism: the comparison above is meaningful only if a repeat gives the same actions."""
    lp = LoopPolicy()
    assert builtin.act(tmp_path, lp, tag="x", cache=False) == builtin.act(tmp_path, lp, tag="y", cache=False)


def test_baseline_scenario_exercises_the_loop(llm_baseline):
    prompts, actions, reason = llm_baseline
    verdicts = [a[3] for a in actions]
    assert "init_error" in verdicts and verdicts.count("ok") >= 4
    assert {a[0] for a in actions} >= {"synthesis", "tuning", "verification"}
    assert {a[0] for a in actions} >= {"confirmation"} and reason in ("budget_spent", "finished_early")


REAL_HOST_CASES = [("action", "index_selection", "fresh"), ("action", "episodes_per_submit", 2),
                   ("stopping", "mode", "finish_early"), ("budget", "synthesis_fraction", 0.6)]


@pytest.mark.slow
@pytest.mark.parametrize("component,field,alt", REAL_HOST_CASES, ids=lambda v: str(v))
def test_field_changes_actions_on_a_real_host(tmp_path, component, field, alt):
    """The same comparison through `ole.runner.run_task` and a real `evogym serve` (acrobot, quick)."""
    import shutil

    from ole.registry import Registry
    from ole.runner import run_task

    root = tmp_path / "bundles"
    root.mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "bundles" / "coder.yaml", root / "coder.yaml")
    with Registry(root) as registry:
        seed = registry.get("coder@1").bundle
        patient = builtin.base(stopping__patience_submits=2)
        variant = seed.model_copy(update={"loop_policy": builtin.with_field(patient, component, field, alt)})
        base_ref = registry.register(seed.model_copy(update={"loop_policy": patient})).ref
        alt_ref = registry.register(variant).ref
    seqs = []
    for ref in (base_ref, alt_ref):
        trace = run_task(TaskSpec(env="gym/acrobot", budget=16), ref, "builtin", RunCondition(host="builtin", seed=1),
                         root=root, runs_dir=tmp_path / "runs", traces_dir=tmp_path / "traces", isolation="none")
        seqs.append(([(i.submitted_indices, i.mechanism, i.diff_lines) for i in trace.history],
                     trace.outcome.finish_reason, trace.outcome.episodes_used))
    assert seqs[0] != seqs[1]
