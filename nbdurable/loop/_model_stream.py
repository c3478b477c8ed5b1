"""Reading a model's stream: text deltas, tool-argument deltas, then the response."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from .._errors import ModelError
from ..models._base import ModelResponse, ResponseEvent, TextDeltaEvent, ToolCallDeltaEvent
from ..parts import ToolCallDeltaPart

__all__ = ["read_stream"]


async def read_stream(
    events: AsyncIterator[Any],
    step_index: int,
    text: Callable[[str], Awaitable[None]] | None,
    calls: Callable[[ToolCallDeltaPart], None] | None,
) -> ModelResponse:
    """The stream's complete response.

    Args:
        events: What ``model.stream()`` yields.
        step_index: The step the call belongs to.
        text: Called with each text delta (None: text is not shown as it streams).
        calls: Called with each fragment of a tool call's arguments, as a
            ``tool-call-delta`` part (None: not shown).

    Raises:
        ModelError: The stream ended without a complete response.
    """
    response = None
    async for event in events:
        if isinstance(event, TextDeltaEvent):
            if event.delta and text is not None:
                await text(event.delta)
        elif isinstance(event, ToolCallDeltaEvent):
            if event.args_delta and calls is not None:
                calls(
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
