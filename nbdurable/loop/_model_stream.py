"""Reading a model's stream: text deltas, tool-argument deltas, then the response."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeAlias

from .._errors import ModelError
from ..models._base import ModelResponse, ResponseEvent, TextDeltaEvent, ToolCallDeltaEvent
from ..parts import TextDeltaPart, ToolCallDeltaPart

__all__ = ["DeltaPart", "read_stream"]

DeltaPart: TypeAlias = TextDeltaPart | ToolCallDeltaPart
"""A piece of a model's answer as it streams: text, or a fragment of a tool call's arguments."""


async def read_stream(
    events: AsyncIterator[Any],
    step_index: int,
    text: bool,
    shown: Callable[[DeltaPart], Awaitable[None]],
) -> ModelResponse:
    """The stream's complete response.

    Args:
        events: What ``model.stream()`` yields.
        step_index: The step the call belongs to.
        text: Whether text deltas are shown as they stream (not with structured
            output, whose text shows once it validates).
        shown: Called with each delta shown: a ``text-delta`` part, or a
            ``tool-call-delta`` part for each fragment of a tool call's arguments
            (a call forming; the complete call follows in the response).

    Raises:
        ModelError: The stream ended without a complete response.
    """
    response = None
    async for event in events:
        if isinstance(event, TextDeltaEvent):
            if event.delta and text:
                await shown(TextDeltaPart(step_index=step_index, delta=event.delta))
        elif isinstance(event, ToolCallDeltaEvent):
            if event.args_delta:
                await shown(
                    ToolCallDeltaPart(
                        step_index=step_index,
                        tool_call_id=event.tool_call_id,
                        tool_name=event.tool_name,
                        args_delta=event.args_delta,
                    )
                )
        elif isinstance(event, ResponseEvent):
            response = event.response
    if response is None:
        raise ModelError("the model's stream ended without a complete response")
    return response
