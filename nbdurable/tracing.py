"""OpenTelemetry traces of agent runs (the ``otel`` extra), off until :func:`instrument`.

The loop's driver calls the module-level :data:`HOOKS` at a leg's start, around
each model call and each tool call. It is None until :func:`instrument` runs, so
a process that never instruments pays one attribute read per effect and never
imports OpenTelemetry.

Spans follow the OpenTelemetry GenAI semantic conventions as of semantic
conventions v1.41.0 (``invoke_agent``, ``chat``, ``execute_tool``, with
``gen_ai.*`` attributes); what is nbdurable's own (run id, step index, attempt,
recovery policy, approvals) is under ``nbdurable.*``.

A run record keeps the W3C trace context its legs join (``traceparent``, and
``nbdurable.leg``: the latest leg's span, which the next leg links to), so a run
that resumes in another process, or is taken over by another worker, stays one trace.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from . import _genai_messages as genai
from ._extras import import_for

if TYPE_CHECKING:
    from .loop._driver import Driver
    from .loop._effects import CallModel, ToolInvocation, ToolOutcome
    from .loop._options import GenerateTextResult
    from .messages import ToolApprovalRequest, ToolApprovalResponse
    from .models._base import ModelResponse

__all__ = [
    "HOOKS",
    "SEMCONV_VERSION",
    "TracingHooks",
    "current_trace_context",
    "incoming_trace_context",
    "instrument",
    "mark_approval_waits",
    "uninstrument",
]

SEMCONV_VERSION = "1.41.0"
"""The version of the OpenTelemetry semantic conventions (GenAI) the spans follow."""

LEG_KEY = "nbdurable.leg"
"""Key, in a run's stored trace context, of the traceparent of its latest leg."""

