"""OpenAIChatModel: Chat Completions, on OpenAI or any compatible server.

Works with OpenAI and with servers that speak its wire format (vLLM, Ollama,
LM Studio, llama.cpp's server, ...): only standard fields are sent, and a
``base_url`` without an ``api_key`` gets a placeholder key (local servers do not
check it; ``OPENAI_API_KEY`` is never sent to another server). The ``openai``
SDK is imported when a model is created, not when this module is: the class can
be named without the ``nbdurable[openai]`` extra.

SDK-level retries are off (``max_retries=0``, also on a client you pass in), so
that every attempt is a model error the runtime counts and persists; SDK errors
become the typed :class:`~nbdurable.ProviderError` kinds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from .._errors import ConfigurationError, ProviderUnavailableError
from .._extras import import_for
from ..messages import Part, ToolCallPart
from ._base import ModelRequest, ModelResponse, ModelStreamEvent, ResponseEvent
from ._openai_errors import PROVIDER, map_error
from ._openai_stream import StreamAccumulator
from ._openai_wire import finish_reason, request_params, response_content, usage_of
from ._pricing import Price, price_for

if TYPE_CHECKING:
    from openai import AsyncOpenAI

__all__ = ["OpenAIChatModel"]

_RESERVED = frozenset({"model", "messages", "tools", "stream", "stream_options", "response_format"})
LOCAL_API_KEY = "not-needed"
"""The key sent to a ``base_url`` server when no ``api_key`` is given."""


class OpenAIChatModel:
    """A Chat Completions model: ``generate`` and ``stream``, tools, images, usage and cost.

    Args:
        model: The model name the server knows (``"gpt-4o-mini"``, ``"llama3.1"``, ...).
        base_url: The server's API root, e.g. ``"http://localhost:11434/v1"``
            (default: OpenAI's, or ``OPENAI_BASE_URL``).
        api_key: The key. Default: ``OPENAI_API_KEY`` for OpenAI; with a
            ``base_url``, a placeholder (local servers do not check it, and your
            OpenAI key is not sent to another server).
        client: An ``openai.AsyncOpenAI`` to use instead of creating one
            (``base_url``, ``api_key`` and ``default_headers`` must then be
            left out). It is used through ``client.with_options(max_retries=0)``.
        timeout: Seconds per request (default: the SDK's, or the client's).
        price: The price of ``model`` (default: ``price_for(model)``; a model
            with no price gets ``Usage.cost=None``).
        options: Request parameters sent with every call: ``temperature``,
            ``max_completion_tokens``, ``tool_choice``, ``parallel_tool_calls``, ...
        extra_body: Fields a compatible server accepts beyond OpenAI's (for
            example vLLM's ``top_k``), merged into every request body.
        stream_usage: Ask for the usage chunk in streams
            (``stream_options={"include_usage": True}``); turn it off for a
            server that rejects ``stream_options``.
        default_headers: Headers sent with every request.
        result_images: Send the pictures of a tool's result (an MCP tool's image
            content) as images, in a user message after the tool results (a
            ``tool`` message holds text only); False for a model that takes no
            images, which then reads them as JSON text.

    Raises:
        ConfigurationError: The ``openai`` extra is missing, no API key is
            configured for OpenAI itself, or ``options`` sets a parameter
            the adapter owns (``model``, ``messages``, ``tools``, ``stream``, ...).
    """

    provider = "openai"
    """The provider name, as on this adapter's errors (``ProviderError.provider``)."""

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        client: AsyncOpenAI | None = None,
        timeout: float | None = None,
        price: Price | None = None,
        options: Mapping[str, Any] | None = None,
        extra_body: Mapping[str, Any] | None = None,
        stream_usage: bool = True,
        default_headers: Mapping[str, str] | None = None,
        result_images: bool = True,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigurationError(f"OpenAIChatModel needs a model name, not {model!r}")
        reserved = sorted(_RESERVED & set(options or {}))
        if reserved:
            raise ConfigurationError(
                f"OpenAIChatModel sets {', '.join(reserved)} itself; leave it out of options"
            )
        self.model_id = model
        self.price = price if price is not None else price_for(model)
        self.options = dict(options or {})
        self.extra_body = dict(extra_body or {})
        self.stream_usage = stream_usage
        self.result_images = result_images
        self._client = _client(client, base_url, api_key, timeout, default_headers)

    @property
    def client(self) -> AsyncOpenAI:
        """The SDK client the model calls (retries off)."""
        return self._client

    @property
    def model_name(self) -> str:
        """The model's name (the same as ``model_id``)."""
        return self.model_id

    def __repr__(self) -> str:
        return f"OpenAIChatModel({self.model_id!r}, base_url={str(self._client.base_url)!r})"

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self._client.close()

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One complete turn (a non-streaming Chat Completions call)."""
        try:
            completion: Any = await self._client.chat.completions.create(
                **self._params(request), stream=False
            )
        except Exception as exc:
            self._raise(exc)
        choices = getattr(completion, "choices", None) or ()
        if not choices:
            raise ProviderUnavailableError(
                f"the server returned no choices (model {self.model_id!r})", provider=PROVIDER
            )
        choice = choices[0]
        content, refused = response_content(choice.message)
        return self._response(
            content, refused, choice.finish_reason, completion.usage, completion.model
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Stream one turn: text and tool-argument deltas, then the complete response."""
        params = self._params(request)
        if self.stream_usage:
            params["stream_options"] = {"include_usage": True}
        state = StreamAccumulator()
        try:
            chunks: Any = await self._client.chat.completions.create(**params, stream=True)
            async with chunks:
                async for chunk in chunks:
                    for event in state.add(chunk):
                        yield event
        except Exception as exc:
            self._raise(exc)
        content, refused = state.content()
        yield ResponseEvent(
            response=self._response(content, refused, state.reason, state.usage, state.model)
        )

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {**self.options, "model": self.model_id}
        params.update(request_params(request, result_images=self.result_images))
        if self.extra_body:
            params["extra_body"] = self.extra_body
        return params

    def _response(
        self,
        content: tuple[Part, ...],
        refused: bool,
        reason: str | None,
        usage: Any,
        model: str | None,
    ) -> ModelResponse:
        calls = any(isinstance(p, ToolCallPart) for p in content)
        finish = "content_filter" if refused else finish_reason(reason, has_tool_calls=calls)
        return ModelResponse(
            content=content,
            usage=usage_of(usage, self.price),
            finish_reason=finish,
            model_id=model or self.model_id,
        )

    def _raise(self, exc: Exception) -> NoReturn:
        mapped = map_error(exc, self.model_id)
        if mapped is None:
            raise exc
        raise mapped from exc


