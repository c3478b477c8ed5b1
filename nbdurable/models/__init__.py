"""Models: the Model protocol, the offline ScriptedModel and the price table."""

from .base import (
    FinishReason,
    Model,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseEvent,
    StreamingModel,
    TextDeltaEvent,
    ToolCallDeltaEvent,
    ToolSpec,
)
from .pricing import PRICES, Price, cost_of, price_for, set_price
from .scripted import ScriptedModel, Turn

__all__ = [
    "PRICES",
    "FinishReason",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "Price",
    "ResponseEvent",
    "ScriptedModel",
    "StreamingModel",
    "TextDeltaEvent",
    "ToolCallDeltaEvent",
    "ToolSpec",
    "Turn",
    "cost_of",
    "price_for",
    "set_price",
]
