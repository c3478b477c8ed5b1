"""Models: the Model protocol, the offline ScriptedModel, the price table and the adapters.

The provider and framework adapters load on first use
(``nbdurable.models.OpenAIChatModel``, ``nbdurable.models.PydanticAIModel``), so
that importing this package never imports a provider SDK or another framework.
"""

import typing as _typing

from .._lazy import lazy_attributes as _lazy_attributes
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

__getattr__ = _lazy_attributes(
    __name__,
    {
        "AnthropicModel": ".anthropic",
        "LangChainModel": ".langchain",
        "OpenAIChatModel": ".openai",
        "PydanticAIModel": ".pydantic_ai",
    },
)


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
