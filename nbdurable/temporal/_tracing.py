"""Traces of runs on Temporal: the SDK's interceptor, and nbdurable's spans joined to it.

Workflow code replays, so it makes no spans of its own; only Temporal's
:class:`~temporalio.contrib.opentelemetry.TracingInterceptor` (replay-safe)
makes the workflow's. nbdurable's spans are made by activities, in the worker:

- ``begin_leg`` starts the leg's ``invoke_agent`` span (a child of the run's
  stored trace context, linked to the leg before) and stores the span's
  context in the run record, as the embedded engine does;
- ``call_model`` and ``run_tool`` read it from the record and make their
  ``chat`` and ``execute_tool`` spans its children, whichever worker runs them;
- ``finish_leg`` ends the span with how the leg ended.

The span is kept in this process's memory from ``begin_leg`` to
``finish_leg`` (both local activities, in the workflow's worker). A worker
lost mid-leg never exports that leg's span, as a process lost mid-leg on the
embedded engine does; the next leg's span still joins the run's trace.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from .. import tracing as _tracing
from ..durable._checkpoint import AgentCheckpoint
from ..messages import Usage
from ..runs import RuntimeRun
from ..runtime._agent import Agent
from ..tracing import LEG_KEY

__all__ = ["begin_leg_span", "client_interceptors", "end_leg_span", "joined", "started_under"]

_OPEN: dict[str, tuple[Any, Usage]] = {}
"""The open ``invoke_agent`` span of each run whose leg this worker began, and the
run's usage when it began."""

_STATUS = {"completed": "completed", "waiting_approval": "suspended"}


def client_interceptors() -> list[Any]:
    """Temporal's tracing interceptor when tracing is on (for ``Client.connect``), else none.

    Given to the client, it serves that client's workers too.
    """
    hooks = _tracing.HOOKS
    if hooks is None:
        return []
    from temporalio.contrib.opentelemetry import TracingInterceptor

    provider = hooks.provider
    if provider is None:
        return [TracingInterceptor()]
    return [TracingInterceptor(provider.get_tracer("temporalio.contrib.opentelemetry"))]


def started_under(record: RuntimeRun) -> contextlib.AbstractContextManager[None]:
    """Make the run's stored parent current while its workflow is started or signalled.

    The SDK's client span (and so the workflow's and the activities' spans) then
    lands in the run's trace.
    """
    stored = record.trace_context
    if not stored or "traceparent" not in stored:
        return _current(None)
    return _current({k: v for k, v in stored.items() if k != LEG_KEY})


def joined(record: RuntimeRun) -> contextlib.AbstractContextManager[None]:
    """Make the run's current leg span the parent of the spans made in this block."""
    leg = (record.trace_context or {}).get(LEG_KEY)
    return _current(None if leg is None else {"traceparent": leg})


@contextlib.contextmanager
def _current(carrier: dict[str, str] | None) -> Iterator[None]:
    """Make the span context ``carrier`` holds current in the block (with tracing on)."""
    hooks = _tracing.HOOKS
    if hooks is None or carrier is None:
        yield
        return
    from opentelemetry import context as otel_context

    token = otel_context.attach(hooks.extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


def begin_leg_span(
    record: RuntimeRun, agent: Agent | None, checkpoint: AgentCheckpoint | None
) -> dict[str, str] | None:
    """Start the leg's ``invoke_agent`` span; the run's trace context to store, or None.

    Its parent is the run's stored context (the submitter's span, or the first
    leg's); a first leg without one is a child of the current span (the SDK's
    activity span, when the interceptor is on), so the run's trace is the workflow's.
    """
    hooks = _tracing.HOOKS
    if hooks is None:
        return None
    from opentelemetry import trace

    model = agent.model if agent is not None else None
    step_index = 0 if checkpoint is None else checkpoint.step_index + 1
    attributes: dict[str, Any] = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": record.agent_id,
        "gen_ai.agent.version": record.agent_version,
        "gen_ai.conversation.id": record.session_id,
        "gen_ai.provider.name": _tracing.provider_name(model) if model is not None else None,
        "gen_ai.request.model": _tracing.model_name(model) if model is not None else None,
        "nbdurable.run_id": record.run_id,
        "nbdurable.step_index": step_index,
        "nbdurable.resumed": step_index > 0,
        "nbdurable.retried": record.retried,
        "nbdurable.fence": record.fence,
        "nbdurable.engine": "temporal",
    }
    if record.verdicts:
        attributes["nbdurable.approval.responses"] = len(record.verdicts)
    parent, links = hooks.leg_parent(record.trace_context)
    span = hooks.tracer.start_span(
        f"invoke_agent {record.agent_id}",
        context=parent,
        kind=trace.SpanKind.INTERNAL,
        attributes=_tracing.clean_attributes(attributes),
        links=links,
    )
    for verdict in record.verdicts.values():
        span.add_event(
            "nbdurable.approval.answered",
            {
                "nbdurable.approval.id": verdict.approval_id,
                "nbdurable.approval.approved": verdict.approved,
            },
        )
    previous = _OPEN.pop(record.run_id, None)
    if previous is not None:  # a leg begun here that never finished (its claim is recovered)
        previous[0].end()
    usage = checkpoint.usage if checkpoint is not None else Usage()
    _OPEN[record.run_id] = (span, usage)
    own = hooks.inject(span)
    if own is None:
        return None
    stored = dict(record.trace_context or {"traceparent": own["traceparent"]})
    stored[LEG_KEY] = own["traceparent"]
    return stored


def end_leg_span(run_id: str, changes: dict[str, Any], checkpoint: AgentCheckpoint | None) -> None:
    """End the leg's span (if this worker began it) with the state the leg left."""
    entry = _OPEN.pop(run_id, None)
    hooks = _tracing.HOOKS
    if entry is None or hooks is None:
        if entry is not None:
            entry[0].end()
        return
    from opentelemetry import trace

    span, before = entry
    state = str(changes.get("state", ""))
    span.set_attribute("nbdurable.status", _STATUS.get(state, state))
    if changes.get("reason"):
        span.set_attribute("nbdurable.finish_reason", str(changes["reason"]))
    if checkpoint is not None:
        usage = checkpoint.usage
        span.set_attribute("gen_ai.usage.input_tokens", usage.input_tokens - before.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", usage.output_tokens - before.output_tokens)
        span.set_attribute("nbdurable.last_step_index", checkpoint.step_index)
        if state == "waiting_approval":
            _tracing.mark_approval_waits(span, checkpoint.pending_approvals)
    if state == "failed":
        span.set_attribute("error.type", str(changes.get("reason") or "error"))
        span.set_status(trace.Status(trace.StatusCode.ERROR, str(changes.get("error") or "")))
    span.end()
