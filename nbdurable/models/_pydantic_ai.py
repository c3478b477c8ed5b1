"""PydanticAIModel: any Pydantic AI model, run durably by nbdurable.

Every provider Pydantic AI speaks (OpenAI, Anthropic, Gemini, Bedrock, Groq,
Mistral, Ollama, OpenRouter, ...) becomes an nbdurable model: the loop and the
runtime checkpoint, approve, retry and resume around it. The adapter uses
Pydantic AI's model-level API (``pydantic_ai.direct.model_request`` and
``model_request_stream``, thin wrappers of ``Model.request`` /
``Model.request_stream``), not its ``Agent``: nbdurable's loop owns the tools.

Pydantic AI is imported when a model is created, not when this module is, so
the class can be named without the ``nbdurable[pydantic-ai]`` extra.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import Any, NoReturn

from .._errors import ConfigurationError, ModelError
from ._base import ModelRequest, ModelResponse, ModelStreamEvent, ResponseEvent
from ._pricing import Price, price_for
from ._pydantic_ai_errors import map_exception
from ._pydantic_ai_wire import (
    StreamState,
    StructuredMode,
    history,
    load,
    parameters,
    response_of,
)
from ._status import reraise

__all__ = ["PydanticAIModel"]


class PydanticAIModel:
    """A Pydantic AI model behind nbdurable's Model protocol (``generate`` and ``stream``).

    Text, tool calls (with the provider's ids), streamed text and tool-argument
    deltas, images, usage and cost, structured output and typed errors are
    carried across; see docs/interop.md for what is not.

    Args:
        model: A ``pydantic_ai.models.Model`` (``OpenAIChatModel(...)``,
            ``AnthropicModel(...)``, ``GoogleModel(...)``, ``FunctionModel(...)``,
            ``TestModel()``, ...) or a name Pydantic AI resolves
            (``"openai:gpt-4o-mini"``, ``"anthropic:claude-sonnet-4-5"``, ``"test"``).
        settings: Pydantic AI ``ModelSettings`` sent with every request
            (``temperature``, ``max_tokens``, ``timeout``, ...), over the model's own.
        price: The price for ``Usage.cost`` (default: ``price_for(model_name)``).
        structured_output: How ``output_type`` is asked for: ``"tool"`` (an output
            tool the model must call; every model with tool calling), ``"native"``
            (the provider's JSON-schema mode) or ``"prompted"`` (the schema in the
            instructions).

    Attributes:
        model: The wrapped Pydantic AI model.
        provider: Pydantic AI's name for the provider (``model.system``:
            ``"openai"``, ``"anthropic"``, ``"google-gla"``, ``"function"``, ...).
        model_name: The wrapped model's name (``model.model_name``).
        model_id: The same as ``model_name``.

    Raises:
        ConfigurationError: Pydantic AI is not installed (the ``pydantic-ai``
            extra), the name does not resolve (unknown provider, or its API key
            is missing), or ``model`` is not a Pydantic AI model.
    """

    framework = "pydantic-ai"

    def __init__(
        self,
        model: Any,
        *,
        settings: Mapping[str, Any] | None = None,
        price: Price | None = None,
        structured_output: StructuredMode = "tool",
    ) -> None:
        if structured_output not in ("tool", "native", "prompted"):
            raise ConfigurationError("structured_output must be 'tool', 'native' or 'prompted'")
        self._pai = load("PydanticAIModel")
        if isinstance(model, str):
            try:
                model = self._pai.models.infer_model(model)
            except (self._pai.exceptions.UserError, ValueError, ImportError) as exc:
                raise ConfigurationError(f"PydanticAIModel({model!r}): {exc}") from exc
        if not isinstance(model, self._pai.models.Model):
            raise ConfigurationError(
                f"PydanticAIModel needs a pydantic_ai.models.Model or a model name, not {model!r}"
            )
        self.model: Any = model
        self.provider: str = str(model.system)
        self.model_name: str = str(model.model_name)
        self.model_id = self.model_name
        self.price = price if price is not None else price_for(self.model_name)
        self.structured_output: StructuredMode = structured_output
        self.settings: dict[str, Any] = self._settings(settings)

    def _settings(self, settings: Mapping[str, Any] | None) -> dict[str, Any]:
        merged = dict(settings or {})
        # The SDK's own retries off, as in the other adapters: every failed attempt
        # reaches the runtime's model retry, which counts and persists it.
        ignored: frozenset[str] = getattr(self.model, "unsupported_settings", frozenset())
        if "max_retries" not in merged and "max_retries" not in ignored:
            merged["max_retries"] = 0
        return merged

    def __repr__(self) -> str:
        return f"PydanticAIModel({self.provider}:{self.model_name})"

    @property
    def can_stream(self) -> bool:
        """Whether the wrapped model streams (a ``FunctionModel`` needs a ``stream_function``).

        ``nd.Agent(stream=None)`` streams only when this is true.
        """
        function_model = getattr(self._pai.models, "function", None)
        kind = getattr(function_model, "FunctionModel", None)
        if kind is not None and isinstance(self.model, kind):
            return self.model.stream_function is not None
        return True

    def _output_tool(self, request: ModelRequest) -> str | None:
        if request.output_schema is not None and self.structured_output == "tool":
            return request.output_name
        return None

    def _call(self, request: ModelRequest) -> tuple[list[Any], Any]:
        return history(request, self._pai), parameters(request, self._pai, self.structured_output)

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One complete turn (``model_request``)."""
        messages, params = self._call(request)
        try:
            response = await self._pai.direct.model_request(
                self.model,
                messages,
                model_settings=self.settings or None,
                model_request_parameters=params,
            )
        except Exception as exc:
            self._raise(exc)
        return response_of(
            response,
            output_tool=self._output_tool(request),
            price=self.price,
            model_id=self.model_id,
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Text and tool-argument deltas, then the complete response (``model_request_stream``)."""
        messages, params = self._call(request)
        output_tool = self._output_tool(request)
        state = StreamState(output_tool)
        try:
            async with self._pai.direct.model_request_stream(
                self.model,
                messages,
                model_settings=self.settings or None,
                model_request_parameters=params,
            ) as streamed:
                async for event in streamed:
                    for out in state.feed(event):
                        yield out
                final = streamed.get()
        except ModelError:
            raise
        except Exception as exc:
            self._raise(exc)
        yield ResponseEvent(
            response=response_of(
                final, output_tool=output_tool, price=self.price, model_id=self.model_id
            )
        )

    def _raise(self, exc: Exception) -> NoReturn:
        reraise(exc, map_exception(exc, self._pai.exceptions, self.provider), repr(self))
