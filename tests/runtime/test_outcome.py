"""A leg's outcome and the run record's changes it writes (both engines use the one mapping)."""

from __future__ import annotations

from typing import Any

import pytest

from nbdurable._errors import LimitExceededError, ModelError
from nbdurable.runtime._limits import ModelRetry
from nbdurable.runtime._outcome import (
    CLIENT_TOOL_REASON,
    LegFailed,
    LegOutcome,
    NeedsAttention,
    RunTimedOut,
    after_model_error,
    ended_by,
    record_changes,
)

# The Temporal workflow passes these dicts to its ``finish_leg`` local activity:
# recorded histories hold them, so their keys and their order are pinned here.
CASES: list[tuple[LegOutcome, dict[str, Any]]] = [
    (
        LegOutcome.completed("done"),
        {
            "state": "completed",
            "result_text": "done",
            "verdicts": {},
            "rerun_tool_calls": [],
            "model_attempts": 0,
            "error": None,
        },
    ),
    (
        LegOutcome.waiting_approval(),
        {"state": "waiting_approval", "verdicts": {}, "rerun_tool_calls": []},
    ),
    (
        LegOutcome.waiting_client_tool(),
        {"state": "needs_attention", "verdicts": {}, "reason": CLIENT_TOOL_REASON},
    ),
    (LegOutcome.needs_attention("a human"), {"state": "needs_attention", "reason": "a human"}),
    (
        LegOutcome.retry_wait("ModelError: down", 1234),
        {"state": "retry_wait", "error": "ModelError: down", "next_attempt_at": 1234},
    ),
    (LegOutcome.timed_out(), {"state": "failed", "reason": "timeout"}),
    (
        LegOutcome.failed("model_error", "ModelError: down"),
        {"state": "failed", "reason": "model_error", "error": "ModelError: down"},
    ),
    (LegOutcome.cancelled(), {"state": "cancelled", "reason": "cancelled"}),
    (LegOutcome.released(), {"state": "pending"}),
    (LegOutcome.superseded(), {}),
]


@pytest.mark.parametrize(("outcome", "changes"), CASES, ids=[c[0].kind for c in CASES])
def test_record_changes(outcome: LegOutcome, changes: dict[str, Any]) -> None:
    written = record_changes(outcome)
    assert written.changes() == changes
    assert outcome.state == changes.get("state")


def test_exceptions_carry_their_outcome() -> None:
    assert ended_by(NeedsAttention("why")) == LegOutcome.needs_attention("why")
    assert ended_by(RunTimedOut()) == LegOutcome.timed_out()
    assert ended_by(LegFailed("timeout", "late")) == LegOutcome.failed("timeout", "late")
    limit = LimitExceededError("max_operations", 3, 2)
    assert ended_by(limit) == LegOutcome.failed("limit_exceeded", str(limit))
    assert ended_by(ValueError("other")) is None


def test_model_error_retries_until_the_policy_is_used_up() -> None:
    error = ModelError("down")
    policy = ModelRetry(max_attempts=2, initial_delay_ms=100)
    retried = after_model_error(error, policy=policy, retry_if=None, used=1, now=1000)
    assert retried == LegOutcome.retry_wait("ModelError: down", 1100)
    spent = after_model_error(error, policy=policy, retry_if=None, used=2, now=1000)
    assert spent == LegOutcome.failed("model_retries_exhausted", "ModelError: down")
    refused = after_model_error(error, policy=policy, retry_if=lambda e: False, used=0, now=0)
    assert refused == LegOutcome.failed("model_error", "ModelError: down")
    unretried = after_model_error(error, policy=None, retry_if=None, used=0, now=0)
    assert unretried == LegOutcome.failed("model_error", "ModelError: down")
