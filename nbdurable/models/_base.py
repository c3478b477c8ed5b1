"""The Model protocol: what the loop sends a model and what it gets back."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import Field

from ..history import History
from ..messages import FrozenModel, Part, TextPart, ToolCallPart, Usage

__all__ = [
    "FinishReason",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "ResponseEvent",
    "StreamingModel",
    "TextDeltaEvent",
    "ToolCallDeltaEvent",
    "ToolSpec",
]

FinishReason = Literal["stop", "tool_calls", "length", "content_filter", "error", "other"]


class ToolSpec(FrozenModel):
    """A tool as the model sees it: name, description and JSON schema of its arguments."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})


class ModelRequest(FrozenModel):
    """One model call: the history, the tools on offer and the system instructions.

    When ``output_schema`` is set (structured output), the model must answer with
    JSON text that matches it; an adapter uses its provider's native mode for
    that (a JSON schema response format, or a forced tool whose input it returns
    as the response text). The loop validates the text into the caller's type.
    """

    messages: History
    """The history the model is sent (a tuple or list is accepted)."""
    tools: tuple[ToolSpec, ...] = ()
    instructions: str | None = None
    output_schema: dict[str, Any] | None = None
    """JSON schema of the structured output, or None for free text."""
    output_name: str = "output"
    """A name for the schema (providers ask for one; ``[A-Za-z0-9_-]``)."""


class ModelResponse(FrozenModel):
    """A complete model turn: text and/or tool calls, usage and why it ended."""

    content: tuple[Part, ...] = ()
    usage: Usage = Usage()
    finish_reason: FinishReason = "stop"
    model_id: str | None = None

    @property
    def text(self) -> str:
        """The concatenated text of the response."""
        return "".join(p.text for p in self.content if isinstance(p, TextPart))

    @property
    def tool_calls(self) -> tuple[ToolCallPart, ...]:
        """The tool calls of the response, in order."""
        return tuple(p for p in self.content if isinstance(p, ToolCallPart))


class TextDeltaEvent(FrozenModel):
    """A piece of streamed text."""

    type: Literal["text_delta"] = "text_delta"
    delta: str


class ToolCallDeltaEvent(FrozenModel):
    """A fragment of a streamed tool call's JSON arguments."""

    type: Literal["tool_call_delta"] = "tool_call_delta"
    tool_call_id: str
    tool_name: str
    args_delta: str


class ResponseEvent(FrozenModel):
    """The last event of a stream: the complete, validated response."""

    type: Literal["response"] = "response"
    response: ModelResponse


ModelStreamEvent = Annotated[
    TextDeltaEvent | ToolCallDeltaEvent | ResponseEvent, Field(discriminator="type")
]


@runtime_checkable
class Model(Protocol):
    """A chat model. ``generate`` returns one complete turn."""

    model_id: str

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Return one complete model turn for ``request``."""
        ...


@runtime_checkable
class StreamingModel(Model, Protocol):
    """A model that can also stream: deltas, then exactly one final ``ResponseEvent``."""

    def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Yield text/tool-call deltas and finally the complete response."""
        ...
