"""Show a runtime run's events on the terminal as they are written, until the run stops."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import TextIO

from .._display import call_text
from ..durable._offload import offload
from ..durable.store import EventLog
from ..events._model import (
    APPROVAL_RESOLVED,
    CHECKPOINT_SAVED,
    MODEL_ATTEMPT_FAILED,
    MODEL_COMPLETED,
    MODEL_DELTA,
    RUN_ERROR,
    RUN_STATE,
    RUN_TAKEN_OVER,
    TOOL_APPROVAL_REQUEST,
    TOOL_CALL,
    TOOL_RESULT,
    Event,
)
from ..events._subscribe import read_events as _read
from ..runs import HUMAN_STATES, STOP_STATES, RuntimeRun
from ..runtime._run import Run
from ._tables import cell, clip, terminal_width, text_width

__all__ = ["EventPrinter", "call_text", "follow", "last_offset"]

INDENT = "  "
_WORDS = re.compile(r"\n|[^\S\n]+|[^\s]+")


async def last_offset(store: EventLog, run_id: str) -> int:
    """The offset of the run's latest event (0 when it has none yet)."""
    from .._errors import RunNotFoundError

    try:
        events = await _read(store, run_id)
    except RunNotFoundError:
        return 0
    return events[-1].offset if events else 0


class EventPrinter:
    """Writes one run's events as readable lines; streamed text as it arrives.

    Args:
        out: Where to write.
        states: Also show ``run_state`` changes.
    """

    def __init__(self, out: TextIO | None = None, *, states: bool = True) -> None:
        self.out = out if out is not None else sys.stdout
        self.states = states
        self._in_text = False
        self._column = 0
        self._space = ""
        self._streamed: set[str | None] = set()  # attempts whose text was streamed

    def _line(self, text: str) -> None:
        self.end_text()
        self.out.write(clip(INDENT + text, terminal_width()) + "\n")
        self.out.flush()

    def end_text(self) -> None:
        """Finish a line of streamed text, if one is open."""
        if self._in_text:
            self.out.write("\n")
            self.out.flush()
            self._in_text, self._space = False, ""

    def _text(self, text: str) -> None:
        """Streamed text, word-wrapped to the terminal as it arrives."""
        width = terminal_width()
        for piece in _WORDS.findall(text):
            if not self._in_text:
                self.out.write(INDENT)
                self._in_text, self._column = True, len(INDENT)
            if piece == "\n":
                self.out.write("\n" + INDENT)
                self._column, self._space = len(INDENT), ""
            elif piece.isspace():  # written before the next word, if it stays on this line
                self._space = piece if self._column > len(INDENT) else ""
            else:
                needed = len(self._space) + text_width(piece)
                if self._column > len(INDENT) and self._column + needed > width:
                    self.out.write("\n" + INDENT)
                    self._column, self._space = len(INDENT), ""
                self.out.write(self._space + piece)
                self._column += len(self._space) + text_width(piece)
                self._space = ""
        self.out.flush()

    def show(self, event: Event) -> None:
        """Write one event (events without anything to show are skipped)."""
        payload = event.payload
        if event.type == MODEL_DELTA:
            self._streamed.add(event.attempt_id)
            self._text(str(payload.get("delta", "")))
        elif event.type == MODEL_COMPLETED:
            if event.attempt_id not in self._streamed:
                response = payload.get("response") or {}
                texts = [p.get("text", "") for p in response.get("content", ())]
                self._text("".join(t for t in texts if isinstance(t, str)))
            self.end_text()
        elif event.type == MODEL_ATTEMPT_FAILED:
            self._line(
                f"! model attempt failed: {payload.get('error_type')}: {payload.get('message')}"
            )
        elif event.type == TOOL_CALL:
            call = payload.get("tool_call") or {}
            self._line(f"→ {call_text(call.get('tool_name', '?'), call.get('args') or {})}")
        elif event.type == TOOL_APPROVAL_REQUEST:
            request = payload.get("request") or {}
            call = call_text(request.get("tool_name", "?"), request.get("input") or {})
            self._line(f"? {call} needs approval ({request.get('approval_id')})")
        elif event.type == APPROVAL_RESOLVED:
            edited = payload.get("arguments")
            if payload.get("approved") and isinstance(edited, dict):
                edits = json.dumps(edited, ensure_ascii=False)
                self._line(f"✓ approved {payload.get('approval_id')}, edited: {cell(edits)}")
            elif payload.get("approved"):
                self._line(f"✓ approved {payload.get('approval_id')}")
            elif payload.get("reply") is not None:
                self._line(f"↩ replied {payload.get('approval_id')}: {cell(payload.get('reply'))}")
            else:
                self._line(f"✗ denied {payload.get('approval_id')}: {payload.get('reason') or ''}")
        elif event.type == TOOL_RESULT:
            result = payload.get("result") or {}
            mark = "✗" if result.get("is_error") else "←"
            self._line(f"{mark} {result.get('tool_name')}: {cell(result.get('result'))}")
        elif event.type == CHECKPOINT_SAVED:
            self._line(f"● checkpoint: step {event.step_index} committed ({payload.get('status')})")
        elif event.type == RUN_ERROR:
            self._line(f"! {payload.get('error_type')}: {payload.get('message')}")
        elif event.type == RUN_TAKEN_OVER:
            self._line(f"↻ {payload.get('message')}")
        elif event.type == RUN_STATE and self.states:
            reason = payload.get("reason")
            self._line(f"· {payload.get('state')}" + (f" ({reason})" if reason else ""))


async def follow(run: Run, after: int, printer: EventPrinter | None = None) -> RuntimeRun:
    """Show the run's events after offset ``after`` until it stops; return its record.

    The run stops when it waits for a human (approval, attention) or finishes.
    """
    printer = printer if printer is not None else EventPrinter()
    async for event in run.stream(after=after):
        printer.show(event)
        # A finished run's terminal event comes right after its final run_state.
        waits = event.type == RUN_STATE and event.payload.get("state") in HUMAN_STATES
        if (waits or (event.ends_stream and event.type != RUN_STATE)) and await _stopped(
            run, event.offset
        ):
            break
    printer.end_text()
    return await offload(run.record)


async def _stopped(run: Run, offset: int) -> bool:
    """Whether the run stopped, as the event at ``offset`` says it did.

    A state change writes its events before its record, so the record may still
    show the state before: it is read again until it stops, unless a later event
    shows the run went on meanwhile (a verdict from elsewhere resumed it).
    """
    while True:
        if (await offload(run.record)).state in STOP_STATES:
            return True
        if await _read(run.runtime.event_store, run.run_id, after=offset, limit=1):
            return False
        await asyncio.sleep(run.runtime.poll_interval)
