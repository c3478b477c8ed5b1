"""Standing approvals as signed records: rules, signature, run binding, expiry, revocation."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.runs import (
    RunGrants,
    RuntimeRun,
    normalize_match,
    rule_matches,
    sign_grant,
    verify_grant,
    with_grant_change,
)

SECRET = "grant-test-secret"
NOW = 1_800_000_000_000


class Clock:
    def __init__(self) -> None:
        self.t = NOW

    def now(self) -> int:
        return self.t


def _grant(signer: nd.ApprovalSigner, **over: Any) -> Any:
    fields: dict[str, Any] = {
        "grant_id": "grant_1",
        "run_id": "run_1",
        "tool": "drop_table",
        "expires_at": NOW + 60_000,
        "match": {"name": "stg_*"},
        "granted_by": "ana",
        "via": "api",
    }
    return sign_grant(signer, **{**fields, **over})


def _reforge(token: str, change: dict[str, Any]) -> str:
    """The token with its payload edited and its old MAC kept (what tampering looks like)."""
    prefix, segment, mac = token.split(".")
    payload = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
    payload.update(change)
    raw = json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()
    return f"{prefix}.{base64.urlsafe_b64encode(raw).rstrip(b'=').decode()}.{mac}"


def test_match_syntax_normalizes_to_glob_prefix_or_equals() -> None:
    assert normalize_match({"name": "stg_*"}) == {"name": {"glob": "stg_*"}}
    assert normalize_match({"name": {"prefix": "stg_"}}) == {"name": {"prefix": "stg_"}}
    assert normalize_match({"rows": {"equals": [1, 2]}}) == {"rows": {"equals": [1, 2]}}
    assert normalize_match({"force": False, "n": 3}) == {
        "force": {"equals": False},
        "n": {"equals": 3},
    }
    assert normalize_match(None) == {}


@pytest.mark.parametrize(
    "bad",
    [
        {"name": {"regex": "x"}},
        {"name": {"prefix": 3}},
        {"name": {"glob": "a", "prefix": "b"}},
        {"name": ["stg_*"]},
        {"": "x"},
        {"x": {"equals": float("nan")}},
        ["name"],
    ],
)
def test_a_rule_outside_the_syntax_is_a_configuration_error(bad: Any) -> None:
    with pytest.raises(nd.ConfigurationError):
        normalize_match(bad)


@pytest.mark.parametrize(
    ("rule", "value", "expected"),
    [
        ({"glob": "stg_*"}, "stg_orders", True),
        ({"glob": "stg_*"}, "prod_orders", False),
        ({"glob": "stg_?"}, "stg_ab", False),
        ({"glob": "STG_*"}, "stg_orders", False),  # case sensitive
        ({"glob": "*"}, 3, False),  # globs only match strings
        ({"prefix": "stg_"}, "stg_", True),
        ({"prefix": "stg_"}, "st", False),
        ({"prefix": "stg_"}, None, False),
        ({"equals": "x"}, "x", True),
        ({"equals": "x"}, "xy", False),
        ({"equals": 1}, 1.0, True),
        ({"equals": 1}, True, False),  # JSON true is not 1
        ({"equals": {"a": [1]}}, {"a": [1]}, True),
        ({"equals": None}, None, True),
    ],
)
def test_rules_match_per_argument(rule: dict[str, Any], value: Any, expected: bool) -> None:
    assert rule_matches(rule, value) is expected


def test_a_signed_grant_verifies_and_covers_matching_calls_until_it_expires() -> None:
    signer = nd.ApprovalSigner(SECRET, clock=Clock())
    grant = _grant(signer)
    assert grant.id == grant.grant_id == "grant_1"
    again = verify_grant(signer, grant.token, run_id="run_1")
    assert again == grant
    assert grant.covers("drop_table", {"name": "stg_x"}, (), NOW)
    assert not grant.covers("drop_table", {"name": "prod_x"}, (), NOW)
    assert not grant.covers("drop_table", {}, (), NOW)  # a missing argument never matches
    assert not grant.covers("delete_row", {"name": "stg_x"}, (), NOW)
    assert not grant.covers("drop_table", {"name": "stg_x"}, ("coder",), NOW)
    assert grant.covers("drop_table", {"name": "stg_x"}, (), NOW + 59_999)
    assert not grant.covers("drop_table", {"name": "stg_x"}, (), NOW + 60_000)
    # the event says what it covers, never the token
    assert "token" not in grant.event_payload()
    assert grant.token not in json.dumps(grant.event_payload())


def test_a_sub_agents_grant_covers_only_that_agent_path() -> None:
    signer = nd.ApprovalSigner(SECRET)
    grant = _grant(signer, agent_path=("coder",), match=None)
    assert grant.covers("drop_table", {"name": "any"}, ("coder",), NOW)
    assert not grant.covers("drop_table", {"name": "any"}, (), NOW)
    assert not grant.covers("drop_table", {"name": "any"}, ("coder", "helper"), NOW)


def test_tampered_forged_and_foreign_tokens_are_not_grants() -> None:
    signer = nd.ApprovalSigner(SECRET)
    grant = _grant(signer)
    for change in (
        {"match": {}},
        {"expires_at": NOW + 10**9},
        {"tool": "delete_everything"},
        {"agent_path": ["coder"]},
        {"run_id": "run_2"},
    ):
        assert verify_grant(signer, _reforge(grant.token, change), run_id="run_1") is None
    # another run's grant, a token signed with another key, an approval request's token
    assert verify_grant(signer, grant.token, run_id="run_2") is None
    other = _grant(nd.ApprovalSigner("another secret"))
    assert verify_grant(signer, other.token, run_id="run_1") is None
    request = nd.ToolApprovalRequest(
        approval_id="a1", tool_call_id="c1", tool_name="drop_table", input={"name": "stg_x"}
    )
    assert verify_grant(signer, signer.sign(request, run_id="run_1"), run_id="run_1") is None
    # a payload signed with the right key but of the wrong shape
    bad = signer.sign_payload({"kind": "grant", "run_id": "run_1", "grant_id": "g"})
    assert verify_grant(signer, bad, run_id="run_1") is None
    for garbage in (None, "", "v1.x.y", 42):
        assert verify_grant(signer, garbage, run_id="run_1") is None


def test_run_grants_skip_revoked_expired_and_forged_tokens() -> None:
    clock = Clock()
    signer = nd.ApprovalSigner(SECRET, clock=clock)
    first = _grant(signer, grant_id="g1", expires_at=NOW + 1000)
    second = _grant(signer, grant_id="g2", expires_at=NOW + 5000)
    forged = _reforge(_grant(signer, grant_id="g3").token, {"match": {}})
    grants = RunGrants((forged, first.token, second.token))

    def covering(arguments: dict[str, Any], now: int) -> str | None:
        found = grants.covering(
            signer,
            run_id="run_1",
            tool="drop_table",
            arguments=arguments,
            agent_path=(),
            now=now,
        )
        return found.grant_id if found else None

    assert covering({"name": "stg_a"}, NOW) == "g1"
    assert covering({"name": "prod"}, NOW) is None  # the forged match-all is ignored
    assert covering({"name": "stg_a"}, NOW + 1000) == "g2"
    assert covering({"name": "stg_a"}, NOW + 5000) is None
    grants = RunGrants(grants.tokens, frozenset({"g1"}))
    assert covering({"name": "stg_a"}, NOW) == "g2"
    assert [g.grant_id for g in grants.verified(signer, "run_1")] == ["g1", "g2"]
    assert RunGrants.of(grants.stored()) == grants
    assert RunGrants.of(None) == RunGrants()


def test_grant_changes_on_a_record_add_once_and_revoke_once() -> None:
    signer = nd.ApprovalSigner(SECRET)
    record = RuntimeRun(
        run_id="run_1",
        agent_id="a",
        agent_version="1",
        session_id="s",
        prompt='"hi"',
        state="running",
        created_at=NOW,
        updated_at=NOW,
    )
    assert record.grants is None
    token = _grant(signer).token
    added = with_grant_change(record, add=token, now=NOW + 1)
    assert added is not None
    assert added.grants == {"tokens": [token], "revoked": []}
    assert added.updated_at == NOW + 1
    assert with_grant_change(added, add=token, now=NOW + 2) is None
    revoked = with_grant_change(added, revoke="grant_1", now=NOW + 3)
    assert revoked is not None and revoked.grants == {"tokens": [token], "revoked": ["grant_1"]}
    assert with_grant_change(revoked, revoke="grant_1", now=NOW + 4) is None
    # the field rides the record's JSON
    assert RuntimeRun.model_validate_json(revoked.model_dump_json()) == revoked
