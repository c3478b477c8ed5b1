"""A run's step in one activity whose store writes share commits, as an embedded leg's do.

The ``model_step`` activity calls the run's model and then runs the step's calls
that need no human (:mod:`nbdurable.temporal._prefetch`). Each write of the
embedded engine's :class:`~nbdurable.runtime._executor.RuntimeDriver` made on its
own is a transaction; here they ride :class:`~nbdurable.runtime._step_commit.StepRiders`
as an embedded leg's do (on a store with ``rt_commit``), so a steady step makes
two commits in the activity where it made seven:

1. before the model call: its count (``operations``, ``model_attempts``: a
   crash uses the attempt up), with the previous step's completed intents;
2. before the first call: the journal entry, the attempt reset, the attempt's
   events, and the first call's count and ``started`` intent (the response is
   durable before anything acts on it, the call's start before it runs; a
   later call of a batch writes its own, with the completed intents waiting).

The calls' last ``completed`` intents are not written here when the workflow
carries them (``carries``): it has their results (this activity's), and hands
them to the next step's activity, whose first commit writes them, or to its
leg's end. The step's checkpoint holds the results by then; a crash before, as
a crash during a call, leaves the intent ``started``, and the retried activity
leaves the call to ``run_tool``, whose recovery policy decides (early calls are
``safe``), as on the embedded engine where completed intents ride the next
commit too. A workflow of an older release carries nothing: its intents are
written at the activity's end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..durable._offload import offload
from ..durable.store import Capability, RunStore, supports
from ..loop._effects import ExecuteTools, ToolInvocation, ToolOutcome
from ..loop._options import LoopOptions
from ..loop._start import LegStart
from ..messages import ToolResultPart
from ..runs import ToolIntent
from ..runtime._executor import RunContext, RuntimeDriver
from ..runtime._step_commit import StepRiders
from ._drain import draining

__all__ = ["StepDriver"]


class StepDriver(RuntimeDriver):
    """The run's own driver for one ``model_step`` (or ``call_model``) activity.

    Its writes share commits (:class:`StepRiders`) on a store with ``rt_commit``;
    on any other store it writes each change on its own, as before.

    Args:
        options: The loop's options.
        context: The run's execution (record, agent, fencing token).
        heartbeats: Wraps each tool call (heartbeats and the drain's bookkeeping).
        flush_interval: Longest wait, in seconds, before buffered events are written.
        carried: The previous step's completed intents the workflow carried here:
            written with this activity's first commit.
        carries: The workflow carries this step's completed intents to the next
            step's activity (or its leg's end): they are not written here.
        journal_lacks_from: The step from which the journal holds no response
            (an earlier model call of the leg was answered): not read.
    """

    def __init__(
        self,
        options: LoopOptions,
        context: RunContext,
        heartbeats: Any,
        *,
        flush_interval: float,
        carried: Sequence[ToolIntent] = (),
        carries: bool = False,
        journal_lacks_from: int | None = None,
    ) -> None:
        runtime = context.runtime
        record = context.record
        super().__init__(
            options,
            LegStart(messages=(), run_id=record.run_id, durable=True),
            store=runtime.store,
            streaming=record.stream,
            flush_interval=flush_interval,
            context=context,
            journal_lacks_from=journal_lacks_from,
        )
        self._heartbeats = heartbeats
        self.carries = carries
        self.stopped = False
        # The carried intents not written yet (a step whose response the journal
        # had makes no commit before its calls: finish() writes them then).
        self._carried = {intent.tool_call_id: intent for intent in carried}
        store = runtime.store
        if (
            self.events is not None
            and isinstance(store, RunStore)
            and supports(store, Capability.COMMIT)
        ):
            riders = StepRiders(
                self.events.store,
                store,
                record.run_id,
                context.fence,
                context.settle,
                getattr(runtime, "store_retry", None),
                recorded=self._recorded,
            )
            self.riders = riders
            self.events.store = riders
            context.riders = riders
            for intent in carried:
                riders.complete(intent)

    @property
    def answered_now(self) -> bool:
        """Whether the last model call asked the model, not the journal (its response waits).

        False after a response the journal had (a step run again): its calls
        may have intents already, which :meth:`run_early` then reads. Without
        shared commits it cannot tell: False (the intents are read, the
        journal is read at every step).
        """
        return self.riders is not None and self.riders.pending

    async def run_early(
        self, invocations: list[ToolInvocation], step_index: int, max_concurrency: int | None
    ) -> dict[str, ToolResultPart]:
        """Run the step's unattended calls as the machine would; the results by call id.

        A call that raised (a limit, the deadline, a lost claim) or met the
        drain stops the calls not started yet: the workflow runs those, and the
        one that raised, as ``run_tool`` activities, which decide what the
        error means for the run.
        """
        if not invocations or draining():
            return {}
        context = self.context
        if not self.answered_now:
            intents = await _read_intents(context)
            context.intents.update(intents)
        effect = ExecuteTools(
            step_index=step_index, invocations=tuple(invocations), max_concurrency=max_concurrency
        )
        outcomes = await self.handle(effect)
        return {
            invocation.call.tool_call_id: outcome.result
            for invocation, outcome in zip(invocations, outcomes, strict=True)
            if outcome is not None and outcome.result is not None
        }

    async def run_tool(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        """One early call, under its heartbeats; none once one raised or the worker drains."""
        if self.stopped or draining():
            # Not started: the call goes to run_tool, on another worker when this one drains.
            self.stopped = True
            return ToolOutcome()
        call = invocation.call
        label = f"tool {call.tool_name!r} (call {call.tool_call_id})"
        try:
            async with self._heartbeats(run_id=self.context.record.run_id, call=label):
                return await super().run_tool(invocation, step_index)
        except Exception:
            self.stopped = True
            return ToolOutcome()

    async def finish(self) -> None:
        """Write the events left and whatever must not wait, together.

        The calls' completed intents wait when the workflow :attr:`carries` them
        to the next step (the step's checkpoint holds their results first). On
        a store without ``rt_commit`` each call wrote its own at once.
        """
        if self.events is not None:
            await self.events.close()  # takes the waiting writes along, if any
        riders = self.riders
        if riders is None:
            return  # each call wrote its completed intent at once (nothing was carried)
        if riders.pending or self._carried or (riders.waiting and not self.carries):
            await offload(riders.flush)

    def _recorded(self, call_ids: Sequence[str]) -> None:
        """A commit wrote these calls' completed intents."""
        for call_id in call_ids:
            self._carried.pop(call_id, None)
        self.context.unrecorded.recorded(call_ids)


async def _read_intents(context: RunContext) -> dict[str, Any]:
    found = await offload(context.store.rt_intents, context.record.run_id)
    return {intent.tool_call_id: intent for intent in found}