def _client(
    client: AsyncOpenAI | None,
    base_url: str | None,
    api_key: str | None,
    timeout: float | None,
    headers: Mapping[str, str] | None,
) -> AsyncOpenAI:
    import_for("openai", "OpenAIChatModel", "openai")
    import openai  # typed, where import_for is not

    if client is not None:
        if base_url is not None or api_key is not None or headers is not None:
            raise ConfigurationError(
                "pass either client= or base_url/api_key/default_headers, not both"
            )
        if not isinstance(client, openai.AsyncOpenAI):
            raise ConfigurationError(f"client must be an openai.AsyncOpenAI, not {client!r}")
        if timeout is not None:
            return client.with_options(max_retries=0, timeout=timeout)
        return client.with_options(max_retries=0)
    if api_key is None and base_url is not None:
        api_key = LOCAL_API_KEY  # never send OPENAI_API_KEY to another server
    extra: dict[str, Any] = {} if timeout is None else {"timeout": timeout}
    try:
        return openai.AsyncOpenAI(
            api_key=api_key,
            base_url=base_url,
            max_retries=0,
            default_headers=dict(headers) if headers is not None else None,
            **extra,
        )
    except openai.OpenAIError as exc:  # no API key anywhere
        raise ConfigurationError(f"OpenAIChatModel: {exc}") from exc
