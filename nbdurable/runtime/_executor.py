"""Executing one claimed run: the loop's driver, journaled finer and fenced."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from .._errors import FencedOutError, LeaseLostError, LimitExceededError, ModelError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._checkpoint_size import CheckpointSize
from ..durable._offload import NowaitDelegate, offload
from ..durable.store import Capability, RunStore, RuntimeStore, SessionStore, supports
from ..events._model import delta_event
from ..events._writer import DEFAULT_FLUSH_INTERVAL, EventWriter
from ..loop._driver import Driver
from ..loop._effects import CallModel, Effect, ExecuteTools, ToolInvocation, ToolOutcome
from ..loop._model_stream import DeltaPart
from ..loop._options import LoopOptions
from ..loop._start import LegStart
from ..messages import ToolResultPart
from ..models._base import ModelResponse
from ..runs import RunPatch, RuntimeRun, ToolIntent, describe_holder, process_gone
from ..tracing import LEG_KEY
from ._agent import Agent
from ._late_results import Unrecorded, completed, lost_lease_result, record_late_results
from ._limits import ModelRetry, payload_bytes
from ._outcome import LegOutcome, ModelAttemptFailed, NeedsAttention, RunTimedOut
from ._step_commit import StepRiders

if TYPE_CHECKING:
    from ._seam import LegServices

__all__ = ["ModelAttemptFailed", "NeedsAttention", "RunContext", "RunTimedOut", "RuntimeDriver"]


@dataclass
class RunContext(NowaitDelegate):
    """What one execution of a claimed run knows and persists.

    Attributes:
        runtime: The runtime executing it.
        agent: The registration it runs under.
        record: The latest run record this owner wrote or read.
        intents: Tool intents by call id, as of the claim.
        stop: How the owner decided to end the execution it stops (cancelled,
            timed out, released at shutdown, or superseded by another owner).
        lease_owner: The lease holder this execution runs under (the embedded
            engine's claim); None where the engine keeps no lease (Temporal):
            then ownership is the fencing token alone.
        lease_lost: Set once this execution learned that another owner has the run.
        draining: Set when the engine drains (the worker is stopping): no new model
            or tool call starts; the calls in flight finish.
        held: Set once a call was held back by the drain.
        calls: The model and tool calls in flight, by key, as log labels.
        riders: The leg's writes waiting for a shared commit (on a store with
            ``rt_commit``), written at the latest when the leg ends.
        unrecorded: Tool outcomes no write made durable yet: kept as late
            results if this execution turns out to have lost the run.
    """

    runtime: LegServices
    agent: Agent
    record: RuntimeRun
    intents: dict[str, ToolIntent] = field(default_factory=dict)
    stop: LegOutcome | None = None
    lease_owner: str | None = None
    lease_lost: bool = False
    draining: bool = False
    held: bool = False
    calls: dict[str, str] = field(default_factory=dict)
    riders: StepRiders | None = None
    unrecorded: Unrecorded = field(default_factory=Unrecorded)

    # One store call each, then this owner's copy of the record.
    nowait_methods: ClassVar[frozenset[str]] = frozenset(
        {"keep_lease_fresh", "update", "count_operation"}
    )

    @property
    def store(self) -> RuntimeStore:
        """The runtime's store."""
        return self.runtime.runtime_store

    def nowait_store(self) -> object:
        """The runtime's store (its retrying view)."""
        return self.store

    @property
    def retry_policy(self) -> ModelRetry | None:
        """The model retry policy saved with the run (later registrations do not change it)."""
        saved = self.record.retry_policy
        return None if saved is None else ModelRetry(**saved)

    @property
    def fence(self) -> int:
        """The fencing token this owner holds for the run."""
        return self.record.fence

    def ensure_owner(self) -> None:
        """Confirm against the store that this execution still owns the run.

        Renews the lease (fenced: it succeeds only while the run's fencing token
        and lease holder are still this execution's), so after it returns the
        lease has its full length ahead. Safe from any thread: the store call is
        a short synchronous one, like every write of the runtime.

        Raises:
            LeaseLostError: Another owner took the run over.
        """
        run_id = self.record.run_id
        if self.lease_lost or (self.stop is not None and self.stop.kind == "superseded"):
            self.lease_lost = True
            raise LeaseLostError(run_id)
        if self.lease_owner is None:
            current = self.store.rt_get(run_id)
            held = current is not None and current.fence == self.fence
        else:
            until = self.runtime.now() + self.runtime.lease_ms
            held = self.store.rt_renew(run_id, self.lease_owner, self.fence, until)
            if held:
                self.record = RunPatch(lease_expires_at=until).apply(self.record)
        if not held:
            self.lease_lost = True
            raise LeaseLostError(run_id)

    def keep_lease_fresh(self) -> None:
        """Before a tool starts: renew the lease when less than half of it is left.

        The lease keeper renews it every third of its length, unless the event
        loop was blocked (a sync tool, a long computation): then a tool could
        start under a lease about to lapse. The fenced intent write just before
        confirmed the ownership itself.

        Raises:
            LeaseLostError: Another owner took the run over.
        """
        if self.lease_fresh():
            return
        self.ensure_owner()

    def lease_fresh(self) -> bool:
        """Whether :meth:`keep_lease_fresh` has nothing to do (no store call: ask it first)."""
        if self.lease_owner is None:
            return True  # no lease (Temporal): the fencing token is the ownership
        expires = self.record.lease_expires_at  # as of the last fenced write
        return expires is not None and expires - self.runtime.now() >= self.runtime.lease_ms // 2

    async def before_call(self) -> None:
        """Hold a new model or tool call while the engine drains, until it hands the run back.

        The engine cancels the held execution once no call of it is in flight
        (the leg ends ``released``): the calls that finished are journaled, and
        the next owner continues from them.
        """
        if self.draining:
            self.held = True
            await asyncio.get_running_loop().create_future()  # only cancelled

    @contextlib.contextmanager
    def in_flight(self, key: str, label: str) -> Iterator[None]:
        """Mark a model or tool call as running (a drain that ends now cuts it)."""
        self.calls[key] = label
        try:
            yield
        finally:
            self.calls.pop(key, None)

    def update(self, patch: RunPatch) -> RuntimeRun:
        """A fenced write of the run record."""
        patch = RunPatch(updated_at=self.runtime.now()) | patch
        self.record = self.store.rt_update(self.record.run_id, patch, fence=self.fence)
        return self.record

    def check_deadline(self) -> None:
        """Raise :class:`RunTimedOut` once the run's deadline has passed."""
        deadline = self.record.deadline_at
        if deadline is not None and self.runtime.now() >= deadline:
            raise RunTimedOut("the run's timeout passed")

    def count_operation(self, also: RunPatch | None = None) -> None:
        """Count one model or tool call (``max_operations``), persisted before it starts."""
        self.update(self.operation_changes(also))

    def operation_changes(self, also: RunPatch | None = None) -> RunPatch:
        """The record changes that count one more call, checked against the deadline and limit.

        Raises:
            RunTimedOut: The run's deadline passed.
            LimitExceededError: ``max_operations``.
        """
        self.check_deadline()
        used = self.record.operations + 1
        limit = self.runtime.limits.max_operations
        if used > limit:
            raise LimitExceededError("max_operations", used, limit)
        counted = RunPatch(operations=used, updated_at=self.runtime.now())
        return counted | also if also else counted

    def settle(self, record: RuntimeRun) -> None:
        """Take the record a combined write returned (this owner's copy and the mirror)."""
        # The lease this owner renewed meanwhile is in the store too: the record is current.
        self.record = record
        mirror = self.runtime.mirror
        if mirror is not None:
            mirror.put(record)


