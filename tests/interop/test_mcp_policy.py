"""MCP tool policies from annotations and settings, and the shallow argument check
(no server needed: the SDK's own annotation type)."""

from __future__ import annotations

import pytest
from mcp_types import ToolAnnotations

import nbdurable as nd
from nbdurable.mcp._policy import annotated_policy, check_settings, pick, selected
from nbdurable.mcp._schema import shallow_validator
from nbdurable.tools import ToolArgumentsError


@pytest.mark.parametrize(
    ("hints", "trusted", "expected"),
    [
        ({"read_only_hint": True}, False, (True, "manual")),  # untrusted: hints ignored
        (None, True, (True, "manual")),  # no annotations: the spec's defaults
        ({}, True, (True, "manual")),  # destructive unless told otherwise
        ({"read_only_hint": True, "destructive_hint": True}, True, (False, "safe")),
        ({"destructive_hint": True, "idempotent_hint": True}, True, (True, "manual")),
        ({"destructive_hint": False, "idempotent_hint": True}, True, (False, "idempotent")),
        ({"destructive_hint": False}, True, (False, "manual")),
        ({"idempotent_hint": True}, True, (True, "manual")),
    ],
)
def test_annotations_set_approval_and_recovery_only_for_trusted_servers(
    hints: dict[str, bool] | None, trusted: bool, expected: tuple[bool, str]
) -> None:
    annotations = None if hints is None else ToolAnnotations(**hints)
    assert annotated_policy(annotations, trusted=trusted) == expected


def test_exact_names_beat_patterns_and_the_first_matching_pattern_wins() -> None:
    settings = {"read_*": "safe", "*": "manual", "read_secret": "idempotent"}
    assert pick(settings, "read_secret") == (True, "idempotent")
    assert pick(settings, "read_file") == (True, "safe")
    assert pick(settings, "write_file") == (True, "manual")
    assert pick({"a": 1}, "b") == (False, None)
    assert pick(None, "b") == (False, None)
    assert selected(None, "x") and selected("x", "x") and not selected("x", "xy")
    assert selected(["a", "b*"], "bc") and not selected(["a", "b*"], "cb")


def test_settings_are_checked_against_the_listing() -> None:
    names = ["read_file", "write_file"]
    check_settings(names, include="*_file", approval={"read_*": False}, recovery=None, server="s")
    with pytest.raises(nd.ConfigurationError, match="include= names 'read'"):
        check_settings(names, include=["read"], approval=None, recovery=None, server="s")
    with pytest.raises(nd.ConfigurationError, match="'never'"):
        check_settings(names, include=None, approval=None, recovery={"*": "never"}, server="s")


def test_the_shallow_check_refuses_missing_mistyped_and_unknown_arguments() -> None:
    schema = {
        "type": "object",
        "properties": {
            "n": {"type": "integer"},
            "ratio": {"type": "number"},
            "tag": {"type": ["string", "null"]},
            "flag": {"type": "boolean"},
            "anything": {"anyOf": [{"type": "string"}, {"type": "integer"}]},
        },
        "required": ["n"],
        "additionalProperties": False,
    }
    check = shallow_validator("t", schema)
    ok = {"n": 3, "ratio": 1, "tag": None, "flag": False, "anything": [1]}
    assert check(ok) == ok  # unchanged, and anyOf is left to the server
    assert check({"n": 2.0}) == {"n": 2.0}  # JSON has no separate integer type
    with pytest.raises(ToolArgumentsError) as info:
        check({"ratio": True, "tag": 5, "flag": "yes", "extra": 1})
    message = str(info.value)
    for fragment in ("n: a required", "ratio: True", "tag: 5", "flag: 'yes'", "extra: not a"):
        assert fragment in message
    open_schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    assert shallow_validator("t", open_schema)({"n": 1, "extra": 2}) == {"n": 1, "extra": 2}
