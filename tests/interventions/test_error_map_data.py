"""The error → recovery map is data: the shipped map, user extensions, and clear errors for bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.errors import UserFacingError
from interventions.error_map import ErrorMap, load_error_map, parse_error_map, resolve_error_map
from interventions.recovery_tools import recovery_tool_objects, with_recovery_tools
from tools import tool

pytestmark = pytest.mark.core  # needs no extra: also run on the bare core install (.ci/core_check.sh)

SEEN = ["vague_reference", "ambiguous_interpretation", "unsupported_operation", "unsupported_parameter"]


@tool
def escalate_to_billing(summary: str) -> str:
    """Send the case to the billing team.

    Args:
        summary: What the user needs.
    """
    return "escalated"


def test_shipped_map_has_the_six_types_and_their_recovery_tools() -> None:
    emap = load_error_map()
    assert set(emap.labels) == {*SEEN, "contradiction", "unsupported_domain"}
    for name in ("vague_reference", "ambiguous_interpretation", "contradiction"):
        assert emap.category_of(name) == "ambiguous_request"
        assert emap.recovery_tool(name) == "report_internal_error"
    for name in ("unsupported_operation", "unsupported_parameter", "unsupported_domain"):
        assert emap.category_of(name) == "unsupported_request"
        assert emap.recovery_tool(name) == "transfer_to_human_agents"
    plan = emap.recovery("unsupported_parameter", user_turn="Cancel it because   the price dropped.").plan
    assert plan.startswith("The user is asking for something I cannot do (unsupported parameter)")
    assert '"Cancel it because the price dropped."' in plan and "transfer_to_human_agents" in plan
    assert "  " not in plan


def test_long_user_turns_are_shortened_in_the_plan() -> None:
    plan = load_error_map().recovery("contradiction", user_turn="x" * 1000).plan
    assert "x" * 239 + "…" in plan and "x" * 241 not in plan


def test_users_add_an_error_type_with_its_own_recovery_tool(tmp_path: Path) -> None:
    extra = tmp_path / "billing.yaml"
    extra.write_text(
        """
categories:
  billing_request:
    description: Money matters that a billing specialist handles.
    recovery_tool: escalate_to_billing
    recovery_tool_ref: "test_error_map_data:escalate_to_billing"
    plan: "This is a billing matter ({title}). I will call {recovery_tool}."
error_types:
  disputed_charge:
    category: billing_request
    title: disputed charge
    description: The user disputes a charge on their card.
""",
        encoding="utf-8",
    )
    emap = load_error_map().merged(load_error_map(extra))
    assert emap.recovery("disputed_charge").plan == "This is a billing matter (disputed charge). I will call escalate_to_billing."
    assert "vague_reference" in emap.labels
    names = [t.name for t in recovery_tool_objects(emap)]
    assert names == ["report_internal_error", "transfer_to_human_agents", "escalate_to_billing"]
    assert "escalate_to_billing" in [t.name for t in with_recovery_tools([], emap)]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"categories": {}, "error_types": {"x": {"category": "nope", "title": "x", "description": "d"}}}, "unknown category 'nope'"),
        ({"categories": {"c": {"description": "d", "recovery_tool": "t", "plan": "{oops}"}},
          "error_types": {"x": {"category": "c", "title": "x", "description": "d"}}}, "unknown placeholder"),
        ({"categories": {"c": {"description": "d", "recovery_tool": "t", "plan": "{title"}},
          "error_types": {"x": {"category": "c", "title": "x", "description": "d"}}}, "malformed placeholder"),
        ({"categories": {"c": {"description": "d", "recovery_tool": "t", "plan": "p"}},
          "error_types": {"none": {"category": "c", "title": "x", "description": "d"}}}, "reserved"),
        ({"categories": {"c": {"description": "d", "recovery_tool": "t", "plan": "p"}},
          "error_types": {"Bad Name": {"category": "c", "title": "x", "description": "d"}}}, "lower_snake_case"),
        ({"categories": {"c": {"description": "d", "recovery_tool": "t", "plan": "p", "colour": 1}},
          "error_types": {"x": {"category": "c", "title": "x", "description": "d"}}}, "categories.c.colour"),
        ({"categories": {}, "error_types": {}}, "error_types"),
        (["not", "a", "mapping"], "expected a mapping"),
    ],
)
def test_bad_maps_are_rejected_with_the_field_named(data: object, message: str) -> None:
    with pytest.raises(UserFacingError, match=message):
        parse_error_map(data, "my-map.yaml")


def test_unreadable_files_are_user_errors(tmp_path: Path) -> None:
    with pytest.raises(UserFacingError, match="cannot read error map"):
        load_error_map(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("categories: [unclosed", encoding="utf-8")
    with pytest.raises(UserFacingError, match="not valid YAML"):
        load_error_map(bad)


def test_recovery_tool_refs_that_do_not_resolve_are_user_errors() -> None:
    emap = ErrorMap.model_validate(
        {
            "categories": {"c": {"description": "d", "recovery_tool": "ghost", "plan": "p", "recovery_tool_ref": "nowhere_module:ghost"}},
            "error_types": {"x": {"category": "c", "title": "x", "description": "d"}},
        }
    )
    with pytest.raises(UserFacingError, match="cannot load"):
        recovery_tool_objects(emap)
    unknown = ErrorMap.model_validate(
        {"categories": {"c": {"description": "d", "recovery_tool": "ghost", "plan": "p"}},
         "error_types": {"x": {"category": "c", "title": "x", "description": "d"}}}
    )
    with pytest.raises(UserFacingError, match="not built in"):
        recovery_tool_objects(unknown)


def test_resolve_accepts_maps_dicts_paths_and_none() -> None:
    default = resolve_error_map(None)
    assert resolve_error_map(default) is default
    assert resolve_error_map(default.model_dump()).labels == default.labels
