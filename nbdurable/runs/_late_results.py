"""Late results: what an owner that had lost a run did with a tool call anyway.

A worker paused past its lease (SIGSTOP, a suspended VM, a long pause of its
process) loses the run to another worker, which finds the ``manual`` call
interrupted and parks the run in ``needs_attention``. When the paused worker
wakes it may finish the call it was running (unless the tool checked
``ctx.ensure_owner()`` first): the effect happened, yet every fenced write of
the stale owner is refused, so the call's result is never recorded. Without a
trace the human would retry blind, and the effect would happen twice.

So a fenced-out owner keeps what it knows, append-only: the run record's
``late_results`` (:class:`~nbdurable.runs.LateResult`) and a
``tool_late_result`` event. That write is not fenced, by design: it never
changes the run's state, fence, lease, intents, checkpoints or history, only
adds a note, so a stale owner may make it. Stores apply :func:`with_late_result`
inside the transaction that writes the record (``rt_late_result``), as they do
for grants and notices, so concurrent writers all land.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime

from ._leases import describe_holder
from ._patch import RunPatch
from ._record import LateResult, RuntimeRun, ToolIntent

__all__ = [
    "MAX_LATE_RESULTS",
    "late_result_line",
    "late_results_of",
    "undecided_late_results",
    "with_late_result",
]

MAX_LATE_RESULTS = 20
"""How many late results a run record keeps (the newest): each is a rare event, and
the record is read often."""


def with_late_result(run: RuntimeRun, late: LateResult, *, now: int) -> RuntimeRun | None:
    """``run`` with ``late`` added; None when it holds it already (same call, same fence).

    A pure function; the run's state, fence, lease and everything else stay as
    they are (``updated_at`` moves, so views that poll it refresh). Only the
    newest :data:`MAX_LATE_RESULTS` are kept.
    """
    if any(
        known.tool_call_id == late.tool_call_id and known.fence == late.fence
        for known in run.late_results
    ):
        return None
    kept = [*run.late_results, late][-MAX_LATE_RESULTS:]
    return RunPatch(late_results=kept, updated_at=max(now, run.updated_at)).apply(run)


def late_results_of(run: RuntimeRun, tool_call_id: str | None = None) -> list[LateResult]:
    """The run's late results, newest last; only those of ``tool_call_id`` when given."""
    return [r for r in run.late_results if tool_call_id is None or r.tool_call_id == tool_call_id]


def undecided_late_results(run: RuntimeRun, intents: Iterable[ToolIntent]) -> list[LateResult]:
    """The late results of calls still interrupted (their intent ``started``).

    What ``retry()`` would run again, and what ``use_late_result`` may settle.
    """
    started = {i.tool_call_id for i in intents if i.state == "started"}
    return [late for late in run.late_results if late.tool_call_id in started]


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _result_text(result: dict[str, object] | None, limit: int = 160) -> str:
    value = None if result is None else result.get("result")
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def late_result_line(late: LateResult) -> str:
    """One sentence for people: which call ran where and when, and what it gave.

    ``explain``, the run's card in a notebook and ``nbdurable runs show`` put it
    before the action that would run the call again.
    """
    where = describe_holder(late.owner) if late.owner else f"the owner of fence {late.fence}"
    call = f"tool {late.tool_name!r} (call {late.tool_call_id})"
    when = _when(late.at)
    if late.outcome == "cut_off":
        return (
            f"{call} was still running on {where} at {when}, after that owner had lost "
            "the run (late); it was stopped there, and whether its effect happened is unknown"
        )
    failed = bool(late.result and late.result.get("is_error"))
    gave = f"{'error' if failed else 'result'} {_result_text(late.result)!r}"
    return (
        f"{call} already ran once: on {where}, finished at {when} after that owner had "
        f"lost the run (late, not recorded as the call's result): {gave}"
    )
