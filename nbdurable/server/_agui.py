"""A run's log as AG-UI events: the projection the AG-UI stream sends (the ``ag-ui`` extra).

The AG-UI protocol (``ag-ui-protocol``, version 1.0) describes a run as
``RUN_STARTED`` ... ``RUN_FINISHED`` (or ``RUN_ERROR``); a run that needs a
human ends with ``RUN_FINISHED`` whose ``outcome`` is ``{"type": "interrupt",
"interrupts": [...]}``, and the answers come back as the ``resume`` entries of
the next ``RunAgentInput``. nbdurable's durable run is the AG-UI *thread*
(``threadId`` is its run id); each stretch of it between a start and a stop is
one AG-UI *run* (``runId`` ``<run id>.<n>``):

==========================  =====================================================
nbdurable event             AG-UI events
==========================  =====================================================
``run_started``             ``RUN_STARTED`` (protocol 1.0), ``STATE_SNAPSHOT``
``step_start`` / ``_finish``  ``STEP_STARTED`` / ``STEP_FINISHED`` (``step <i>``)
``model_delta`` (text)      ``TEXT_MESSAGE_START`` once per attempt, ``_CONTENT``
``model_completed``         ``TEXT_MESSAGE_END`` (the whole message when not streamed)
``model_attempt_failed``    ``TEXT_MESSAGE_END`` (the next attempt is a new message)
``tool_call``               ``TOOL_CALL_START``, ``TOOL_CALL_ARGS`` (the JSON), ``_END``
``tool_approval_request``   ``STATE_DELTA``: the approval, pending
``approval_resolved``       ``STATE_DELTA``: its verdict
``tool_result``             ``TOOL_CALL_RESULT`` (also a denial's, or a reply)
``run_state``               ``STATE_DELTA`` of ``/status`` while a run is open;
                            ``needs_attention`` ends it with an interrupt
``run_suspended``           ``MESSAGES_SNAPSHOT``, ``STATE_SNAPSHOT``, then
                            ``RUN_FINISHED`` with one ``tool_call`` interrupt
                            per pending approval
``run_finished``            ``RUN_FINISHED`` (``success``, ``result``: the answer)
``run_error``               ``RUN_ERROR``; a cancelled run: ``RUN_FINISHED`` ``cancelled``
==========================  =====================================================

Other events (checkpoints, grants, takeovers) send nothing. The projection is a
pure function of the log (and of the bridge's signer, for a token past its max
age): each AG-UI event has a position ``<offset>.<k>`` (the k-th event of the
log entry at that offset), which the stream sends as its SSE ``id``; a client
reconnecting with ``Last-Event-ID`` gets exactly the events after it.

An interrupt's ``metadata.nbdurable.token`` is the call's signed approval token:
a resume entry echoes it in its own ``metadata.nbdurable.token`` to approve.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ag_ui.core import (
    PROTOCOL_VERSION,
    AssistantMessage,
    BaseEvent,
    FunctionCall,
    Interrupt,
    MessagesSnapshotEvent,
    RunErrorEvent,
    RunFinishedCancelledOutcome,
    RunFinishedEvent,
    RunFinishedInterruptOutcome,
    RunFinishedSuccessOutcome,
    RunStartedEvent,
    StateDeltaEvent,
    StateSnapshotEvent,
    StepFinishedEvent,
    StepStartedEvent,
    TextMessageContentEvent,
    TextMessageEndEvent,
    TextMessageStartEvent,
    ToolCallArgsEvent,
    ToolCallEndEvent,
    ToolCallResultEvent,
    ToolCallStartEvent,
    ToolMessage,
    UserMessage,
)
from ag_ui.core import ToolCall as AgUiToolCall
from ag_ui.encoder import EventEncoder

from ..durable._signer import token_issued_at
from ..events._model import (
    APPROVAL_RESOLVED,
    MODEL_ATTEMPT_FAILED,
    MODEL_ATTEMPT_STARTED,
    MODEL_COMPLETED,
    MODEL_DELTA,
    RUN_ERROR,
    RUN_FINISHED,
    RUN_STARTED,
    RUN_STATE,
    RUN_SUSPENDED,
    STEP_FINISH,
    STEP_START,
    TOOL_APPROVAL_REQUEST,
    TOOL_CALL,
    TOOL_RESULT,
    Event,
)
from ..messages import ToolApprovalRequest

__all__ = [
    "APPROVAL_SCHEMA",
    "INTERRUPT_REASON",
    "METADATA_KEY",
    "Projector",
    "agui_frame",
]

METADATA_KEY = "nbdurable"
"""The key of nbdurable's data in an interrupt's and a resume entry's ``metadata``
(the ``ag-ui`` key is the protocol's own)."""
INTERRUPT_REASON = "tool_call"
"""The core reason of an interrupt bound to a tool call (``toolCallId`` set)."""
APPROVAL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approved": {"type": "boolean", "description": "Run the call (true) or not (false)."},
        "reason": {
            "type": "string",
            "description": "Why it was denied (with approved: false): the model reads it.",
        },
    },
    "required": ["approved"],
}
"""The ``responseSchema`` of a tool-call interrupt: what its resume ``payload`` holds."""

