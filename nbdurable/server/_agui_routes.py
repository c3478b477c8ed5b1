"""The AG-UI endpoints of the bridge: a run as AG-UI events, and answers to its interrupts.

``GET /agui/runs/{run_id}/events`` streams the run's log projected onto the
AG-UI protocol (:mod:`~nbdurable.server._agui`) as Server-Sent Events, from
the start or after ``Last-Event-ID`` / ``?after=``; ``POST
/agui/runs/{run_id}/resume`` takes a ``RunAgentInput`` whose ``resume`` entries
answer the run's interrupts (:mod:`~nbdurable.server._agui_resume`) and
answers with the continuation as AG-UI events (``Accept: text/event-stream``)
or the verdicts as JSON.

Both need the ``ag-ui`` extra (``ag-ui-protocol``), imported on the first
request: without it they answer 501 with the ``pip install`` line, and
importing the bridge never imports it.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

from .._errors import ConfigurationError
from .._extras import import_for
from ..durable._offload import offload
from ..durable._signer import resign_if_expired
from ..events._subscribe import read_events
from ..messages import ResponseKind
from ..runtime._run import Run
from ._auth import principal_of
from ._context import Bridge
from ._errors import ServerError
from ._handlers import error_responses
from ._routes_events import KEEPALIVE, MAX_OFFSET, LastEventId, Tail, Until, sse_response
from ._schemas import RunOut

__all__ = ["AgUiUnavailableError", "ResumeOut", "agui_router", "position_of"]

_POSITION = re.compile(r"0*([0-9]{1,19})(?:\.0*([0-9]{1,9}))?")
"""A stream position: ``<offset>`` (everything of that log entry seen) or ``<offset>.<k>``."""
_SEEN_ALL = 10**9
"""The index past every AG-UI event of one log entry (a position ``N`` is ``N.<this>``)."""

_SSE_MESSAGE: dict[str, Any] = {
    "type": "object",
    "description": "One SSE message: one AG-UI event",
    "required": ["id", "data"],
    "properties": {
        "id": {
            "type": "string",
            "pattern": "^[1-9][0-9]*\\.[0-9]+$",
            "description": "The position: `<offset of the log entry>.<k>`",
        },
        "event": {
            "type": "string",
            "enum": ["message"],
            "description": "Not sent: SSE's default type (`onmessage`), as AG-UI streams are",
        },
        "data": {
            "type": "string",
            "description": "The AG-UI event in JSON (camelCase, as `ag_ui.encoder` writes it)",
            "contentMediaType": "application/json",
        },
    },
    "additionalProperties": False,
}
_STREAM_200 = {
    "description": "AG-UI events as SSE: `id:` the position, `data:` the event "
    "(`: keep-alive` comments aside)",
    "content": {"text/event-stream": {"schema": _SSE_MESSAGE}},
}
_UNAVAILABLE = "The ag-ui extra is not installed: pip install 'nbdurable[ag-ui]'"


class AgUiUnavailableError(ServerError):
    """The AG-UI endpoints need the ``ag-ui`` extra (``ag-ui-protocol``), not installed here."""

    status_code = 501


class ResumeVerdict(BaseModel):
    """The verdict one resume entry gave."""

    interrupt_id: str = Field(alias="interruptId")
    outcome: ResponseKind
    message: str


class ResumeOut(BaseModel):
    """The verdicts a resume recorded, and the run after them."""

    thread_id: str = Field(alias="threadId")
    verdicts: list[ResumeVerdict]
    run: RunOut


def _need_agui() -> None:
    """Refuse (501) when ``ag-ui-protocol`` is missing.

    Checked on every request, so the bridge answers the same whether or not an
    earlier request imported it.
    """
    try:
        import_for("ag-ui", "the AG-UI endpoints", "ag_ui")
    except ConfigurationError as exc:
        raise AgUiUnavailableError(str(exc)) from None


def position_of(after: int, last_event_id: str | None) -> tuple[int, int]:
    """Where a client is: ``(offset, k)``, the last AG-UI event it received.

    ``Last-Event-ID`` (``<offset>.<k>``, or ``<offset>``: all of that entry's
    events) wins over ``?after=<offset>``, as a reconnecting ``EventSource`` sends it.

    Raises:
        ConfigurationError: A ``Last-Event-ID`` that is no position (HTTP 422).
    """
    if last_event_id is None:
        return after, _SEEN_ALL
    found = _POSITION.fullmatch(last_event_id.strip(" \t"))
    if found is None or int(found.group(1)) > MAX_OFFSET:
        shown = last_event_id if len(last_event_id) <= 40 else last_event_id[:40] + "..."
        raise ConfigurationError(
            f"Last-Event-ID must be a position of this stream (<offset>.<k>), not {shown!r}"
        )
    index = found.group(2)
    return int(found.group(1)), _SEEN_ALL if index is None else int(index)


async def _agui_stream(
    bridge: Bridge, run_id: str, seen: tuple[int, int], until: str
) -> AsyncIterator[bytes]:
    """The run's AG-UI events after ``seen``.

    Its log is replayed from offset 1 through the projection (a pure function
    of the log), then followed live.

    Raises (before the first byte):
        RunNotFoundError: No such run.
    """
    from ._agui import Projector, agui_frame

    runtime = bridge.runtime
    max_age = bridge.approval_max_age_ms
    tail = Tail(bridge, run_id, 0, until)
    await tail.start()
    record = await offload(runtime.runtime_store.rt_get, run_id)
    prompt = record.prompt_value if record is not None else None
    projector = Projector(
        run_id,
        sign=lambda request: resign_if_expired(runtime.signer, request, max_age),
        max_age_ms=max_age,
        prompt=None if prompt is None else prompt if isinstance(prompt, str) else prompt.text,
    )

    async def frames() -> AsyncIterator[bytes]:
        async for event in tail.items():
            if event is None:
                yield KEEPALIVE
                continue
            for index, agui in enumerate(projector.project(event)):
                if (event.offset, index) > seen:
                    yield agui_frame(f"{event.offset}.{index}", agui)

    return frames()


def _kind(state: str, *, edited: bool) -> ResponseKind:
    """What a recorded verdict was, as the resume's answer names it."""
    if state == "approved":
        return "edited" if edited else "approved"
    return "replied" if state == "replied" else "denied"


