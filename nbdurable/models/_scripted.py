"""ScriptedModel: a deterministic, offline model that plays a script of turns."""

from __future__ import annotations

import asyncio
import json
import operator
import re
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal, Union

from pydantic import TypeAdapter

from .._errors import ConfigurationError, ModelError, ScriptExhaustedError
from ..history import History
from ..messages import Message, Part, TextPart, ToolCallPart, Usage
from ._base import (
    FinishReason,
    ModelRequest,
    ModelResponse,
    ModelStreamEvent,
    ResponseEvent,
    TextDeltaEvent,
    ToolCallDeltaEvent,
)

__all__ = ["ScriptedModel", "Turn"]

_TOKEN_RE = re.compile(r"\S+\s*|\s+")

ToolCallSpec = Union[ToolCallPart, tuple[str, Mapping[str, Any]], Mapping[str, Any]]


@dataclass(frozen=True)
class Turn:
    """One scripted model turn.

    Attributes:
        text: The text the model says.
        tool_calls: Calls to make: ``ToolCallPart``s, ``(name, args)`` tuples or
            ``{"name": ..., "args": ..., "id": ...}`` dicts. Ids default to
            ``call_<history length>_<i>``, stable when a step is re-run.
        usage: Reported usage; by default counted from the request and the text.
        finish_reason: Defaults to ``tool_calls`` when there are calls, else ``stop``.
        error: Raised after the text has streamed (a failure mid-response).
        output: Structured output: serialized as JSON and sent as the turn's text
            (after ``text``, if any). A pydantic model, dataclass or any JSON-able value.
    """

    text: str = ""
    tool_calls: Sequence[ToolCallSpec] = ()
    usage: Usage | None = None
    finish_reason: FinishReason | None = None
    error: BaseException | None = None
    output: Any = None

    @classmethod
    def call(cls, tool_name: str, text: str = "", /, **args: Any) -> Turn:
        """A turn that makes one tool call: ``Turn.call("drop_table", name="stg")``."""
        return cls(text=text, tool_calls=[(tool_name, args)])


ScriptEntry = Union[Turn, str, Callable[[ModelRequest], Turn | str]]


