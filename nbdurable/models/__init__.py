"""Models: the Model protocol, the offline ScriptedModel, the price table and the adapters.

The provider and framework adapters load on first use
(``nbdurable.models.OpenAIChatModel``, ``nbdurable.models.PydanticAIModel``), so
that importing this package never imports a provider SDK or another framework.
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
    from .langchain import LangChainModel
    from .openai import OpenAIChatModel
    from .pydantic_ai import PydanticAIModel

_LAZY = {
    "AnthropicModel": "nbdurable.models.anthropic",
    "LangChainModel": "nbdurable.models.langchain",
    "OpenAIChatModel": "nbdurable.models.openai",
    "PydanticAIModel": "nbdurable.models.pydantic_ai",
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
    "LangChainModel",
    "Model",
    "ModelRequest",
    "ModelResponse",
    "ModelStreamEvent",
    "OpenAIChatModel",
    "Price",
    "PydanticAIModel",
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
