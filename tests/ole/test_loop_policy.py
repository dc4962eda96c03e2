"""Loop Policy schema: strict, documented field by field, every field explained in the docs."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ole.bundle import validate_data
from ole.errors import ValidationError
from ole.loop_policy import COMPONENTS, LoopPolicy

ROOT = Path(__file__).resolve().parents[2]


def _fields(model) -> dict[str, object]:
    return dict(model.model_fields)


def test_defaults_form_a_valid_policy_with_eight_components():
    policy = LoopPolicy()
    assert tuple(_fields(LoopPolicy))[1:] == COMPONENTS
    assert policy.schema_version == "1"


@pytest.mark.parametrize("module", ["ole/loop_policy.py", "ole/bundle.py", "ole/registry/records.py",
                                    "ole/registry/state.py", "ole/registry/scopes.py", "ole/registry/legacy.py"])
def test_every_record_field_has_a_docstring(module):
    tree = ast.parse((ROOT / module).read_text())
    missing = []
    for cls in (n for n in tree.body if isinstance(n, ast.ClassDef)):
        body = cls.body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) \
                    and node.target.id != "model_config":
                nxt = body[i + 1] if i + 1 < len(body) else None
                if not (isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                        and isinstance(nxt.value.value, str)):
                    missing.append(f"{cls.name}.{node.target.id}")
    assert not missing, missing


def test_docs_explain_every_field():
    doc = (ROOT / "docs/loop-policy.md").read_text()
    for component in COMPONENTS:
        model = type(getattr(LoopPolicy(), component))
        for field in _fields(model):
            assert f"`{component}.{field}`" in doc, f"docs/loop-policy.md does not explain {component}.{field}"


def test_plain_data_lists_fill_tuple_fields():
    policy = validate_data(LoopPolicy, {"planning": {"phases": ["tuning", "confirmation"]}})
    assert policy.planning.phases == ("tuning", "confirmation")


@pytest.mark.parametrize("data, where", [
    ({"schema_version": 1}, "schema_version"),
    ({"schema_version": "2"}, "schema_version"),
    ({"memory": {"carry_lessons": "yes"}}, "memory.carry_lessons"),
    ({"memory": {"top_k_programs": True}}, "memory.top_k_programs"),
    ({"memory": {"top_k_programs": 2.5}}, "memory.top_k_programs"),
    ({"action": {"step_size": 9.0}}, "action.step_size"),
    ({"action": {"step_size": "0.3"}}, "action.step_size"),
    ({"action": {"index_selection": "random"}}, "action.index_selection"),
    ({"planning": {"phases": ["design"]}}, "planning.phases"),
    ({"planning": {"phases": []}}, "planning"),  # one meaning: [] was tuning to both agents, all budget
    ({"planning": {"phases": ["tuning", "tuning"]}}, "planning"),  # to synthesis in the budget split;
    ({"planning": {"phases": ["confirmation", "synthesis"]}}, "planning"),  # the LLM agent read the order
    ({"observation": {"summary_fields": ["status", "secret"]}}, "observation"),
    ({"observation": {"summary_fields": ["status"]}}, "observation"),
    ({"budget": {"synthesis_fraction": 0.7, "confirmation_fraction": 0.5}}, "budget"),
    ({"stopping": {"mode": "spend_all", "patience": 3}}, "stopping.patience"),
    ({"verifcation": {}}, "verifcation"),
])
def test_bad_values_name_the_field_and_the_value(data, where):
    with pytest.raises(ValidationError) as info:
        validate_data(LoopPolicy, data, source="p.yaml")
    assert info.value.message.startswith(f"p.yaml: {where}")


def test_policy_is_frozen():
    policy = LoopPolicy()
    with pytest.raises(Exception):
        policy.action.step_size = 1.0