_TRACEPARENT = re.compile(r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")

_INCOMING: ContextVar[dict[str, str] | None] = ContextVar("nbdurable_incoming_trace", default=None)

HOOKS: TracingHooks | None = None
"""The active tracing hooks, or None when tracing is off (the default)."""


def instrument(tracer_provider: Any = None, *, capture_content: bool = False) -> None:
    """Turn on OpenTelemetry traces of every agent run in this process.

    Args:
        tracer_provider: The ``TracerProvider`` spans go to (default: the global one).
        capture_content: Also record message content, tool arguments and tool
            results on the spans (off by default: they may hold personal data).

    Raises:
        ConfigurationError: OpenTelemetry is not installed (``pip install 'nbdurable[otel]'``).
    """
    global HOOKS
    trace: Any = import_for("otel", "tracing", "opentelemetry.trace")
    provider = tracer_provider if tracer_provider is not None else trace.get_tracer_provider()
    tracer = provider.get_tracer(
        "nbdurable", schema_url=f"https://opentelemetry.io/schemas/{SEMCONV_VERSION}"
    )
    HOOKS = TracingHooks(tracer, capture_content=capture_content, provider=provider)


def uninstrument() -> None:
    """Turn tracing off again (spans already started still end)."""
    global HOOKS
    HOOKS = None


@contextmanager
def incoming_trace_context(
    traceparent: str | None, tracestate: str | None = None
) -> Iterator[None]:
    """Make a caller's W3C ``traceparent`` the parent of runs submitted in this block.

    Used by the HTTP bridge for a ``traceparent`` header; works without
    OpenTelemetry installed (the header is stored as it came). A malformed header
    is ignored, as the W3C recommendation says.
    """
    context: dict[str, str] | None = None
    if traceparent is not None and _TRACEPARENT.match(traceparent.strip().lower()):
        context = {"traceparent": traceparent.strip().lower()}
        if tracestate:
            context["tracestate"] = tracestate.strip()
    token = _INCOMING.set(context)
    try:
        yield
    finally:
        _INCOMING.reset(token)


def current_trace_context() -> dict[str, str] | None:
    """The W3C trace context a run submitted now is parented to, or None.

    An incoming header (:func:`incoming_trace_context`) wins; otherwise, with
    tracing on, the span active in the caller's context.
    """
    incoming = _INCOMING.get()
    if incoming is not None:
        return dict(incoming)
    hooks = HOOKS
    if hooks is None:
        return None
    return hooks.inject()


def _json(value: Any) -> str:
    return json.dumps(value, default=str, ensure_ascii=False)


class TracingHooks:
    """What the driver calls when tracing is on (OpenTelemetry is imported by now)."""

    def __init__(self, tracer: Any, *, capture_content: bool, provider: Any = None) -> None:
        from opentelemetry import context as otel_context
        from opentelemetry import trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer = tracer
        self.provider = provider
        """The ``TracerProvider`` (None when the hooks were built around a tracer alone)."""
        self.capture_content = capture_content
        self._trace = trace
        self._context = otel_context
        self._propagator = TraceContextTextMapPropagator()

    # --- context propagation -------------------------------------------------------

    def inject(self, span: Any = None) -> dict[str, str] | None:
        """The W3C trace context of ``span`` (default: the current span), or None."""
        ctx = None if span is None else self._trace.set_span_in_context(span)
        target = self._trace.get_current_span(ctx)
        if not target.get_span_context().is_valid:
            return None
        carrier: dict[str, str] = {}
        self._propagator.inject(carrier, context=ctx)
        return carrier or None

    def _extract(self, carrier: Mapping[str, str]) -> Any:
        return self._propagator.extract(dict(carrier))

    def extract(self, carrier: Mapping[str, str]) -> Any:
        """The OpenTelemetry context of a W3C ``carrier`` (``traceparent``, ``tracestate``)."""
        return self._extract(carrier)

    def leg_parent(self, stored: Mapping[str, str] | None) -> tuple[Any, list[Any]]:
        """A leg's parent context (None: the current one) and its link to the leg before."""
        trace = self._trace
        parent = None
        links: list[Any] = []
        if stored is not None:
            if "traceparent" in stored:
                parent = self._extract({k: v for k, v in stored.items() if k != LEG_KEY})
            previous = stored.get(LEG_KEY)
            if previous is not None:
                previous_span = trace.get_current_span(self._extract({"traceparent": previous}))
                context = previous_span.get_span_context()
                if context.is_valid:
                    links.append(trace.Link(context, {"nbdurable.link": "previous_leg"}))
        return parent, links

    # --- spans -----------------------------------------------------------------------

    @contextmanager
    def leg(self, driver: Driver) -> Iterator[LegSpan]:
        """The ``invoke_agent`` span of one leg, current while the leg runs."""
        trace = self._trace
        options = driver.options
        agent = driver.trace_agent_name()
        model = options.model
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.provider.name": provider_name(model),
            "gen_ai.request.model": model_name(model),
            "nbdurable.step_index": driver.start.next_step_index,
            "nbdurable.resumed": driver.start.next_step_index > 0,
        }
        if agent:
            attributes["gen_ai.agent.name"] = agent
        if driver.start.run_id is not None:
            attributes["nbdurable.run_id"] = driver.start.run_id
        if options.agent_path:
            attributes["nbdurable.agent_path"] = "/".join(options.agent_path)
        attributes.update(driver.trace_attributes())
        parent, links = self.leg_parent(driver.trace_parent())
        if options.approval_responses:
            attributes["nbdurable.approval.responses"] = len(options.approval_responses)
        name = f"invoke_agent {agent}" if agent else "invoke_agent"
        with self.tracer.start_as_current_span(
            name,
            context=parent,
            kind=trace.SpanKind.INTERNAL,
            attributes=clean_attributes(attributes),
            links=links,
            record_exception=True,
            set_status_on_exception=True,
        ) as span:
            for response in options.approval_responses:
                span.add_event(
                    "nbdurable.approval.answered",
                    {
                        "nbdurable.approval.id": response.approval_id,
                        "nbdurable.approval.approved": response.approved,
                    },
                )
            own = self.inject(span)
            if own is not None:
                driver.trace_leg_started(own["traceparent"])
            leg = LegSpan(span, self)
            try:
                yield leg
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                raise

    @contextmanager
    def chat(self, driver: Driver, effect: CallModel) -> Iterator[ChatSpan]:
        """The ``chat`` span of one model call."""
        trace = self._trace
        model = effect.model
        name = model_name(model)
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": provider_name(model),
            "gen_ai.request.model": name,
            "nbdurable.step_index": effect.step_index,
        }
        attributes.update(driver.trace_model_attributes())
        if self.capture_content:
            request = effect.request
            attributes["gen_ai.input.messages"] = _json(genai.input_messages(request.messages))
            if request.instructions:
                attributes["gen_ai.system_instructions"] = _json(
                    genai.system_instructions(request.instructions)
                )
            if request.tools:
                attributes["gen_ai.tool.definitions"] = _json(genai.tool_definitions(request.tools))
        span_name = f"chat {name}" if name else "chat"
        with self.tracer.start_as_current_span(
            span_name, kind=trace.SpanKind.CLIENT, attributes=clean_attributes(attributes)
        ) as span:
            try:
                yield ChatSpan(span, self)
            except BaseException as exc:
                span.set_attribute("error.type", type(exc).__qualname__)
                raise

    @contextmanager
    def tool(self, driver: Driver, invocation: ToolInvocation, step_index: int) -> Iterator[Any]:
        """The ``execute_tool`` span of one tool call."""
        trace = self._trace
        call = invocation.call
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": call.tool_name,
            "gen_ai.tool.call.id": call.tool_call_id,
            "gen_ai.tool.type": "function",
            "nbdurable.step_index": step_index,
        }
        description = getattr(invocation.tool, "description", None)
        if isinstance(description, str) and description:
            attributes["gen_ai.tool.description"] = description
        attributes.update(driver.trace_tool_attributes(call.tool_name))
        if self.capture_content:
            attributes["gen_ai.tool.call.arguments"] = _json(call.args)
        with self.tracer.start_as_current_span(
            f"execute_tool {call.tool_name}",
            kind=trace.SpanKind.INTERNAL,
            attributes=clean_attributes(attributes),
        ) as span:
            yield span

    def tool_outcome(self, span: Any, outcome: ToolOutcome) -> None:
        """Record a tool call's outcome on its span."""
        result = outcome.result
        if result is not None:
            if result.is_error:
                span.set_attribute("error.type", "tool_error")
                span.set_status(self._trace.Status(self._trace.StatusCode.ERROR))
            if self.capture_content:
                span.set_attribute("gen_ai.tool.call.result", _json(result.result))
        if outcome.suspended:
            span.set_attribute("nbdurable.suspended", True)

    def approval_asked(
        self, request: ToolApprovalRequest, response: ToolApprovalResponse | None
    ) -> None:
        """A server-mode approver answered (an event on the current span)."""
        attributes: dict[str, Any] = {
            "nbdurable.approval.id": request.approval_id,
            "gen_ai.tool.name": request.tool_name,
        }
        if response is not None:
            attributes["nbdurable.approval.approved"] = response.approved
        self._trace.get_current_span().add_event("nbdurable.approval.decided", attributes)