class RuntimeDriver(Driver):
    """The loop's driver with the runtime's journal: fenced writes, intents, model journal.

    Implements the hooks of :class:`~nbdurable.loop.Driver` for a claimed run.

    Args:
        options: The leg's options.
        start: Where the leg starts.
        context: The execution it belongs to (record, intents, fencing token).
        store: Where checkpoints and events go.
        streaming: Call models with ``stream()`` when they have it.
        flush_interval: Longest wait, in seconds, before buffered events are written.
        journal_lacks_from: A step from which the journal is known to hold no
            response (the caller saw it lack an earlier one): not read from there on.
    """

    def __init__(
        self,
        options: LoopOptions,
        start: LegStart,
        *,
        context: RunContext,
        store: SessionStore | None = None,
        streaming: bool = False,
        flush_interval: float = DEFAULT_FLUSH_INTERVAL,
        journal_lacks_from: int | None = None,
    ) -> None:
        super().__init__(
            options,
            start,
            store=store,
            streaming=streaming,
            flush_interval=flush_interval,
            # The runtime's store retry: one budget per outage across all its calls.
            store_retry=getattr(context.runtime, "store_retry", None),
        )
        self.context = context
        self.owner_check = context.ensure_owner
        self._checkpoint_size = CheckpointSize()  # the payload limit without re-encoding
        self._trace_context: dict[str, str] | None = None
        # Set when the leg starts (leg_started): its writes then share commits.
        self.riders: StepRiders | None = None
        self._leg_riders: StepRiders | None = None
        store = context.runtime.store
        committer = (
            store if isinstance(store, RunStore) and supports(store, Capability.COMMIT) else None
        )
        if (
            self.events is not None
            and committer is not None
            and start.run_id == context.record.run_id
        ):
            self._leg_riders = StepRiders(
                self.events.store,
                committer,
                context.record.run_id,
                context.fence,
                context.settle,
                getattr(context.runtime, "store_retry", None),
                recorded=context.unrecorded.recorded,
            )
        self._staged: str | None = None  # the call counted with the flush before the tools
        # The first step the journal lacked (or a caller knows it lacks).
        self._journal_missed: int | None = journal_lacks_from
        if self.events is not None:
            self.events.fence = context.fence
            self.events.strict = True  # a store gone past the retry budget stops the engine
            # The owner writes the run's terminal event after its final state.
            self.events.defer_terminal = True

    async def leg_started(self, events: EventWriter, *, retried: bool = False) -> None:
        """The leg's start; the first leg after ``retry()`` says so (then the mark is cleared)."""
        if self._leg_riders is not None:
            # A leg's event writes take the riders along. Only a whole leg: a driver
            # used for one call (Temporal's activities) has no later write to ride.
            self.riders = self._leg_riders
            events.store = self.riders
            self.context.riders = self.riders  # the leg's end writes what still waits
        retried = retried or self.context.record.retried
        await super().leg_started(events, retried=retried)
        changes = RunPatch(retried=False) if retried else RunPatch()
        if self._trace_context is not None:
            changes |= RunPatch(trace_context=self._trace_context)
            self._trace_context = None
        if changes:
            try:
                await offload(self.context.update, changes)
            except Exception:
                if retried:
                    raise
                # A trace is never worth a run: the leg goes on untracked.
                self.options.deps.logger.warning(
                    "nbdurable: storing the trace context of %s failed",
                    self.context.record.run_id,
                )

    def trace_agent_name(self) -> str | None:
        """A run's leg is named after its agent; a sub-agent's after its own name."""
        if self.options.agent_path:
            return super().trace_agent_name()
        return self.context.agent.id

    def trace_attributes(self) -> dict[str, Any]:
        """The run record's identity: session, agent version, fence; a takeover's mark."""
        record = self.context.record
        attributes: dict[str, Any] = {
            "gen_ai.conversation.id": record.session_id,
            "gen_ai.agent.version": record.agent_version,
            "nbdurable.fence": record.fence,
            "nbdurable.retried": record.retried,
        }
        if record.previous_owner is not None:  # claimed from an owner whose lease lapsed
            attributes["nbdurable.taken_over"] = True
        return attributes

    def trace_model_attributes(self) -> dict[str, Any]:
        """The attempt of this model operation (1 for the first) and the retry budget."""
        record = self.context.record
        policy = self.context.retry_policy
        attributes: dict[str, Any] = {"nbdurable.attempt": max(record.model_attempts, 1)}
        if policy is not None:
            attributes["nbdurable.retry.max_attempts"] = policy.max_attempts
        return attributes

    def trace_tool_attributes(self, tool_name: str) -> dict[str, Any]:
        """The tool's recovery policy after a crash."""
        return {"nbdurable.tool.recovery": self.context.agent.recovery_of(tool_name)}

    def trace_parent(self) -> dict[str, str] | None:
        """The trace context stored with the run (the submitter's, or the first leg's)."""
        return None if self.options.agent_path else self.context.record.trace_context

    def trace_leg_started(self, traceparent: str) -> None:
        """Store the leg's span: the run's trace if it had none, and the next leg's link."""
        if self.options.agent_path:
            return
        stored = dict(self.context.record.trace_context or {"traceparent": traceparent})
        stored[LEG_KEY] = traceparent
        # Written by leg_started, which follows at once: this hook is synchronous
        # and a store call here would run on the event loop.
        self._trace_context = stored

    async def save_checkpoint(self, checkpoint: AgentCheckpoint) -> None:
        """Refuse a checkpoint after the deadline or over ``max_payload_bytes``, then save it.

        Raises:
            RunTimedOut: The run's deadline passed.
            LimitExceededError: The checkpoint is over ``max_payload_bytes``.
        """
        context = self.context
        context.check_deadline()
        size = self._checkpoint_size.measure(checkpoint, self.history_extends(checkpoint))
        context.runtime.limits.check_payload(size)
        await super().save_checkpoint(checkpoint)
        context.unrecorded.recorded_in(checkpoint)  # its tool results are durable now

    async def call_model(self, effect: CallModel) -> ModelResponse:
        """One model attempt, journaled: a journaled response of the step is reused.

        The attempt is counted (``max_operations``, the retry policy's attempts)
        before it starts; its response is journaled before it is returned.

        Raises:
            ModelAttemptFailed: The model's error (what model retry retries).
            LimitExceededError: ``max_operations`` or a delta over ``max_payload_bytes``.
            RunTimedOut: The run's deadline passed.
        """
        context = self.context
        run_id = context.record.run_id
        missed = self._journal_missed
        if missed is None or effect.step_index < missed:
            journaled = await offload(context.store.rt_journaled, run_id, effect.step_index)
            if journaled is not None:
                # A crash during this step's tools: the response is reused, not asked again.
                return ModelResponse.model_validate_json(journaled)
            # Legs journal their steps in order, each reusing the entries it meets,
            # so the journal holds a run's steps up to some step and none after it:
            # past the first step it lacks, the leg need not read it again.
            self._journal_missed = effect.step_index
        policy = context.retry_policy
        attempts = context.record.model_attempts
        if policy is not None and attempts >= policy.max_attempts:
            raise ModelAttemptFailed(ModelError("model retries exhausted"))
        await context.before_call()
        # Counted before it starts: a crash uses the attempt up.
        if self.riders is not None:
            # With the previous step's completed intents, which wait for this write.
            changes = context.operation_changes(RunPatch(model_attempts=attempts + 1))
            await offload(self.riders.commit_retried, changes=changes)
        else:
            await offload(context.count_operation, RunPatch(model_attempts=attempts + 1))
        try:
            with context.in_flight(
                f"model {effect.step_index}", f"model call of step {effect.step_index}"
            ):
                response = await super().call_model(effect)
        except LimitExceededError:
            raise  # a limit is not the model's error: not retried
        except Exception as exc:
            raise ModelAttemptFailed(exc) from exc
        if self.riders is not None:
            # Rides the next write of the events (before a gate, an approver or a
            # tool acts on the response, or with the step's checkpoint).
            self.riders.journal(
                effect.step_index,
                response.model_dump_json(),
                RunPatch(model_attempts=0, updated_at=context.runtime.now()),
            )
            return response
        await offload(
            context.store.rt_journal,
            run_id,
            effect.step_index,
            response.model_dump_json(),
            fence=context.fence,
        )
        await offload(context.update, RunPatch(model_attempts=0))
        return response

    async def handle(self, effect: Effect) -> Any:
        """Perform one effect; the first call of a batch of tools is counted with its flush."""
        riders = self.riders
        if not isinstance(effect, ExecuteTools) or riders is None or not effect.invocations:
            return await super().handle(effect)
        self._stage_first_call(effect.invocations[0], effect.step_index)
        try:
            return await super().handle(effect)
        finally:
            # A staged call the tools' flush did not write (the leg ended first)
            # never started: it leaves no intent behind.
            riders.unstage()
            self._staged = None

    def _stage_first_call(self, invocation: ToolInvocation, step_index: int) -> None:
        # The flush before the tools (the calls' events) then also writes this call's
        # count and started intent: the batch's first call starts right after it, as
        # it would after its own write. A call run_tool would treat otherwise (a
        # prior intent, a drain, a limit) is left to run_tool.
        context = self.context
        call = invocation.call
        if call.tool_call_id in context.intents or context.draining:
            return
        try:
            changes = context.operation_changes()
        except (LimitExceededError, RunTimedOut):
            return  # run_tool raises it, as without the staging
        assert self.riders is not None
        self.riders.stage(changes, self._intent(call.tool_call_id, call.tool_name, step_index))
        self._staged = call.tool_call_id

    def _intent(self, tool_call_id: str, tool_name: str, step_index: int) -> ToolIntent:
        return ToolIntent(
            run_id=self.context.record.run_id,
            tool_call_id=tool_call_id,
            tool_name=tool_name,
            step_index=step_index,
            state="started",
        )

    def check_delta(self, part: DeltaPart) -> None:
        """``max_payload_bytes`` applies to each persisted delta on its own."""
        _kind, payload = delta_event(part)
        size = payload_bytes(json.dumps(payload, separators=(",", ":"), ensure_ascii=False))
        self.context.runtime.limits.check_payload(size)

    async def run_tool(self, invocation: ToolInvocation, step_index: int) -> ToolOutcome:
        """Run one call under its intent record (fenced); a completed intent's result is reused.

        Raises:
            NeedsAttention: A ``manual`` call was interrupted and no ``retry()`` allowed it.
            FencedOutError: Another owner took the run over.
            LimitExceededError: ``max_operations``.
            RunTimedOut: The run's deadline passed.
        """
        context = self.context
        call = invocation.call
        if self._staged is not None and self._staged == call.tool_call_id:
            # Counted and its intent written with the flush before the tools (or
            # now, if that flush had nothing to write): the call has started.
            self._staged = None
            intent = self._intent(call.tool_call_id, call.tool_name, step_index)
            assert self.riders is not None
            if self.riders.pending:
                await offload(self.riders.commit_retried)
            return await self._run_started(invocation, step_index, intent)
        prior = context.intents.get(call.tool_call_id)
        if prior is not None and prior.state == "completed" and prior.result is not None:
            return ToolOutcome(result=ToolResultPart.model_validate(prior.result))
        await context.before_call()  # before a manual call's retry permission is used up
        if prior is not None and prior.state == "started":
            policy = context.agent.recovery_of(call.tool_name)
            rerun = call.tool_call_id in context.record.rerun_tool_calls
            if policy == "manual" and rerun:
                # The permission covers one execution: used up before the tool starts,
                # so a crash during this run of it asks the human again.
                remaining = [c for c in context.record.rerun_tool_calls if c != call.tool_call_id]
                await offload(context.update, RunPatch(rerun_tool_calls=remaining))
            if policy == "manual" and not rerun:
                raise NeedsAttention(interrupted_reason(call.tool_name, call.tool_call_id, context))
        intent = self._intent(call.tool_call_id, call.tool_name, step_index)
        # Right before the tool starts: the intent write is fenced (refused once
        # another owner took the run over), and the lease has half its length ahead.
        if self.riders is not None:
            # The call's count and its intent in one write (with any riders still waiting).
            changes = context.operation_changes()
            await offload(self.riders.commit_retried, changes=changes, intents=[intent])
        else:
            await offload(context.count_operation)
            await offload(context.store.rt_intent, intent, fence=context.fence)
        return await self._run_started(invocation, step_index, intent)

    async def _run_started(
        self, invocation: ToolInvocation, step_index: int, intent: ToolIntent
    ) -> ToolOutcome:
        """Run a call whose started intent is written; record its result (fenced)."""
        context = self.context
        call = invocation.call
        try:
            if not context.lease_fresh():  # no trip to a store thread for nothing
                await offload(context.keep_lease_fresh)
        except LeaseLostError as exc:
            raise FencedOutError(str(exc)) from exc
        try:
            with context.in_flight(
                call.tool_call_id, f"tool {call.tool_name!r} (call {call.tool_call_id})"
            ):
                outcome = await super().run_tool(invocation, step_index)
        except asyncio.CancelledError:
            if context.stop is not None and context.stop.kind == "superseded":
                # Stopped mid-call by the lease keeper: this owner was alive and running it.
                context.unrecorded.cut_off(intent, context.runtime.now())
            raise
        done = None
        if outcome.result is not None:
            done = completed(intent, outcome.result)
            if not lost_lease_result(outcome.result):
                # Until a write makes it durable: a late result if the run turns out lost.
                context.unrecorded.produced(done, context.runtime.now())
        if context.lease_lost:
            # The tool (or a sub-agent's) learned from ensure_owner() that another
            # owner has the run: its outcome is void and this execution stops.
            raise FencedOutError(f"run {context.record.run_id!r} is owned by another runtime now")
        if done is not None:
            # Fenced: refused in the write's own transaction when another owner
            # took the run over meanwhile, so a stale result is never recorded.
            if self.riders is not None and not context.draining:
                # The step's checkpoint holds the result: the intent rides the next
                # commit. A crash before that checkpoint leaves the call started, as
                # a crash during the tool does, and its recovery policy decides.
                self.riders.complete(done)
            else:
                # Draining: the leg ends before the checkpoint, the next owner reuses it.
                try:
                    await offload(context.store.rt_intent, done, fence=context.fence)
                except FencedOutError:
                    await offload(record_late_results, context)  # kept, not recorded as its result
                    raise
                context.unrecorded.recorded([call.tool_call_id])
            context.intents[call.tool_call_id] = done
        return outcome


def interrupted_reason(tool_name: str, tool_call_id: str, context: RunContext) -> str:
    """Why an interrupted ``manual`` call waits for a human, and whether it may run twice.

    When this owner took the run over from one whose lease lapsed while its
    process may still be alive (paused, cut off, or on another host), that owner
    may still be executing the call: retrying may run the tool twice.
    """
    reason = (
        f"tool {tool_name!r} (call {tool_call_id}) was interrupted and its recovery is "
        "manual: retry() runs it again, deny() settles it"
    )
    previous = context.record.previous_owner
    if previous is None or process_gone(previous):
        return reason
    return (
        f"{reason}; its previous owner {describe_holder(previous)} lost its lease mid-call "
        "and may still have been executing it, so the tool may have run twice: check its "
        "effect before retry()"
    )