def agui_router(bridge: Bridge) -> APIRouter:
    """The ``/agui/runs/{run_id}/...`` routes of ``bridge``."""
    router = APIRouter(tags=["ag-ui"])
    runtime = bridge.runtime

    @router.get(
        "/agui/runs/{run_id}/events",
        summary="A run as AG-UI events (Server-Sent Events)",
        response_class=StreamingResponse,
        responses={
            200: _STREAM_200,
            **error_responses({404: "No such run", 501: _UNAVAILABLE}),
        },
    )
    async def events(
        run_id: str,
        after: Annotated[
            int,
            Query(ge=0, le=MAX_OFFSET, description="Only the events of log entries after this"),
        ] = 0,
        until: Until = "finish",
        last_event_id: LastEventId = None,
    ) -> StreamingResponse:
        """The run's log as AG-UI events: replayed, then live, no gap and no duplicate.

        A stretch of the run between a start and a stop is one AG-UI run of the
        thread ``run_id``; one that waits for approvals ends with
        ``RUN_FINISHED`` whose outcome lists them as ``tool_call`` interrupts
        (answer them with ``POST /agui/runs/{run_id}/resume``).
        """
        _need_agui()
        seen = position_of(after, last_event_id)
        return sse_response(await _agui_stream(bridge, run_id, seen, until))

    @router.post(
        "/agui/runs/{run_id}/resume",
        summary="Answer a run's AG-UI interrupts (approve, edit, deny, reply)",
        response_model=ResumeOut,
        response_model_by_alias=True,
        responses={
            200: {
                "description": "The verdicts as JSON; with `Accept: text/event-stream`, "
                "the run's AG-UI events from the answer on, until it finishes or waits again",
                "content": {"text/event-stream": {"schema": _SSE_MESSAGE}},
            },
            **error_responses(
                {
                    403: "Token forged, altered or bound elsewhere, or the principal may "
                    "not decide the call (ApproverNotAllowedError)",
                    404: "No such run",
                    409: "An interrupt no longer waits: another verdict won (`verdict`)",
                    410: "Token past the max age: read the stream again for a fresh one",
                    422: "Not a RunAgentInput answering this run's interrupts, or edited "
                    "arguments the tool does not allow or that do not fit its schema",
                    501: _UNAVAILABLE,
                }
            ),
        },
    )
    async def resume(
        run_id: str,
        request: Request,
        body: Annotated[
            dict[str, Any],
            Body(
                description="An AG-UI `RunAgentInput`: `threadId` is the run id; each "
                "`resume` entry answers one interrupt (`payload`: `approved`, and "
                "`editedArgs`, `reply` or `reason`; `metadata.nbdurable.token`: the "
                "interrupt's token, to approve). `messages` is not read."
            ),
        ],
    ) -> Any:
        """Record one verdict per resume entry through the bridge's decision path.

        The entries are checked first (a malformed one records nothing), then
        recorded in order, each as ``POST /runs/{run_id}/approvals/{approval_id}``
        would (the token verified, the bearer token's principal recorded and
        checked against the agent's ``approvers``); an error stops at that
        entry. The same resume sent again answers as the first time did.
        """
        _need_agui()
        from ._agui_resume import answers_of, record

        answers = answers_of(body, run_id)
        principal = principal_of(request)
        streams = "text/event-stream" in request.headers.get("accept", "")
        # where the continuation starts: the log as it was before these verdicts
        before = await read_events(runtime.event_store, run_id) if streams else ()
        verdicts = []
        for given in answers:
            outcome = await record(bridge, run_id, given, principal)
            verdicts.append(
                ResumeVerdict(
                    interruptId=given.approval_id,
                    outcome=_kind(outcome.state, edited=given.arguments is not None),
                    message=outcome.message,
                )
            )
        if streams:
            seen = (before[-1].offset if before else 0, _SEEN_ALL)
            return sse_response(await _agui_stream(bridge, run_id, seen, "stop"))
        record_now = await offload(Run(runtime, run_id).record)
        out = ResumeOut(threadId=run_id, verdicts=verdicts, run=RunOut.of(record_now))
        return JSONResponse(out.model_dump(mode="json", by_alias=True))

    return router
