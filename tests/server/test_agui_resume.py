"""Resume entries as verdicts, without a server: what each entry means, and what is refused
before anything is recorded; stream positions as a reconnecting client sends them."""

from __future__ import annotations

from typing import Any

import pytest

from nbdurable import ConfigurationError
from nbdurable.server._agui_resume import CANCELLED_REASON, Answer, answers_of
from nbdurable.server._agui_routes import position_of

RUN = "run-r"


def _body(*entries: dict[str, Any]) -> dict[str, Any]:
    return {"threadId": RUN, "runId": "x", "messages": [], "resume": list(entries)}


def _entry(payload: Any = None, status: str = "resolved", **more: Any) -> dict[str, Any]:
    entry = {"interruptId": "ap1", "status": status, **more}
    return entry if payload is None else {**entry, "payload": payload}


def test_each_entry_is_one_verdict() -> None:
    token = {"metadata": {"nbdurable": {"token": "v1.t.m"}}}
    cases = {
        "approve": (_entry({"approved": True}, **token), Answer("ap1", True, "v1.t.m")),
        "edit": (
            _entry({"approved": True, "editedArgs": {"n": 2}}, **token),
            Answer("ap1", True, "v1.t.m", arguments={"n": 2}),
        ),
        "deny": (
            _entry({"approved": False, "reason": "no"}),
            Answer("ap1", False, None, reason="no"),
        ),
        "reply": (
            _entry({"approved": False, "reply": "use b"}),
            Answer("ap1", False, None, reply="use b"),
        ),
        "cancelled": (_entry(status="cancelled"), Answer("ap1", False, None, CANCELLED_REASON)),
    }
    for name, (entry, expected) in cases.items():
        assert answers_of(_body(entry), RUN) == [expected], name


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"resume": []}, "not an AG-UI RunAgentInput"),
        ({**_body(_entry({"approved": True})), "threadId": "run-other"}, "is not this run"),
        (_body(), "no resume entries"),
        (_body(_entry({"approved": True}), _entry({"approved": False})), "answered twice"),
        (_body(_entry(["approved"])), 'boolean "approved"'),
        (_body(_entry({"approved": "yes"})), 'boolean "approved"'),
        (_body(_entry({"approved": False, "editedArgs": {}})), "editedArgs is an object"),
        (_body(_entry({"approved": True, "editedArgs": [1]})), "editedArgs is an object"),
        (_body(_entry({"approved": True, "reply": "x"})), "reply is a string"),
        (_body(_entry({"approved": True, "reason": "x"})), "reason is a string"),
        (_body(_entry({"approved": True, "extra": 1})), "unknown payload keys"),
        (
            _body(_entry({"approved": True}, metadata={"nbdurable": {"token": 7}})),
            "token is a string",
        ),
    ],
)
def test_a_malformed_resume_is_refused_whole(body: dict[str, Any], says: str) -> None:
    with pytest.raises(ConfigurationError, match=says):
        answers_of(body, RUN)


def test_positions_as_a_client_sends_them() -> None:
    assert position_of(0, None) == (0, 10**9)
    assert position_of(7, None) == (7, 10**9)  # ?after=7: every event of entry 7 seen
    assert position_of(0, "9.1") == (9, 1)
    assert position_of(3, "9") == (9, 10**9)  # the header wins over ?after=
    assert position_of(0, " 0012.003 ") == (12, 3)
    for bad in ("x", "9.", ".1", "9.1.2", "9:1", "-1", "9.\u00b2", "1" * 20):
        with pytest.raises(ConfigurationError, match="Last-Event-ID"):
            position_of(0, bad)