@dataclass
class ScriptedModel:
    """Plays a script of turns, offline and deterministically.

    By default (``mode="history"``) the turn played is chosen by the number of
    assistant messages already in the request, so a resumed run, a re-run step or
    a fresh instance after a restart all get the right next turn. With
    ``mode="sequential"`` each call plays the next turn of the script (a call that
    ``fail_on`` makes fail does not use up a turn).

    Args:
        turns: Script entries: a :class:`Turn`, a string (a text-only turn) or a
            callable taking the :class:`ModelRequest` and returning either.
        stream_delay: Seconds to sleep between streamed tokens.
        fail_on: 1-based call numbers of this instance that raise: an iterable
            of numbers (raising :class:`ModelError`) or a mapping number ->
            exception to raise.
        price_per_million: ``(input, output)`` USD per million tokens; sets ``Usage.cost``.
        model_id: The id reported on responses.
        mode: ``"history"`` or ``"sequential"``.
        keep_requests: How many requests ``requests`` keeps: ``0`` (the default)
            keeps none, ``None`` keeps every one, ``N`` the latest ``N``. Each
            request holds the whole history it was sent, so a log of every request
            of a long run grows with the square of its length: keep them only in
            tests that look at what the model was sent. The turn played never
            depends on this log (see ``mode``), nor does ``calls``.

    Attributes:
        requests: The requests received, oldest first, when ``keep_requests``
            asks for them (for assertions): empty by default; with
            ``keep_requests=None`` all of them; with ``N`` the latest ``N``.
    """

    turns: Sequence[ScriptEntry]
    stream_delay: float = 0.0
    fail_on: Iterable[int] | Mapping[int, BaseException] = ()
    price_per_million: tuple[float, float] | None = None
    model_id: str = "scripted"
    mode: Literal["history", "sequential"] = "history"
    keep_requests: int | None = 0
    requests: list[ModelRequest] = field(default_factory=list, init=False, repr=False)

    provider: ClassVar[str] = "scripted"
    """The provider name (an offline script)."""

    @property
    def model_name(self) -> str:
        """The model's name (the same as ``model_id``)."""
        return self.model_id

    def __post_init__(self) -> None:
        self.turns = list(self.turns)
        if self.mode not in ("history", "sequential"):
            raise ConfigurationError(f"mode must be 'history' or 'sequential', not {self.mode!r}")
        if isinstance(self.fail_on, Mapping):
            self._failures: dict[int, BaseException] = dict(self.fail_on)
        else:
            self._failures = {
                int(n): ModelError(f"scripted failure on call {n}", retryable=True)
                for n in self.fail_on
            }
        self._played = 0
        self._calls = 0
        self._counted: tuple[Sequence[Message], int] = ((), 0)
        if self.keep_requests is not None and self.keep_requests < 0:
            raise ConfigurationError("keep_requests must be >= 0 or None")
        if self.stream_delay < 0:
            raise ConfigurationError("stream_delay must be >= 0")

    @property
    def calls(self) -> int:
        """How many times this model was called."""
        return self._calls

    async def generate(self, request: ModelRequest) -> ModelResponse:
        """Play the next turn at once."""
        turn = self._next_turn(request)
        if turn.error is not None:
            raise turn.error
        return self._response(request, turn)

    async def stream(self, request: ModelRequest) -> AsyncIterator[ModelStreamEvent]:
        """Play the next turn token by token, then yield the complete response."""
        turn = self._next_turn(request)
        for token in _TOKEN_RE.findall(turn.text):
            if self.stream_delay:
                await asyncio.sleep(self.stream_delay)
            yield TextDeltaEvent(delta=token)
        if turn.error is not None:
            raise turn.error
        response = self._response(request, turn)
        for call in response.tool_calls:
            args = json.dumps(call.args)
            half = len(args) // 2
            for piece in (args[:half], args[half:]):
                yield ToolCallDeltaEvent(
                    tool_call_id=call.tool_call_id, tool_name=call.tool_name, args_delta=piece
                )
        yield ResponseEvent(response=response)

    def _next_turn(self, request: ModelRequest) -> Turn:
        self._calls += 1
        number = self._calls
        kept = self.keep_requests
        if kept is None or kept > 0:
            self.requests.append(request)
            if kept is not None and len(self.requests) > kept:
                del self.requests[0]
        if number in self._failures:
            raise self._failures[number]
        if self.mode == "history":
            index = sum(1 for m in request.messages if m.role == "assistant")
        else:
            index = self._played  # a failed call does not use up a turn
        if index >= len(self.turns):
            raise ScriptExhaustedError(
                f"ScriptedModel has {len(self.turns)} turn(s); turn {index + 1} was requested"
            )
        entry = self.turns[index]
        self._played = index + 1
        if callable(entry) and not isinstance(entry, Turn):
            entry = entry(request)
        if isinstance(entry, str):
            return Turn(text=entry)
        if not isinstance(entry, Turn):
            raise ConfigurationError(f"script entry {index} is not a Turn or str: {entry!r}")
        return entry

    def _response(self, request: ModelRequest, turn: Turn) -> ModelResponse:
        content: list[Part] = []
        if turn.text:
            content.append(TextPart(text=turn.text))
        if turn.output is not None:
            content.append(TextPart(text=_json_text(turn.output)))
        for i, spec in enumerate(turn.tool_calls):
            content.append(_tool_call(spec, default_id=f"call_{len(request.messages)}_{i}"))
        calls = sum(1 for p in content if isinstance(p, ToolCallPart))
        finish = turn.finish_reason or ("tool_calls" if calls else "stop")
        usage = turn.usage or self._count_usage(request, content)
        return ModelResponse(
            content=tuple(content), usage=usage, finish_reason=finish, model_id=self.model_id
        )

    def _prompt_tokens(self, messages: Sequence[Message]) -> int:
        """Tokens of the messages' JSON joined by spaces, counting only what is new.

        A message's JSON has no whitespace at either end, so the tokens of the
        joined text are the sum of each message's. A request usually extends the
        previous one, whose count is kept: the history is not encoded again.
        """
        counted, total = self._counted
        # A History that grew from the counted one says so without a pass over the run.
        known = isinstance(messages, History) and messages.extends(counted)
        if not known and (
            len(counted) > len(messages) or not all(map(operator.is_, counted, messages))
        ):
            counted, total = (), 0
        total += sum(len(_TOKEN_RE.findall(m.model_dump_json())) for m in messages[len(counted) :])
        self._counted = (messages, total)
        return total

    def _count_usage(self, request: ModelRequest, content: list[Part]) -> Usage:
        input_tokens = max(1, self._prompt_tokens(request.messages) // 4)
        output_tokens = sum(
            len(_TOKEN_RE.findall(p.text)) if isinstance(p, TextPart) else 5 for p in content
        )
        cost = None
        if self.price_per_million is not None:
            price_in, price_out = self.price_per_million
            cost = (input_tokens * price_in + output_tokens * price_out) / 1_000_000
        return Usage(
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            total_tokens=input_tokens + output_tokens,
            cost=cost,
        )


def _tool_call(spec: ToolCallSpec, *, default_id: str) -> ToolCallPart:
    if isinstance(spec, ToolCallPart):
        return spec
    if isinstance(spec, tuple):
        name, args = spec
        return ToolCallPart(tool_call_id=default_id, tool_name=name, args=dict(args))
    if isinstance(spec, Mapping):
        return ToolCallPart(
            tool_call_id=str(spec.get("id") or default_id),
            tool_name=str(spec["name"]),
            args=dict(spec.get("args") or {}),
        )
    raise ConfigurationError(f"cannot read a tool call from {spec!r}")


def _json_text(value: Any) -> str:
    return TypeAdapter(type(value)).dump_json(value).decode()
