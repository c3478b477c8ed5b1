"""Models: the Model protocol, the offline ScriptedModel, the price table and the adapters.

The provider adapters load on first use (``nbdurable.models.OpenAIChatModel``),
so that importing this package never imports a provider SDK.
"""

import importlib as _importlib
import typing as _typing

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

if _typing.TYPE_CHECKING:
    from .anthropic import AnthropicModel
    from .openai import OpenAIChatModel

_LAZY = {
    "AnthropicModel": "nbdurable.models.anthropic",
    "OpenAIChatModel": "nbdurable.models.openai",
}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "PRICES",
    "AnthropicModel",
    "FinishReason",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "OpenAIChatModel",
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
