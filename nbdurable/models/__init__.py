"""Models: the Model protocol, the offline ScriptedModel, the price table and the adapters.

The provider and framework adapters load on first use
(``nbdurable.models.OpenAIChatModel``, ``nbdurable.models.PydanticAIModel``), so
that importing this package never imports a provider SDK or another framework.
"""

import typing as _typing

from .._lazy import lazy_attributes as _lazy_attributes
from ._base import (
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
from ._pricing import PRICES, Price, cost_of, price_for, set_price
from ._scripted import ScriptedModel, Turn

if _typing.TYPE_CHECKING:
    from ._anthropic import AnthropicModel
    from ._langchain import LangChainModel
    from ._openai import OpenAIChatModel
    from ._pydantic_ai import PydanticAIModel

__getattr__ = _lazy_attributes(
    __name__,
    {
        "AnthropicModel": "._anthropic",
        "LangChainModel": "._langchain",
        "OpenAIChatModel": "._openai",
        "PydanticAIModel": "._pydantic_ai",
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
