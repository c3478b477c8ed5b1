"""The journaled steps of a run's leg on Restate: every touch of the store, the model, the tools.

Each method is the body of one ``ctx.run`` of the leg's handler
(:mod:`nbdurable.restate._handler`): Restate records its result in the
invocation's journal, so a leg re-executed after its endpoint died replays the
finished steps from the journal and runs only the unfinished one. What a step
did is mirrored into the nbdurable store (run records, checkpoints, events,
tool intents, the model journal), as Temporal's activities do, so a run executed
on Restate reads exactly like one the embedded engine executed. A step answers
with a plain dict (the journal holds JSON): a decision for the handler
(``retry_after``, ``needs_attention``, ``failed``) is a value, never an
exception, because Restate retries a step that raises.
"""

from __future__ import annotations

import contextlib
from typing import Any

from .._errors import FencedOutError, LimitExceededError
from ..durable._offload import offload
from ..loop._driver import Driver
from ..loop._effects import CallModel, ToolInvocation
from ..loop._start import LegStart
from ..messages import ToolCallPart, ToolResultPart
from ..models._base import ModelRequest
from ..runs import (
    RunPatch,
    RuntimeRun,
    definition_matches,
    mismatch_reason,
    of_engine,
    unclaimable_by_definition,
    unserved_reason,
)
from ..runtime import _lifecycle as lifecycle
from ..runtime._agent import Agent
from ..runtime._executor import RunContext, RuntimeDriver
from ..runtime._legs import first_messages
from ..runtime._legs_outside import (
    claim_pending,
    loop_options_at,
    write_outbox,
    write_started,
)
from ..runtime._outcome import (
    ModelAttemptFailed,
    NeedsAttention,
    RunTimedOut,
    after_model_error,
    record_changes,
)
from ..runtime._seam import RunServices
from ._config import RESTATE

__all__ = ["BoundSteps", "LegSteps", "owner_of"]


def owner_of(run_id: str) -> str:
    """The lease owner a Restate leg records: the run's virtual object, on any endpoint."""
    return f"restate:{run_id}"


def _final(error: Exception) -> dict[str, Any]:
    """A run-ending limit or timeout, as a step's answer."""
    reason = "timeout" if isinstance(error, RunTimedOut) else "limit_exceeded"
    return {"failed": [reason, str(error)]}


class BoundSteps:
    """Steps bound to the endpoint's runtime (store, agents, tasks, signer)."""

    def __init__(self, runtime: RunServices) -> None:
        self.runtime = runtime

    def _record(self, run_id: str) -> RuntimeRun:
        record = self.runtime.runtime_store.rt_get(run_id)
        if record is None:
            raise LookupError(f"no run {run_id!r} in the store")
        return record


