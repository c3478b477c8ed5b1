"""``stream_chat``: the streaming twin of ``generate_text``, returning at once."""

from __future__ import annotations

import asyncio
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Generator,
    Iterable,
    Mapping,
    Sequence,
)
from typing import Any, Generic, TypeVar

from .._deps import Deps
from ..durable.signer import ApprovalSigner
from ..durable.store import DurableSession, SessionStore
from ..history import History
from ..messages import Message, ToolApprovalRequest, ToolApprovalResponse, Usage
from ..models.base import Model
from ..tools import Tool
from .driver import Driver
from .generate import run_resumed
from .options import (
    DEFAULT_MAX_STEPS,
    ApproveToolCall,
    GenerateTextResult,
    LoopOptions,
    PrepareStep,
    StepResult,
    StopCondition,
    build_options,
)
from .parts import ErrorPart, StreamPart, TextDeltaPart
from .start import call_start, coerce_messages, session_retry, session_run_id

__all__ = ["StreamChatResult", "resume_stream_from_checkpoint", "stream_chat"]

T = TypeVar("T")
Runner = Callable[[Callable[[StreamPart], None]], Awaitable[GenerateTextResult]]


class _Deferred(Generic[T]):
    """An awaitable view of one field of the final result (never warns when not awaited)."""

    def __init__(self, owner: StreamChatResult, read: Callable[[GenerateTextResult], T]) -> None:
        self._owner = owner
        self._read = read

    def __await__(self) -> Generator[Any, None, T]:
        result = yield from self._owner.result().__await__()
        return self._read(result)


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

    @property
    def text(self) -> _Deferred[str]:
        """Awaitable: the final text."""
        return _Deferred(self, lambda r: r.text)

    @property
    def output(self) -> _Deferred[Any]:
        """Awaitable: with ``output_type``, the validated final answer (else None)."""
        return _Deferred(self, lambda r: r.output)

    @property
    def usage(self) -> _Deferred[Usage]:
        """Awaitable: this leg's usage."""
        return _Deferred(self, lambda r: r.usage)

    @property
    def total_usage(self) -> _Deferred[Usage]:
        """Awaitable: the whole run's cumulative usage."""
        return _Deferred(self, lambda r: r.total_usage)

    @property
    def finish_reason(self) -> _Deferred[str]:
        """Awaitable: why the call ended."""
        return _Deferred(self, lambda r: r.finish_reason)

    @property
    def status(self) -> _Deferred[str]:
        """Awaitable: ``completed`` or ``suspended``."""
        return _Deferred(self, lambda r: r.status)

    @property
    def messages(self) -> _Deferred[History]:
        """Awaitable: the full history at the end of the call."""
        return _Deferred(self, lambda r: r.messages)

    @property
    def steps(self) -> _Deferred[tuple[StepResult, ...]]:
        """Awaitable: the steps of this call."""
        return _Deferred(self, lambda r: r.steps)

    @property
    def pending_approvals(self) -> _Deferred[tuple[ToolApprovalRequest, ...]]:
        """Awaitable: gated calls awaiting a verdict."""
        return _Deferred(self, lambda r: r.pending_approvals)


def _mark_retrieved(future: asyncio.Future[Any]) -> None:
    # A stream nobody awaits must not log "exception was never retrieved":
    # the error part already reported it.
    if not future.cancelled():
        future.exception()


def stream_chat(
    *,
    model: Model,
    messages: str | Message | Sequence[Message | str],
    tools: Iterable[Tool] | Mapping[str, Tool] | None = None,
    instructions: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    stop_when: StopCondition | Sequence[StopCondition] | None = None,
    prepare_step: PrepareStep | None = None,
    max_tool_concurrency: int | None = None,
    approve_tool_call: ApproveToolCall | None = None,
    approval_responses: Sequence[ToolApprovalResponse] | None = None,
    approval_signer: ApprovalSigner | None = None,
    approval_max_age_ms: int | None = None,
    output_type: type[Any] | None = None,
    session: DurableSession | None = None,
    deps: Deps | None = None,
) -> StreamChatResult:
    """Start the agent loop and return a :class:`StreamChatResult` at once.

    Takes the same options as :func:`~nbdurable.generate_text`. Text streams
    token by token when the model can stream. Never raises: every failure
    arrives as an ``error`` part and on the awaitables.
    """
    try:
        options = build_options(
            model=model,
            tools=tools,
            instructions=instructions,
            max_steps=max_steps,
            stop_when=stop_when,
            prepare_step=prepare_step,
            max_tool_concurrency=max_tool_concurrency,
            approve_tool_call=approve_tool_call,
            approval_responses=approval_responses,
            approval_signer=approval_signer,
            approval_max_age_ms=approval_max_age_ms,
            deps=deps,
            output_type=output_type,
        )
        history = coerce_messages(messages)
        run_id = session_run_id(session, options)
    except Exception as exc:
        return StreamChatResult(_failing(exc), None)

    async def runner(emit: Callable[[StreamPart], None]) -> GenerateTextResult:
        retry = session_retry(session, options)
        start = await call_start(history, session, run_id, options, retry)
        store = session.store if (session is not None and run_id is not None) else None
        driver = Driver(options, start, store=store, emit=emit, streaming=True, store_retry=retry)
        return await driver.run()

    return StreamChatResult(runner, run_id)


def resume_stream_from_checkpoint(
    store: SessionStore,
    run_id: str,
    *,
    model: Model,
    tools: Iterable[Tool] | Mapping[str, Tool] | None = None,
    instructions: str | None = None,
    max_steps: int = DEFAULT_MAX_STEPS,
    stop_when: StopCondition | Sequence[StopCondition] | None = None,
    prepare_step: PrepareStep | None = None,
    max_tool_concurrency: int | None = None,
    approve_tool_call: ApproveToolCall | None = None,
    approval_responses: Sequence[ToolApprovalResponse] | None = None,
    approval_signer: ApprovalSigner | None = None,
    approval_max_age_ms: int | None = None,
    output_type: type[Any] | None = None,
    deps: Deps | None = None,
) -> StreamChatResult:
    """Streaming twin of :func:`~nbdurable.resume_from_checkpoint`; returns at once.

    An unknown ``run_id`` never raises here: the stream yields an ``error``
    part and the awaitables raise :class:`~nbdurable.CheckpointNotFoundError`.
    The settled approvals' tool-result parts stream before the new leg's first
    step-start.
    """

    def options(agent_path: tuple[str, ...]) -> LoopOptions:
        return build_options(
            model=model,
            tools=tools,
            instructions=instructions,
            max_steps=max_steps,
            stop_when=stop_when,
            prepare_step=prepare_step,
            max_tool_concurrency=max_tool_concurrency,
            approve_tool_call=approve_tool_call,
            approval_responses=approval_responses,
            approval_signer=approval_signer,
            approval_max_age_ms=approval_max_age_ms,
            deps=deps,
            output_type=output_type,
            agent_path=agent_path,
        )

    async def runner(emit: Callable[[StreamPart], None]) -> GenerateTextResult:
        return await run_resumed(store, run_id, options, emit=emit, streaming=True)

    return StreamChatResult(runner, run_id)


def _failing(exc: Exception) -> Runner:
    async def runner(emit: Callable[[StreamPart], None]) -> GenerateTextResult:
        raise exc

    return runner
