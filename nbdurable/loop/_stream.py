"""``stream_chat``: the streaming twin of ``generate_text``, returning at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Generator, Sequence
from typing import Any, Generic, TypeVar, Unpack, overload

from ..durable.store import DurableSession, SessionStore
from ..history import History
from ..messages import Message, ToolApprovalRequest, Usage
from ..parts import ErrorPart, StreamPart, TextDeltaPart
from ._generate import Runner, new_call, resumed
from ._options import AgentOptions, GenerateTextResult, StepResult, takes_options

__all__ = ["StreamChatResult", "resume_stream_from_checkpoint", "stream_chat"]

T = TypeVar("T")


class _Deferred(Generic[T]):
    """An awaitable view of one field of the final result (never warns when not awaited)."""

    def __init__(self, owner: StreamChatResult, name: str) -> None:
        self._owner = owner
        self._name = name

    def __await__(self) -> Generator[Any, None, T]:
        result = yield from self._owner.result().__await__()
        value: T = getattr(result, self._name)
        return value


class _Field(Generic[T]):
    """A field of :class:`GenerateTextResult` of the same name, read as an awaitable."""

    def __init__(self, doc: str) -> None:
        self.__doc__ = doc
        self._name = ""

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, stream: None, owner: type) -> _Field[T]: ...
    @overload
    def __get__(self, stream: StreamChatResult, owner: type) -> _Deferred[T]: ...
    def __get__(self, stream: StreamChatResult | None, owner: type) -> _Field[T] | _Deferred[T]:
        return self if stream is None else _Deferred(stream, self._name)


class StreamChatResult:
    """A streaming call in flight. Returned at once; the loop runs as a task.

    ``run_id`` is set before the first part when the call is durable (tools and
    a session). ``full_stream`` may be iterated any number of times, each
    iteration replays from the first part and then follows live. The result
    fields are awaitables: ``await stream.text``. A failed call emits an
    ``error`` part and makes every awaitable raise the error.

    Attributes:
        run_id: The durable run id, or None.
    """

    def __init__(self, runner: Runner, run_id: str | None) -> None:
        self.run_id = run_id
        self._runner = runner
        self._parts: list[StreamPart] = []
        self._waiters: list[asyncio.Future[None]] = []
        self._done = False
        self._future: asyncio.Future[GenerateTextResult] | None = None
        self._task: asyncio.Task[None] | None = None
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return  # started on first use, inside the caller's loop
        self._ensure_started()

    # -- lifecycle -------------------------------------------------------------

    def _ensure_started(self) -> asyncio.Future[GenerateTextResult]:
        if self._future is None:
            loop = asyncio.get_running_loop()
            self._future = loop.create_future()
            self._future.add_done_callback(_mark_retrieved)
            self._task = loop.create_task(self._main())
        return self._future

    async def _main(self) -> None:
        assert self._future is not None
        try:
            result = await self._runner(self._emit)
        except asyncio.CancelledError:
            self._emit(ErrorPart(error_type="CancelledError", message="The call was cancelled."))
            self._future.cancel()
            self._close()
            raise
        except BaseException as exc:  # any failure must reach the awaitables
            self._emit(ErrorPart(error_type=type(exc).__name__, message=str(exc)))
            self._future.set_exception(exc)
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                self._close()
                raise
        else:
            self._future.set_result(result)
        self._close()

    def _emit(self, part: StreamPart) -> None:
        self._parts.append(part)
        self._wake()

    def _close(self) -> None:
        self._done = True
        self._wake()

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    def cancel(self) -> None:
        """Cancel the call. The interrupted step is not checkpointed."""
        if self._task is not None:
            self._task.cancel()

    def done(self) -> bool:
        """Whether the call has finished (successfully or not)."""
        return self._done

    # -- streams -----------------------------------------------------------------

    @property
    def full_stream(self) -> AsyncIterator[StreamPart]:
        """Every part, from the first: step-start, text-delta, tool-call, ..., finish or error."""
        return self._iterate()

    @property
    def text_stream(self) -> AsyncIterator[str]:
        """Just the text deltas."""
        return self._text()

    async def _iterate(self) -> AsyncIterator[StreamPart]:
        self._ensure_started()
        index = 0
        while True:
            while index < len(self._parts):
                yield self._parts[index]
                index += 1
            if self._done:
                return
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter

    async def _text(self) -> AsyncIterator[str]:
        async for part in self._iterate():
            if isinstance(part, TextDeltaPart):
                yield part.delta

    @property
    def parts(self) -> tuple[StreamPart, ...]:
        """The parts emitted so far."""
        return tuple(self._parts)

    # -- awaitable results --------------------------------------------------------

    async def result(self) -> GenerateTextResult:
        """The complete :class:`GenerateTextResult` once the call ends."""
        return await asyncio.shield(self._ensure_started())

    def __await__(self) -> Generator[Any, None, GenerateTextResult]:
        return self.result().__await__()

    text: _Field[str] = _Field("Awaitable: the final text.")
    output: _Field[Any] = _Field(
        "Awaitable: with ``output_type``, the validated final answer (else None)."
    )
    usage: _Field[Usage] = _Field("Awaitable: this leg's usage.")
    total_usage: _Field[Usage] = _Field("Awaitable: the whole run's cumulative usage.")
    finish_reason: _Field[str] = _Field("Awaitable: why the call ended.")
    status: _Field[str] = _Field("Awaitable: ``completed`` or ``suspended``.")
    messages: _Field[History] = _Field("Awaitable: the full history at the end of the call.")
    steps: _Field[tuple[StepResult, ...]] = _Field("Awaitable: the steps of this call.")
    pending_approvals: _Field[tuple[ToolApprovalRequest, ...]] = _Field(
        "Awaitable: gated calls awaiting a verdict."
    )


def _mark_retrieved(future: asyncio.Future[Any]) -> None:
    # A stream nobody awaits must not log "exception was never retrieved":
    # the error part already reported it.
    if not future.cancelled():
        future.exception()


@takes_options
def stream_chat(
    *,
    messages: str | Message | Sequence[Message | str],
    session: DurableSession | None = None,
    **options: Unpack[AgentOptions],
) -> StreamChatResult:
    """Start the agent loop and return a :class:`StreamChatResult` at once.

    Takes the same options as :func:`~nbdurable.generate_text`. Text streams
    token by token when the model can stream. Never raises for a bad value:
    every failure arrives as an ``error`` part and on the awaitables (an unknown
    keyword is a ``TypeError`` at once).
    """
    try:
        run_id, leg = new_call(messages, session, options, streaming=True)
    except Exception as exc:
        return StreamChatResult(_failing(exc), None)
    return StreamChatResult(leg, run_id)


@takes_options
def resume_stream_from_checkpoint(
    store: SessionStore, run_id: str, **options: Unpack[AgentOptions]
) -> StreamChatResult:
    """Streaming twin of :func:`~nbdurable.resume_from_checkpoint`; returns at once.

    An unknown ``run_id`` never raises here: the stream yields an ``error``
    part and the awaitables raise :class:`~nbdurable.CheckpointNotFoundError`.
    The settled approvals' tool-result parts stream before the new leg's first
    step-start.
    """
    return StreamChatResult(resumed(store, run_id, options, streaming=True), run_id)


def _failing(exc: Exception) -> Runner:
    async def runner(emit: Callable[[StreamPart], None]) -> GenerateTextResult:
        raise exc

    return runner