class LegSteps(BoundSteps):
    """The steps of an agent run's leg."""

    # -- a leg begins and ends --------------------------------------------------------

    async def begin(self, run_id: str) -> dict[str, Any]:
        """Take a pending run (a fenced compare-and-set to ``running``).

        Returns the record, the latest checkpoint and, for a first leg, the
        messages it starts from, with the clock (``now``); or ``{"final":
        state}`` (finished already, or its deadline passed); or ``{"elsewhere":
        reason}`` (this endpoint does not serve the run's definition: the run is
        left pending, its waiting reason recorded); or ``{}`` (a run of another
        engine, or a duplicate invocation: another leg decided already).
        """
        runtime = self.runtime
        record = await offload(self._record, run_id)
        owner = owner_of(run_id)
        if not record.finished and not of_engine(record, RESTATE):
            runtime.deps.logger.warning(
                "nbdurable: run %s was submitted to the %s engine: Restate leaves it alone",
                run_id,
                record.engine,
            )
            return {}
        definitions = runtime.registry.definitions()
        if not record.finished and definition_matches(record, definitions) is not True:
            return {"elsewhere": await offload(self._wait_elsewhere, record)}
        retried = record.retried
        if record.state == "pending":
            claimed = await claim_pending(runtime, record, owner)
            if claimed is None:
                return {"final": "failed"}
            record = claimed
        elif record.finished:
            return {"final": record.state}
        elif record.state != "running" or record.lease_owner != owner:
            return {}
        checkpoint = await offload(runtime.store.load, run_id)
        messages: list[Any] = []
        if checkpoint is None:
            messages = [m.model_dump(mode="json") for m in await first_messages(runtime, record)]
        await write_started(self.runtime, run_id, checkpoint, retried=retried)
        return {
            "record": record.model_dump(mode="json"),
            "checkpoint": None if checkpoint is None else checkpoint.model_dump(mode="json"),
            "messages": messages,
            "now": runtime.now(),
        }

    def _wait_elsewhere(self, record: RuntimeRun) -> str:
        """Record why this endpoint leaves the run (fenced); the reason."""
        definitions = self.runtime.registry.definitions()
        waiting = unclaimable_by_definition(record, self.runtime.now(), definitions, engine=RESTATE)
        if waiting is not None:
            with contextlib.suppress(FencedOutError):  # another endpoint took it meanwhile
                self.runtime.runtime_store.rt_update(
                    record.run_id,
                    RunPatch(waiting_reason=waiting.waiting_reason),
                    fence=record.fence,
                )
        if definition_matches(record, definitions) is None:
            return unserved_reason(record)
        return mismatch_reason(record, definitions)

    async def begin_child(self, log: str) -> dict[str, Any]:
        """A sub-agent starts or resumes: its checkpoint (under ``log``), if any."""
        checkpoint = await offload(self.runtime.store.load, log)
        await write_started(self.runtime, log, checkpoint)
        return {"checkpoint": None if checkpoint is None else checkpoint.model_dump(mode="json")}

    async def mirror(self, entries: list[dict[str, Any]], run_log: str | None = None) -> Any:
        """Write outbox entries in order; the run's terminal payload is returned (held back)."""
        return await write_outbox(self.runtime, entries, run_log)

    async def finish(
        self, run_id: str, entries: list[dict[str, Any]], changes: dict[str, Any], fence: int | None
    ) -> None:
        """Write the leg's outbox and its run-state change.

        A run finished meanwhile (cancelled from a client) keeps its state; with
        the leg's ``fence``, a leg whose claim is gone writes nothing.
        """
        if fence is not None:
            current = await offload(self._record, run_id)
            if current.fence != fence or current.lease_owner != owner_of(run_id):
                return
        finish = await self.mirror(entries, run_log=run_id)
        record = await offload(self._record, run_id)
        if record.finished:
            return
        patch = RunPatch(lease_owner=None) | RunPatch(**changes)
        await offload(self.runtime.set_state, run_id, patch, finish=finish)
        if patch.state:
            lifecycle.left(record, patch.state, patch.reason or None)

    # -- the model and the tools ---------------------------------------------------

    def _agent(self, record: RuntimeRun) -> Agent:
        agent = self.runtime.registry.get(record.agent_id, record.agent_version)
        if agent is None:
            raise LookupError(unserved_reason(record))
        return agent

    async def model(
        self, scope: dict[str, Any], step_index: int, request: ModelRequest
    ) -> dict[str, Any]:
        """One model attempt, its deltas and attempt events persisted.

        Returns ``{"response": json}``; ``{"retry_after": ms}`` when the run's
        policy retries the failed attempt (the run is in ``retry_wait``; the
        handler sleeps durably); ``{"failed": [reason, message]}`` when it ends
        the run (a sub-agent's error: ``model_error``, the parent's tool result).
        A response journaled in the store for the step is reused.
        """
        runtime = self.runtime
        record = await offload(self._record, scope["run_id"])
        agent = self._agent(record)
        options = loop_options_at(self.runtime, agent, scope["path"], record)
        effect = CallModel(step_index, options.model, request)
        log = scope["log"]
        driver: Driver
        if scope["path"]:  # a sub-agent's call: no journal, an error is the parent's tool result
            start = LegStart(messages=(), run_id=log, durable=log is not None)
            driver = Driver(
                options,
                start,
                store=runtime.store if log is not None else None,
                streaming=record.stream,
            )
            try:
                response = await driver.call_model(effect)
            except Exception as exc:
                return {"failed": ["model_error", f"{type(exc).__name__}: {exc}"]}
            finally:
                if driver.events is not None:
                    await driver.events.close()
            return {"response": response.model_dump_json()}
        if record.state == "retry_wait":
            running = RunPatch(state="running", next_attempt_at=None)
            record = await offload(runtime.set_state, record.run_id, running)
            lifecycle.claimed(record, resumed=False)
        context = RunContext(runtime=runtime, agent=agent, record=record)
        driver = RuntimeDriver(
            options,
            LegStart(messages=(), run_id=record.run_id, durable=True),
            store=runtime.store,
            streaming=record.stream,
            flush_interval=runtime.flush_interval,
            context=context,
        )
        try:
            response = await driver.call_model(effect)
        except ModelAttemptFailed as failed:
            return await offload(self._model_failure, context, failed)
        except (LimitExceededError, RunTimedOut) as exc:
            return _final(exc)
        except FencedOutError as exc:
            return {"failed": ["error", str(exc)]}
        finally:
            if driver.events is not None:
                await driver.events.close()
        return {"response": response.model_dump_json()}

    def _model_failure(self, context: RunContext, failed: ModelAttemptFailed) -> dict[str, Any]:
        """Retried after a delay (``retry_wait``) or final: the embedded engine's rule."""
        record = self._record(context.record.run_id)
        now = self.runtime.now()
        outcome = after_model_error(
            failed.error,
            policy=context.retry_policy,
            retry_if=context.agent.retry_if,
            used=record.model_attempts,
            now=now,
        )
        if outcome.kind != "retry_wait":
            return {"failed": [outcome.reason, outcome.error or ""]}
        assert outcome.next_attempt_at is not None
        self.runtime.set_state(record.run_id, record_changes(outcome))
        lifecycle.left(record, "retry_wait", outcome.reason)
        return {"retry_after": outcome.next_attempt_at - now}

    async def tool(
        self, scope: dict[str, Any], step_index: int, call: dict[str, Any]
    ) -> dict[str, Any]:
        """Run one tool call under its intent record.

        Returns ``{"result": part}``; ``{"needs_attention": why}`` (a ``manual``
        call found interrupted); ``{"failed": [reason, message]}`` (a limit, the
        timeout, a lost claim). A call whose intent completed returns that result.
        """
        record = await offload(self._record, scope["run_id"])
        agent = self._agent(record)
        options = loop_options_at(self.runtime, agent, scope["path"], record)
        part = ToolCallPart.model_validate(call)
        tool = options.tools.get(part.tool_name)
        if tool is None:
            return {"failed": ["error", f"no tool {part.tool_name!r}"]}
        invocation = ToolInvocation(tool=tool, call=part, kwargs=tool.validate_args(part.args))
        driver: Driver
        if scope["path"]:
            log = scope["log"]
            driver = Driver(options, LegStart(messages=(), run_id=log, durable=log is not None))
        else:
            stored = self.runtime.runtime_store.rt_intents(record.run_id)
            intents = {i.tool_call_id: i for i in stored}
            context = RunContext(runtime=self.runtime, agent=agent, record=record, intents=intents)
            start = LegStart(messages=(), run_id=record.run_id, durable=True)
            driver = RuntimeDriver(options, start, context=context)
        try:
            outcome = await driver.run_tool(invocation, step_index)
        except NeedsAttention as exc:
            return {"needs_attention": str(exc)}
        except (LimitExceededError, RunTimedOut) as exc:
            return _final(exc)
        except FencedOutError as exc:
            return {"failed": ["error", str(exc)]}
        result = outcome.result or ToolResultPart(
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            result="The tool gave no result.",
            is_error=True,
        )
        return {"result": result.model_dump(mode="json")}
