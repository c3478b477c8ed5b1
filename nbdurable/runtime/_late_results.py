"""A fenced-out owner's tool results: kept as late results, never recorded as the call's.

An owner executing a run tracks the results its tools produced until a write
makes them durable (the call's completed intent, or the step's checkpoint).
When it learns that another owner has the run (a refused fenced write, a lease
renewal that failed), what is still unrecorded went nowhere: it is kept on the
run as late results (:mod:`nbdurable.runs`: the record's
``late_results`` and a ``tool_late_result`` event, neither fenced), so the
human deciding the interrupted call sees that it already ran, where, when, and
with what result. A call the owner was still running when it learned it is
kept too, as ``cut_off``: its effect is unknown, but the owner was alive and
executing it after losing the run.

:func:`use_late_result` lets that human settle the interrupted call with the
late result instead of running the tool again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, LateResultUndecidedError, LeaseLostError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._offload import offload
from ..durable.store import notify
from ..events._model import TOOL_LATE_RESULT, NewEvent
from ..messages import ToolResultPart
from ..runs import LateResult, RunPatch, ToolIntent, late_result_line, late_results_of

if TYPE_CHECKING:
    from ._executor import RunContext
    from ._run import Run

__all__ = [
    "Unrecorded",
    "blind_retry_error",
    "completed",
    "lost_lease_result",
    "record_late_results",
    "use_late_result",
]


def completed(intent: ToolIntent, result: ToolResultPart) -> ToolIntent:
    """``intent`` completed with ``result``."""
    return intent.model_copy(
        update={"state": "completed", "result": result.model_dump(mode="json")}
    )


def lost_lease_result(result: ToolResultPart) -> bool:
    """Whether a tool's result is its ``ctx.ensure_owner()`` refusing: it did not act."""
    return result.is_error and str(result.result).startswith(f"{LeaseLostError.__name__}:")


class Unrecorded:
    """The tool outcomes of one execution that no write has made durable yet.

    Thread-safe: tools run on the loop, writes on store threads.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._results: dict[str, tuple[ToolIntent, int]] = {}
        self._cut: dict[str, tuple[ToolIntent, int]] = {}

    def produced(self, intent: ToolIntent, at: int) -> None:
        """A call finished with ``intent``'s result (``completed``) at ``at``."""
        with self._lock:
            self._results[intent.tool_call_id] = (intent, at)

    def cut_off(self, intent: ToolIntent, at: int) -> None:
        """A call was still running when the owner learned it had lost the run."""
        with self._lock:
            if intent.tool_call_id not in self._results:
                self._cut[intent.tool_call_id] = (intent, at)

    def recorded(self, tool_call_ids: Iterable[str]) -> None:
        """These calls' results are durable (their intents, or a checkpoint holding them)."""
        with self._lock:
            for call_id in tool_call_ids:
                self._results.pop(call_id, None)

    def recorded_in(self, checkpoint: AgentCheckpoint) -> None:
        """The results a saved checkpoint holds are durable."""
        with self._lock:
            waiting = set(self._results)
        if not waiting:
            return
        found = []
        for message in reversed(checkpoint.messages):  # a step's results are near the end
            for part in message.tool_results:
                if part.tool_call_id in waiting:
                    found.append(part.tool_call_id)
                    waiting.discard(part.tool_call_id)
            if not waiting:
                break
        self.recorded(found)

    def take(self, fence: int, owner: str | None) -> list[LateResult]:
        """Everything unrecorded, as late results of the owner of ``fence``; then nothing."""
        with self._lock:
            results, cut = self._results, self._cut
            self._results, self._cut = {}, {}

        def late_result(intent: ToolIntent, at: int, **outcome: Any) -> LateResult:
            return LateResult(
                tool_call_id=intent.tool_call_id,
                tool_name=intent.tool_name,
                step_index=intent.step_index,
                fence=fence,
                owner=owner,
                at=at,
                **outcome,
            )

        late = [late_result(i, at, result=i.result) for i, at in results.values()]
        late += [late_result(i, at, outcome="cut_off") for i, at in cut.values()]
        return late


