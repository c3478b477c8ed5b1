"""LangChainModel: any LangChain chat model, run durably by nbdurable.

A ``langchain_core`` ``BaseChatModel`` (``ChatOpenAI``, ``ChatAnthropic``,
``ChatGoogleGenerativeAI``, ``ChatOllama``, ``ChatBedrockConverse``, ...) becomes
an nbdurable model: tools go to it through ``bind_tools``, a turn is
``ainvoke``, a stream is ``astream``, usage comes from ``usage_metadata``.
nbdurable's loop runs the tools; LangChain agents, chains and memory are not
involved.

langchain_core is imported when a model is created, not when this module is,
so the class can be named without the ``nbdurable[langchain]`` extra.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, NoReturn

from .._errors import ConfigurationError, ModelError
from ._base import ModelRequest, ModelResponse, ModelStreamEvent, ResponseEvent
from ._langchain_errors import map_exception
from ._langchain_wire import (
    RESULT_IMAGES,
    ResultImages,
    StreamState,
    load,
    messages_of,
    response_of,
    tools_of,
)
from ._pricing import Price, price_for
from ._status import reraise

__all__ = ["LangChainModel"]


class LangChainModel:
    """A LangChain chat model behind nbdurable's Model protocol (``generate`` and ``stream``).

    Text, tool calls (with the provider's ids), streamed text and tool-argument
    deltas, images (LangChain's standard image blocks), usage and cost,
    structured output (a forced answer tool) and typed errors are carried
    across; see docs/interop.md for what is not.

    Args:
        chat_model: A ``langchain_core.language_models.BaseChatModel``. Tool
            calling and structured output need one that implements ``bind_tools``.
        price: The price for ``Usage.cost`` (default: ``price_for(model_name)``).
        config: A LangChain ``RunnableConfig`` for every call (``callbacks``,
            ``tags``, ``metadata``, ``run_name``, ...).
        result_images: Where the pictures of a tool's result (an MCP tool's
            image content) go: ``"tool"``, as image blocks in its ``ToolMessage``;
            ``"message"``, in a ``HumanMessage`` after the turn's tool messages
            (a provider whose tool messages hold text only); ``"text"``, as JSON
            text (a model that takes no images). Default: ``"message"`` for
            ``ChatOpenAI`` over Chat Completions, else ``"tool"``.

    Attributes:
        chat_model: The wrapped chat model.
        provider: LangChain's name for the provider (``ls_provider``:
            ``"openai"``, ``"anthropic"``, ...; else the model's ``_llm_type``).
        model_name: The model's name (``ls_model_name``, ``model_name`` or ``model``;
            else the ``_llm_type``).
        model_id: The same as ``model_name``.

    Raises:
        ConfigurationError: langchain-core is not installed (the ``langchain``
            extra), or ``chat_model`` is not a LangChain chat model.
    """

    framework = "langchain"

    def __init__(
        self,
        chat_model: Any,
        *,
        price: Price | None = None,
        config: Mapping[str, Any] | None = None,
        result_images: ResultImages | None = None,
    ) -> None:
        self._lc = load("LangChainModel")
        if not isinstance(chat_model, self._lc.chat_models.BaseChatModel):
            raise ConfigurationError(
                f"LangChainModel needs a langchain_core BaseChatModel, not {chat_model!r}"
            )
        if result_images is not None and result_images not in RESULT_IMAGES:
            raise ConfigurationError(
                f"result_images is one of {', '.join(RESULT_IMAGES)} (or None), "
                f"not {result_images!r}"
            )
        self.chat_model: Any = chat_model
        self.provider, self.model_name = _identity(chat_model)
        self.model_id = self.model_name
        self.price = price if price is not None else price_for(self.model_name)
        self.config: dict[str, Any] = dict(config or {})
        self.result_images: ResultImages = result_images or _result_images(
            chat_model, self.provider
        )

    def __repr__(self) -> str:
        return f"LangChainModel({self.provider}:{self.model_name})"

    def _runnable(self, request: ModelRequest) -> tuple[Any, str | None]:
        tools, choice = tools_of(request)
        if not tools:
            return self.chat_model, None
        try:
            if choice is None:
                bound = self.chat_model.bind_tools(tools)
            else:
                bound = self.chat_model.bind_tools(tools, tool_choice=choice)
        except NotImplementedError as exc:
            what = "structured output" if request.output_schema is not None else "tools"
            raise ConfigurationError(
                f"{self!r}: {type(self.chat_model).__name__} has no bind_tools (tool calling),"
                f" which {what} need"
            ) from exc
        return bound, request.output_name if request.output_schema is not None else None

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One complete turn (``ainvoke``)."""
        runnable, output_tool = self._runnable(request)
        try:
            messages = messages_of(request, self._lc, self.result_images)
            message = await runnable.ainvoke(messages, self.config or None)
        except Exception as exc:
            self._raise(exc)
        return response_of(
            message, output_tool=output_tool, price=self.price, model_id=self.model_id
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Text and tool-argument deltas, then the complete response (``astream``).

        A chat model without streaming of its own answers in one piece (LangChain
        falls back to ``ainvoke``): its text arrives as one delta.
        """
        runnable, output_tool = self._runnable(request)
        state = StreamState(output_tool)
        try:
            async for chunk in runnable.astream(
                messages_of(request, self._lc, self.result_images), self.config or None
            ):
                for event in state.feed(chunk):
                    yield event
        except ModelError:
            raise
        except Exception as exc:
            self._raise(exc)
        yield ResponseEvent(response=state.response(price=self.price, model_id=self.model_id))

    def _raise(self, exc: Exception) -> NoReturn:
        reraise(exc, map_exception(exc, self._lc.exceptions, self.provider), repr(self))


def _identity(chat_model: Any) -> tuple[str, str]:
    """``(provider, model name)`` from LangChain's tracing parameters, with fallbacks."""
    params: Mapping[str, Any] = {}
    try:
        params = chat_model._get_ls_params() or {}
    except Exception:  # a third-party model whose tracing parameters need a call's kwargs
        params = {}
    kind = str(getattr(chat_model, "_llm_type", None) or type(chat_model).__name__)
    provider = params.get("ls_provider") or kind
    name = (
        params.get("ls_model_name")
        or getattr(chat_model, "model_name", None)
        or getattr(chat_model, "model", None)
        or kind
    )
    return str(provider), str(name)


def _result_images(chat_model: Any, provider: str) -> ResultImages:
    """Where a result's pictures go for ``chat_model`` when not told (see ``LangChainModel``)."""
    # OpenAI's Chat Completions take text only in a tool message (an image there is
    # refused); its Responses API takes images in a function call's output.
    if provider == "openai" and not getattr(chat_model, "use_responses_api", None):
        return "message"
    return "tool"
