"""Streamed Chat Completions: ``chat.completion.chunk``s folded into deltas and one turn."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..messages import Part, TextPart, ToolCallPart
from ._base import ModelStreamEvent, TextDeltaEvent, ToolCallDeltaEvent
from ._openai_wire import new_call_id, parse_arguments

__all__ = ["StreamAccumulator", "StreamedCall"]


@dataclass
class StreamedCall:
    """A tool call assembled from streamed fragments, announced once its name is known."""

    tool_call_id: str
    from_server: bool = False
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    pending: list[str] = field(default_factory=list)  # fragments before the name arrived

    def take(self, name: str | None, fragment: str) -> list[str]:
        """Add a fragment (and the name, when it first comes); return the fragments to announce."""
        if name and not self.name:
            self.name = name
        if not self.name:
            self.pending.append(fragment)
            return []
        fragments = [piece for piece in (*self.pending, fragment) if piece]
        self.pending.clear()
        self.arguments.extend(fragments)
        return fragments

    @property
    def text(self) -> str:
        """The arguments so far, fragments waiting for the name included."""
        return "".join([*self.arguments, *self.pending])


@dataclass
class StreamAccumulator:
    """Folds ``ChatCompletionChunk``s into deltas and, at the end, one complete turn.

    Tool-call fragments are assembled per ``index`` (a server that reuses an index
    with a new id starts a new call); a fragment is announced once the call's
    name is known.
    """

    text: list[str] = field(default_factory=list)
    refusal: list[str] = field(default_factory=list)
    calls: list[StreamedCall] = field(default_factory=list)
    by_index: dict[int, StreamedCall] = field(default_factory=dict)
    reason: str | None = None
    usage: Any = None
    model: str | None = None

    def add(self, chunk: Any) -> list[ModelStreamEvent]:
        """Take one chunk; return the events it yields."""
        self.model = getattr(chunk, "model", None) or self.model
        if getattr(chunk, "usage", None) is not None:
            self.usage = chunk.usage
        events: list[ModelStreamEvent] = []
        for choice in getattr(chunk, "choices", None) or ():
            if getattr(choice, "index", 0) != 0:
                continue
            delta = choice.delta
            if delta is not None:
                if delta.content:
                    self.text.append(delta.content)
                    events.append(TextDeltaEvent(delta=delta.content))
                if getattr(delta, "refusal", None):
                    self.refusal.append(delta.refusal)
                for position, call_delta in enumerate(getattr(delta, "tool_calls", None) or ()):
                    events.extend(self._tool_delta(call_delta, position))
            if choice.finish_reason:
                self.reason = choice.finish_reason
        return events

    def _tool_delta(self, delta: Any, position: int) -> list[ModelStreamEvent]:
        index = delta.index if getattr(delta, "index", None) is not None else position
        call = self.by_index.get(index)
        new_id = getattr(delta, "id", None)
        if call is None or (new_id and call.from_server and new_id != call.tool_call_id):
            call = StreamedCall(new_id or new_call_id(), from_server=bool(new_id))
            self.by_index[index] = call
            self.calls.append(call)
        elif new_id and not call.from_server and not call.arguments:
            call.tool_call_id, call.from_server = new_id, True
        function = getattr(delta, "function", None)
        name = function.name if function is not None else None
        fragments = call.take(name, (function.arguments if function is not None else None) or "")
        return [
            ToolCallDeltaEvent(
                tool_call_id=call.tool_call_id, tool_name=call.name, args_delta=piece
            )
            for piece in fragments
        ]

    def content(self) -> tuple[tuple[Part, ...], bool]:
        """The complete turn's parts and whether it was a refusal."""
        parts: list[Part] = []
        text, refusal = "".join(self.text), "".join(self.refusal)
        if text or refusal:
            parts.append(TextPart(text=text or refusal))
        for call in self.calls:
            parts.append(
                ToolCallPart(
                    tool_call_id=call.tool_call_id,
                    tool_name=call.name,
                    args=parse_arguments(call.text),
                )
            )
        return tuple(parts), bool(refusal and not text)