_ENCODER = EventEncoder()


def agui_frame(position: str, event: BaseEvent) -> bytes:
    """One AG-UI event as an SSE message: ``id:`` its position, ``data:`` its JSON."""
    return f"id: {position}\n{_ENCODER.encode(event)}".encode()


def _pointer(*parts: str) -> str:
    """A JSON Pointer (RFC 6901) to ``parts``: ``~`` and ``/`` in a part escaped."""
    return "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in parts)


def _text_of(response: dict[str, Any]) -> str:
    """The text of a logged model response (its text parts, joined)."""
    content = response.get("content") or []
    return "".join(str(part.get("text", "")) for part in content if part.get("type") == "text")


def _result_text(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


@dataclass
class Projector:
    """Turns one run's log, event by event from offset 1, into AG-UI events.

    Args:
        run_id: The run (the AG-UI ``threadId``).
        sign: The request as the interrupt shows it (the bridge signs a token
            past the max age anew); default: as logged.
        max_age_ms: Approval tokens this old expire (the interrupt's
            ``expiresAt``); None: no expiry.
        prompt: The run's prompt, the first message of the messages snapshot
            an interrupt sends (None: a run without a record).
    """

    run_id: str
    sign: Callable[[ToolApprovalRequest], ToolApprovalRequest] = lambda request: request
    max_age_ms: int | None = None
    prompt: str | None = None
    # what the log said so far (never passed in: a projection always starts at offset 1)
    runs: int = field(default=0, init=False)
    open: bool = field(default=False, init=False)
    state: dict[str, Any] = field(
        default_factory=lambda: {"status": None, "approvals": {}}, init=False
    )
    pending: dict[str, ToolApprovalRequest] = field(default_factory=dict, init=False)
    message: str | None = field(default=None, init=False)
    streamed: set[str] = field(default_factory=set, init=False)
    step_messages: dict[int, str] = field(default_factory=dict, init=False)
    steps: set[int] = field(default_factory=set, init=False)
    answer: str | None = field(default=None, init=False)
    messages: list[Any] = field(default_factory=list, init=False)
    _out: list[BaseEvent] = field(default_factory=list, init=False)
    _now: int = field(default=0, init=False)

    @property
    def agui_run_id(self) -> str:
        """The AG-UI ``runId`` of the current (or last) run of the thread."""
        return f"{self.run_id}.{self.runs}"

    def project(self, event: Event) -> list[BaseEvent]:
        """The AG-UI events of ``event`` (the next one of the log), in order."""
        self._out = []
        self._now = event.created_at
        handler = _HANDLERS.get(event.type)
        if handler is not None:
            handler(self, event)
        return self._out

    # -- building blocks ---------------------------------------------------

    def _emit(self, event: BaseEvent) -> None:
        if event.timestamp is None:
            event.timestamp = self._now
        self._out.append(event)

    def _start(self) -> None:
        if self.open:
            return  # a new leg (after a takeover or a retry wait) continues the AG-UI run
        self.open = True
        self.runs += 1
        self._emit(
            RunStartedEvent(
                thread_id=self.run_id,
                run_id=self.agui_run_id,
                protocol_version=PROTOCOL_VERSION,
            )
        )
        self._emit(StateSnapshotEvent(snapshot=json.loads(json.dumps(self.state))))

    def _end_message(self) -> None:
        if self.message is not None:
            self._emit(TextMessageEndEvent(message_id=self.message))
            self.message = None

    def _wind_down(self) -> None:
        """Close what the run has open: its text message and its steps."""
        self._end_message()
        for step in sorted(self.steps):
            self._emit(StepFinishedEvent(step_name=f"step {step}"))
        self.steps.clear()

    def _finish(self, outcome: Any, *, result: Any = None, snapshot: bool = False) -> None:
        self._start()
        self._wind_down()
        if snapshot:  # the protocol asks for the messages and state before an interrupt
            self._emit(MessagesSnapshotEvent(messages=self._transcript()))
            self._emit(StateSnapshotEvent(snapshot=json.loads(json.dumps(self.state))))
        self._emit(
            RunFinishedEvent(
                thread_id=self.run_id, run_id=self.agui_run_id, outcome=outcome, result=result
            )
        )
        self.open = False

    def _transcript(self) -> list[Any]:
        """The conversation so far: the prompt, the model's messages and the tools' results."""
        prompt = (
            []
            if self.prompt is None
            else [UserMessage(id=f"{self.run_id}.prompt", content=self.prompt)]
        )
        return [*prompt, *self.messages]

    def _delta(self, op: str, path: str, value: Any = None) -> None:
        if not self.open:
            return  # the next run's STATE_SNAPSHOT carries it
        operation: dict[str, Any] = {"op": op, "path": path}
        if op != "remove":
            operation["value"] = value
        self._emit(StateDeltaEvent(delta=[operation]))

    def _interrupt(self, request: ToolApprovalRequest) -> Interrupt:
        shown = self.sign(request)
        schema = json.loads(json.dumps(APPROVAL_SCHEMA))
        if shown.allow_edit:  # the protocol's signal that a front end may offer an edit form
            parameters = shown.parameters or {"type": "object"}
            schema["properties"]["editedArgs"] = {
                **parameters,
                "description": "The arguments to run the call with instead (a full "
                "replacement, with approved: true).",
            }
        schema["properties"]["reply"] = {
            "type": "string",
            "description": "Answer in place of the tool (with approved: false): the call's "
            "result, not an error.",
        }
        arguments = json.dumps(shown.input, ensure_ascii=False, sort_keys=True)
        return Interrupt(
            id=shown.approval_id,
            reason=INTERRUPT_REASON,
            message=f"Run {shown.tool_name}({arguments})?",
            tool_call_id=shown.tool_call_id,
            response_schema=schema,
            expires_at=self._expires_at(shown.token),
            metadata={
                METADATA_KEY: {
                    "token": shown.token,
                    "toolName": shown.tool_name,
                    "arguments": shown.model_dump(mode="json")["input"],
                    "agentPath": list(shown.agent_path),
                }
            },
        )

    def _expires_at(self, token: str | None) -> str | None:
        issued = token_issued_at(token)
        if issued is None or self.max_age_ms is None:
            return None
        moment = datetime.fromtimestamp((issued + self.max_age_ms) / 1000, tz=UTC)
        return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    # -- one handler per event type ------------------------------------------

    def _on_run_state(self, event: Event) -> None:
        status = event.payload.get("state")
        self.state["status"] = status
        self._delta("replace", "/status", status)
        if status == "needs_attention" and self.open:
            reason = event.payload.get("reason") or "the run needs a human decision"
            attention = Interrupt(
                id=f"{self.run_id}.attention.{event.offset}",
                reason=f"{METADATA_KEY}:needs_attention",
                message=str(reason),
                metadata={METADATA_KEY: {"decide": f"/runs/{self.run_id}/retry"}},
            )
            self._finish(RunFinishedInterruptOutcome(interrupts=[attention]), snapshot=True)

    def _on_step_start(self, event: Event) -> None:
        self._start()
        step = event.step_index or 0
        if step not in self.steps:  # a leg that took the run over starts it again
            self.steps.add(step)
            self._emit(StepStartedEvent(step_name=f"step {step}"))

    def _on_step_finish(self, event: Event) -> None:
        step = event.step_index or 0
        if step in self.steps:
            self._end_message()
            self.steps.discard(step)
            self._emit(StepFinishedEvent(step_name=f"step {step}"))

    def _on_delta(self, event: Event) -> None:
        delta = event.payload.get("delta")
        if event.payload.get("type") != "text_delta" or not delta or event.attempt_id is None:
            return
        self._start()
        if self.message != event.attempt_id:
            self._end_message()
            self.message = event.attempt_id
            self.streamed.add(event.attempt_id)
            self._emit(TextMessageStartEvent(message_id=event.attempt_id, role="assistant"))
        self._emit(TextMessageContentEvent(message_id=event.attempt_id, delta=str(delta)))

    def _on_completed(self, event: Event) -> None:
        attempt = event.attempt_id
        text = _text_of(event.payload.get("response") or {})
        if attempt is not None and attempt not in self.streamed and text:
            self._start()
            self._end_message()
            self._emit(TextMessageStartEvent(message_id=attempt, role="assistant"))
            self._emit(TextMessageContentEvent(message_id=attempt, delta=text))
            self.message = attempt
        if attempt is not None and (attempt in self.streamed or text):
            self.step_messages[event.step_index or 0] = attempt
        self._end_message()
        self.answer = text
        calls = [
            AgUiToolCall(
                id=str(part.get("tool_call_id")),
                function=FunctionCall(
                    name=str(part.get("tool_name")),
                    arguments=json.dumps(part.get("args") or {}, ensure_ascii=False),
                ),
            )
            for part in (event.payload.get("response") or {}).get("content") or []
            if part.get("type") == "tool_call"
        ]
        if text or calls:
            self.messages.append(
                AssistantMessage(
                    id=attempt or f"{self.run_id}.{event.offset}",
                    content=text or None,
                    tool_calls=calls or None,
                )
            )

    def _on_tool_call(self, event: Event) -> None:
        call = event.payload.get("tool_call") or {}
        self._start()
        self._end_message()
        call_id = str(call.get("tool_call_id"))
        self._emit(
            ToolCallStartEvent(
                tool_call_id=call_id,
                tool_call_name=str(call.get("tool_name")),
                parent_message_id=self.step_messages.get(event.step_index or 0),
            )
        )
        arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
        self._emit(ToolCallArgsEvent(tool_call_id=call_id, delta=arguments))
        self._emit(ToolCallEndEvent(tool_call_id=call_id))

    def _on_approval_request(self, event: Event) -> None:
        request = ToolApprovalRequest.model_validate(event.payload.get("request") or {})
        self.pending[request.approval_id] = request
        shown = {
            "toolCallId": request.tool_call_id,
            "toolName": request.tool_name,
            "arguments": request.model_dump(mode="json")["input"],
            "status": "pending",
        }
        self.state["approvals"][request.approval_id] = shown
        self._delta("add", _pointer("approvals", request.approval_id), shown)

    def _on_approval_resolved(self, event: Event) -> None:
        payload = event.payload
        approval_id = str(payload.get("approval_id"))
        self.pending.pop(approval_id, None)
        shown = self.state["approvals"].get(approval_id)
        if shown is None:
            return
        self._start()
        if payload.get("approved"):
            verdict = "approved" if payload.get("arguments") is None else "edited"
        else:
            verdict = "denied" if payload.get("reply") is None else "replied"
        shown["status"] = verdict
        self._delta("replace", _pointer("approvals", approval_id, "status"), verdict)
        if verdict == "edited":  # the call runs with these; "arguments" stays the model's
            shown["editedArguments"] = payload["arguments"]
            path = _pointer("approvals", approval_id, "editedArguments")
            self._delta("add", path, payload["arguments"])

    def _on_tool_result(self, event: Event) -> None:
        result = event.payload.get("result") or {}
        call_id = str(result.get("tool_call_id"))
        content = _result_text(result.get("result"))
        self._start()
        self._end_message()
        self._emit(
            ToolCallResultEvent(
                message_id=f"{call_id}.result", tool_call_id=call_id, content=content, role="tool"
            )
        )
        error = content if result.get("is_error") else None
        self.messages.append(
            ToolMessage(id=f"{call_id}.result", content=content, tool_call_id=call_id, error=error)
        )

    def _on_suspended(self, event: Event) -> None:
        if not self.pending:
            stop = Interrupt(
                id=f"{self.run_id}.suspended.{event.offset}",
                reason=f"{METADATA_KEY}:suspended",
                message="The run stopped until it is resumed.",
            )
            self._finish(RunFinishedInterruptOutcome(interrupts=[stop]), snapshot=True)
            return
        self.state["status"] = "waiting_approval"  # its run_state follows the leg's end
        interrupts = [self._interrupt(request) for request in self.pending.values()]
        self._finish(RunFinishedInterruptOutcome(interrupts=interrupts), snapshot=True)

    def _on_finished(self, event: Event) -> None:
        self.pending.clear()
        self._finish(RunFinishedSuccessOutcome(), result=self.answer)

    def _on_error(self, event: Event) -> None:
        if event.payload.get("state") == "cancelled":
            self._finish(RunFinishedCancelledOutcome())
            return
        self._start()
        self._wind_down()
        message = event.payload.get("message") or event.payload.get("error") or "the run failed"
        self._emit(RunErrorEvent(message=str(message), code=event.payload.get("error_type")))
        self.open = False


_HANDLERS: dict[str, Callable[[Projector, Event], None]] = {
    RUN_STARTED: lambda projector, _event: projector._start(),
    RUN_STATE: Projector._on_run_state,
    STEP_START: Projector._on_step_start,
    STEP_FINISH: Projector._on_step_finish,
    # an earlier attempt's message ends (its output is void)
    MODEL_ATTEMPT_STARTED: lambda projector, _event: projector._end_message(),
    MODEL_DELTA: Projector._on_delta,
    MODEL_ATTEMPT_FAILED: lambda projector, _event: projector._end_message(),
    MODEL_COMPLETED: Projector._on_completed,
    TOOL_CALL: Projector._on_tool_call,
    TOOL_APPROVAL_REQUEST: Projector._on_approval_request,
    APPROVAL_RESOLVED: Projector._on_approval_resolved,
    TOOL_RESULT: Projector._on_tool_result,
    RUN_SUSPENDED: Projector._on_suspended,
    RUN_FINISHED: Projector._on_finished,
    RUN_ERROR: Projector._on_error,
}