def record_late_results(context: RunContext) -> list[LateResult]:
    """Keep the unrecorded outcomes of a fenced-out execution on its run; the ones kept.

    Called once the execution learned that another owner has the run. Each
    late result is added to the run record (not fenced: nothing else changes)
    and announced by a ``tool_late_result`` event (appended without a fence).
    A failed write is logged: this owner has nothing left to decide.
    """
    runtime = context.runtime
    run_id = context.record.run_id
    late = context.unrecorded.take(context.fence, context.lease_owner or context.record.lease_owner)
    logger = runtime.deps.logger
    kept = []
    for entry in late:
        now = runtime.now()
        try:
            runtime.runtime_store.rt_late_result(run_id, entry, now=now)
            event = NewEvent(
                type=TOOL_LATE_RESULT,
                step_index=entry.step_index,
                payload=entry.model_dump(mode="json"),
                created_at=now,
            )
            runtime.store_retry.call(
                "write an event", runtime.event_store.append_events, run_id, [event]
            )
        except Exception as exc:
            logger.error("nbdurable: keeping a late result of %s failed: %r", run_id, exc)
            continue
        kept.append(entry)
        # the tool's output stays in the record and the event, out of the log
        logger.warning(
            "nbdurable: run %s was lost; tool %r (call %s) kept as a late result (%s)",
            run_id,
            entry.tool_name,
            entry.tool_call_id,
            entry.outcome,
        )
    if kept:
        notify(runtime.store, run_id)
    return kept


def blind_retry_error(
    run_id: str, late: Sequence[LateResult], *, use: str, rerun: str
) -> LateResultUndecidedError:
    """The refusal of a retry that did not say what to do with a late result.

    ``Run.retry()`` raises it in the API's words; a front end that catches it
    says it again in its own (``refused.late`` is what to pass here).

    Args:
        run_id: The run.
        late: Its late results to decide.
        use: How to settle the call with the late result, in the front end's words.
        rerun: How to run the call again anyway.
    """
    lines = "; ".join(late_result_line(entry) for entry in late)
    usable = any(entry.outcome == "result" for entry in late)
    choice = f"settle it with that result ({use}), or " if usable else ""
    return LateResultUndecidedError(
        run_id,
        late,
        f"run {run_id!r} was not retried: {lines}. Retrying runs the call again: "
        f"{choice}run it again anyway ({rerun})",
    )


async def use_late_result(run: Run, tool_call_id: str | None = None) -> LateResult:
    """Settle an interrupted ``manual`` call with its late result, instead of running it again.

    For a run in ``needs_attention`` whose interrupted call already ran on an
    owner that had lost the run (its late result, see
    :attr:`~nbdurable.runs.RuntimeRun.late_results`): that result
    becomes the call's result (its intent is completed with it, fenced by the
    run's current token), and the run goes on from there, as after ``deny()``
    but with the tool's own result. The tool does not run again.

    Args:
        run: The run's handle.
        tool_call_id: The call; may be left out when exactly one interrupted
            call has a late result.

    Returns:
        The late result used.

    Raises:
        ConfigurationError: The run is not in ``needs_attention``, or the call
            is not interrupted, or has no late result with a result (only a
            ``cut_off`` one: its outcome is unknown), or ``tool_call_id`` is
            left out and not exactly one call qualifies.
        FencedOutError: Another owner claimed the run meanwhile.
    """
    runtime = run.runtime
    record = await offload(runtime.runtime_store.rt_get, run.run_id)
    if record is None or record.state != "needs_attention":
        state = "unknown" if record is None else record.state
        raise ConfigurationError(
            f"run {run.run_id!r} is {state}: a late result settles only an interrupted call "
            "of a run in needs_attention"
        )
    intents = await offload(runtime.runtime_store.rt_intents, run.run_id)
    started = {i.tool_call_id: i for i in intents if i.state == "started"}
    usable = [
        late
        for late in late_results_of(record, tool_call_id)
        if late.outcome == "result" and late.result is not None and late.tool_call_id in started
    ]
    calls = {late.tool_call_id for late in usable}
    if not usable or len(calls) > 1:
        which = f"call {tool_call_id!r}" if tool_call_id else "any interrupted call"
        problem = "has no late result" if not usable else "is ambiguous: name the call"
        raise ConfigurationError(
            f"run {run.run_id!r}: {which} {problem} ({_choices(started, record.late_results)})"
        )
    chosen = usable[-1]  # the newest, if two lost owners both finished it
    intent = started[chosen.tool_call_id]
    done = completed(intent, ToolResultPart.model_validate(chosen.result))
    await offload(runtime.runtime_store.rt_intent, done, fence=record.fence)
    pending = RunPatch(state="pending", reason=None)
    await offload(runtime.set_state, run.run_id, pending, fence=record.fence)
    runtime.wake()
    return chosen


def _choices(started: dict[str, ToolIntent], late: Iterable[LateResult]) -> str:
    with_result: dict[str, Any] = {
        r.tool_call_id: r for r in late if r.outcome == "result" and r.tool_call_id in started
    }
    if not with_result:
        return "interrupted: " + (", ".join(sorted(started)) or "none")
    return "calls with a late result: " + ", ".join(sorted(with_result))
