"""AnthropicModel: Claude over the Messages API, through the official ``anthropic`` SDK.

The SDK is imported when a model is created, not when this module is: the class
can be named (``from nbdurable import *``) without the ``nbdurable[anthropic]``
extra installed.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import weakref
from collections.abc import AsyncIterator
from typing import Any

from .._errors import ConfigurationError, ModelError
from .._errors import ProviderTimeoutError as _Timeout
from .._errors import ProviderUnavailableError as _Unavailable
from .._extras import import_for
from ._anthropic_errors import PROVIDER, map_exception
from ._anthropic_wire import StructuredMode, build_params, response_from_blocks, usage_of
from ._base import (
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseEvent,
    TextDeltaEvent,
    ToolCallDeltaEvent,
)
from ._pricing import Price, price_for

__all__ = ["AnthropicModel"]


def _import_sdk() -> tuple[Any, Any]:
    sdk = import_for("anthropic", "AnthropicModel", "anthropic")
    http: Any = None
    for name in ("httpx2", "httpx"):  # the SDK's HTTP client, for errors while streaming
        try:
            http = importlib.import_module(name)
            break
        except ImportError:
            continue
    return sdk, http


class AnthropicModel:
    """A Claude model over Anthropic's Messages API (``generate`` and ``stream``).

    SDK-level retries are off (``max_retries=0``): a failed call raises one of
    nbdurable's typed provider errors (:class:`~nbdurable.ProviderError`) at once, and the
    runtime's model retry decides, counts and persists any retry.

    Args:
        model: The model name, for example ``"claude-sonnet-4-5"``.
        api_key: The API key (default: the SDK's resolution, ``ANTHROPIC_API_KEY``).
        base_url: Another endpoint (a proxy or gateway; default: the SDK's).
        client: An ``anthropic.AsyncAnthropic`` to use instead (its retries are
            turned off with ``with_options(max_retries=0)``; its timeout is kept).
        max_tokens: The ``max_tokens`` of every call (the API requires one).
        timeout: Seconds a call (or a pause in a stream) may take.
        price: The price for ``Usage.cost`` (default: ``price_for(model)``).
        structured_output: How ``output_schema`` is requested: ``"tool"`` (a
            forced tool whose input is the answer; every Claude model) or
            ``"native"`` (the API's JSON schema ``output_config``; newer models).

    Attributes:
        model_id: The model name.
        client: The SDK client the calls go through.
    """

    provider = "anthropic"
    """The provider name, as on this adapter's errors (``ProviderError.provider``)."""

    def __init__(
        self,
        model: str,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        client: Any = None,
        max_tokens: int = 4096,
        timeout: float = 600.0,
        price: Price | None = None,
        structured_output: StructuredMode = "tool",
    ) -> None:
        if structured_output not in ("tool", "native"):
            raise ConfigurationError("structured_output must be 'tool' or 'native'")
        if max_tokens < 1:
            raise ConfigurationError("max_tokens must be >= 1")
        self._sdk, self._http = _import_sdk()
        if client is not None:
            if not isinstance(client, self._sdk.AsyncAnthropic):
                raise ConfigurationError("client must be an anthropic.AsyncAnthropic")
            self.client: Any = client.with_options(max_retries=0)
            self._options: dict[str, Any] | None = None
        else:
            self._options = {"api_key": api_key, "base_url": base_url, "timeout": timeout}
            self.client = self._sdk.AsyncAnthropic(**self._options, max_retries=0)
        self._loop: weakref.ref[asyncio.AbstractEventLoop] | None = None
        self.model_id = model
        self.max_tokens = max_tokens
        self.price = price if price is not None else price_for(model)
        self.structured_output: StructuredMode = structured_output

    @property
    def model_name(self) -> str:
        """The model's name (the same as ``model_id``)."""
        return self.model_id

    def __repr__(self) -> str:
        return f"AnthropicModel({self.model_id!r})"

    async def aclose(self) -> None:
        """Close the SDK client's connections."""
        await self.client.close()

    def _client(self) -> Any:
        # The SDK's connections belong to the event loop that opened them: a client
        # this model created is replaced when a new loop uses it (a second asyncio.run).
        loop = asyncio.get_running_loop()
        if self._loop is None or self._loop() is not loop:
            if self._loop is not None and self._options is not None:
                self.client = self._sdk.AsyncAnthropic(**self._options, max_retries=0)
            self._loop = weakref.ref(loop)
        return self.client

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        transform = getattr(self._sdk, "transform_schema", None)
        return build_params(
            request,
            model=self.model_id,
            max_tokens=self.max_tokens,
            structured=self.structured_output,
            transform_schema=transform,
        )

    def _output_tool(self, request: ModelRequest) -> str | None:
        tool_mode = request.output_schema is not None and self.structured_output == "tool"
        return request.output_name if tool_mode else None

    def _mapped(self, exc: Exception) -> Exception:
        return map_exception(exc, self._sdk, self._http) or exc

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """One complete turn (``messages.create``)."""
        params = self._params(request)
        try:
            message = await self._client().messages.create(**params)
        except Exception as exc:
            raise self._mapped(exc) from exc
        blocks = [block.model_dump() for block in message.content]
        return response_from_blocks(
            blocks,
            stop_reason=message.stop_reason,
            usage=usage_of(message.usage.model_dump(), self.price),
            model_id=message.model,
            output_tool=self._output_tool(request),
        )

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Text and tool-argument deltas, then the complete response."""
        params = self._params(request)
        output_tool = self._output_tool(request)
        try:
            events = await self._client().messages.create(**params, stream=True)
        except Exception as exc:
            raise self._mapped(exc) from exc
        state = _StreamState()
        try:
            async with events:
                async for event in events:
                    for out in state.feed(event.model_dump(), output_tool):
                        yield out
        except ModelError:
            raise
        except Exception as exc:
            raise self._mapped(exc) from exc
        if not state.stopped:
            raise _Timeout("Anthropic stream broke off before message_stop", provider=PROVIDER)
        yield ResponseEvent(
            response=response_from_blocks(
                [state.blocks[i] for i in sorted(state.blocks)],
                stop_reason=state.stop_reason,
                usage=usage_of(state.usage, self.price),
                model_id=state.model_id or self.model_id,
                output_tool=output_tool,
            )
        )


class _StreamState:
    """Assembles a streamed message: content blocks by index, usage, stop reason."""

    def __init__(self) -> None:
        self.blocks: dict[int, dict[str, Any]] = {}
        self.usage: dict[str, Any] = {}
        self.stop_reason: str | None = None
        self.model_id: str | None = None
        self.stopped = False

    def feed(self, event: dict[str, Any], output_tool: str | None) -> list[ModelStreamEvent]:
        kind = event.get("type")
        if kind == "message_start":
            message = event["message"]
            self.model_id = message.get("model")
            self._add_usage(message.get("usage") or {})
        elif kind == "content_block_start":
            block = dict(event["content_block"])
            if block.get("type") == "tool_use":
                block["raw_input"] = ""
            self.blocks[event["index"]] = block
        elif kind == "content_block_delta":
            return self._delta(self.blocks[event["index"]], event["delta"], output_tool)
        elif kind == "content_block_stop":
            block = self.blocks[event["index"]]
            if block.get("type") == "tool_use" and block["raw_input"]:
                try:
                    block["input"] = json.loads(block["raw_input"])
                except ValueError as exc:
                    raise _Unavailable(
                        f"Anthropic streamed tool input that is not JSON: {exc}", provider=PROVIDER
                    ) from exc
        elif kind == "message_delta":
            self.stop_reason = event["delta"].get("stop_reason") or self.stop_reason
            self._add_usage(event.get("usage") or {})
        elif kind == "message_stop":
            self.stopped = True
        return []

    def _add_usage(self, usage: dict[str, Any]) -> None:
        # message_delta's counts are cumulative: a later value replaces an earlier one
        self.usage.update({key: value for key, value in usage.items() if value is not None})

    def _delta(
        self, block: dict[str, Any], delta: dict[str, Any], output_tool: str | None
    ) -> list[ModelStreamEvent]:
        kind = delta.get("type")
        if kind == "text_delta" and delta.get("text"):
            block["text"] = block.get("text", "") + delta["text"]
            return [TextDeltaEvent(delta=delta["text"])]
        if kind == "input_json_delta" and delta.get("partial_json"):
            fragment = delta["partial_json"]
            block["raw_input"] += fragment
            if block["name"] == output_tool:  # the structured answer: text, not a call
                return [TextDeltaEvent(delta=fragment)]
            return [
                ToolCallDeltaEvent(
                    tool_call_id=block["id"], tool_name=block["name"], args_delta=fragment
                )
            ]
        return []
