"""Late results as people read them, and the pure rule every store applies."""

from __future__ import annotations

from nbdurable.runs import (
    MAX_LATE_RESULTS,
    LateResult,
    RuntimeRun,
    ToolIntent,
    late_result_line,
    lease_holder,
    undecided_late_results,
    with_late_result,
)

NOW = 1_800_000_000_000


def _late(outcome: str = "result", is_error: bool = False, call: str = "call_1_0") -> LateResult:
    result = {"tool_call_id": call, "tool_name": "pay", "result": "x" * 300, "is_error": is_error}
    return LateResult(
        tool_call_id=call,
        tool_name="pay",
        step_index=0,
        fence=1,
        owner=lease_holder("rt-old"),
        at=NOW,
        outcome=outcome,  # type: ignore[arg-type]
        result=None if outcome == "cut_off" else result,
    )


def test_a_line_names_the_call_the_owner_the_time_and_what_it_gave() -> None:
    line = late_result_line(_late())
    assert line.startswith("tool 'pay' (call call_1_0) already ran once: on rt-old (pid ")
    assert "2027-01-15 08:00:00Z" in line and "result 'xxx" in line and line.endswith("…'")
    assert "error 'xxx" in late_result_line(_late(is_error=True))
    cut = late_result_line(_late("cut_off"))
    assert "was still running on rt-old" in cut and "unknown" in cut
    anonymous = late_result_line(_late().model_copy(update={"owner": None}))
    assert "on the owner of fence 1" in anonymous


def test_the_rule_adds_once_keeps_the_newest_and_changes_nothing_else() -> None:
    run = RuntimeRun(
        run_id="r", agent_id="a", agent_version="1", session_id="s", prompt='"hi"',
        state="needs_attention", created_at=NOW, updated_at=NOW + 5, fence=2,
    )  # fmt: skip
    added = with_late_result(run, _late(), now=NOW)
    assert added is not None and added.late_results == [_late()]
    assert added.updated_at == NOW + 5  # never back in time
    assert added.model_copy(update={"late_results": []}) == run
    assert with_late_result(added, _late(), now=NOW + 9) is None
    for i in range(MAX_LATE_RESULTS + 1):
        added = with_late_result(added, _late(call=f"c{i}"), now=NOW) or added
    assert len(added.late_results) == MAX_LATE_RESULTS
    assert added.late_results[-1].tool_call_id == f"c{MAX_LATE_RESULTS}"
    started = ToolIntent(
        run_id="r", tool_call_id="c3", tool_name="pay", step_index=0, state="started"
    )
    done = started.model_copy(update={"tool_call_id": "c4", "state": "completed"})
    assert [r.tool_call_id for r in undecided_late_results(added, [started, done])] == ["c3"]