class LegSpan:
    """The running ``invoke_agent`` span of a leg."""

    def __init__(self, span: Any, hooks: TracingHooks) -> None:
        self.span = span
        self.hooks = hooks

    def finish(self, result: GenerateTextResult) -> None:
        """Record how the leg ended: usage, status, and the approvals it waits for."""
        span = self.span
        span.set_attribute("gen_ai.usage.input_tokens", result.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", result.usage.output_tokens)
        span.set_attribute("nbdurable.status", result.status)
        span.set_attribute("nbdurable.finish_reason", result.finish_reason)
        span.set_attribute("nbdurable.last_step_index", result.step_index)
        mark_approval_waits(span, result.pending_approvals)
        if self.hooks.capture_content and result.status == "completed":
            answers = [m for m in result.response_messages if m.role == "assistant"]
            if answers:
                # the agent's answer: its last assistant turn (the chat spans hold every turn)
                output = genai.output_message(answers[-1].content, result.finish_reason)
                span.set_attribute("gen_ai.output.messages", _json([output]))


class ChatSpan:
    """The running ``chat`` span of a model call."""

    def __init__(self, span: Any, hooks: TracingHooks) -> None:
        self.span = span
        self.hooks = hooks

    def response(self, response: ModelResponse) -> None:
        """Record the model's usage, finish reason and (opted in) output."""
        span = self.span
        span.set_attribute("gen_ai.usage.input_tokens", response.usage.input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", response.usage.output_tokens)
        span.set_attribute("gen_ai.response.finish_reasons", [response.finish_reason])
        if response.model_id:
            span.set_attribute("gen_ai.response.model", response.model_id)
        if self.hooks.capture_content:
            span.set_attribute(
                "gen_ai.output.messages",
                _json([genai.output_message(response.content, response.finish_reason)]),
            )


def mark_approval_waits(span: Any, pending: Sequence[ToolApprovalRequest]) -> None:
    """On a leg's span, the approvals it ends waiting for: a count and an event each."""
    if pending:
        span.set_attribute("nbdurable.approval.pending", len(pending))
    for request in pending:
        span.add_event(
            "nbdurable.approval.wait",
            {
                "nbdurable.approval.id": request.approval_id,
                "gen_ai.tool.name": request.tool_name,
                "gen_ai.tool.call.id": request.tool_call_id,
            },
        )


def provider_name(model: Any) -> str:
    """``gen_ai.provider.name`` of a model: its ``provider``, else its class name."""
    provider = getattr(model, "provider", None)
    return provider if isinstance(provider, str) and provider else type(model).__name__


def model_name(model: Any) -> str:
    """``gen_ai.request.model`` of a model (empty when it names none)."""
    name = getattr(model, "model_name", None)
    return name if isinstance(name, str) else ""


def clean_attributes(attributes: dict[str, Any]) -> dict[str, Any]:
    """OpenTelemetry takes no None values (and empty strings say nothing)."""
    return {k: v for k, v in attributes.items() if v is not None and v != ""}
