"""``generate_text`` and ``resume_from_checkpoint``: one leg of the loop, awaited to its end.

Here too the one path both loop calls and both resumes take, buffered or
streaming (:func:`new_call`, :func:`resumed`): ``stream_chat`` runs the same leg.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Unpack

from ..durable._transient import DEFAULT_STORE_RETRY_MS, StoreRetry
from ..durable.store import DurableSession, SessionStore
from ..messages import Message
from ..parts import StreamPart
from ._driver import Driver, EmitFn
from ._options import AgentOptions, GenerateTextResult, build_options, takes_options
from ._start import call_start, coerce_messages, resume_start, session_retry, session_run_id

__all__ = ["Runner", "generate_text", "new_call", "resume_from_checkpoint", "resumed"]

Runner = Callable[[EmitFn], Awaitable[GenerateTextResult]]
"""A leg ready to run: give it where its stream parts go, await its result."""


def _ignore(_: StreamPart) -> None:
    return None


def new_call(
    messages: str | Message | Sequence[Message | str],
    session: DurableSession | None,
    options: AgentOptions,
    *,
    streaming: bool,
) -> tuple[str | None, Runner]:
    """A loop call, validated now: its run id (None unless durable) and its leg.

    Args:
        messages: The call's messages.
        session: Its durable session, if any.
        options: Its agent spec.
        streaming: Call models with ``stream()`` when they have it.

    Raises:
        ConfigurationError: Invalid options or messages.
    """
    loop_options = build_options(**options)
    history = coerce_messages(messages)
    run_id = session_run_id(session, loop_options)

    async def leg(emit: EmitFn) -> GenerateTextResult:
        retry = session_retry(session, loop_options)
        start = await call_start(history, session, run_id, loop_options, retry)
        store = session.store if (session is not None and run_id is not None) else None
        driver = Driver(
            loop_options, start, store=store, emit=emit, streaming=streaming, store_retry=retry
        )
        return await driver.run()

    return run_id, leg


def resumed(store: SessionStore, run_id: str, options: AgentOptions, *, streaming: bool) -> Runner:
    """A resume leg of ``run_id``: its options are built once its checkpoint is found.

    The checkpoint says which agent path (a sub-agent's) the options are for.
    The leg raises :class:`~nbdurable.CheckpointNotFoundError` when the store
    has no checkpoint for ``run_id``.
    """

    async def leg(emit: EmitFn) -> GenerateTextResult:
        start, agent_path = await resume_start(store, run_id)
        loop_options = build_options(agent_path=agent_path, **options)
        retry = StoreRetry.for_store(store, DEFAULT_STORE_RETRY_MS, loop_options.deps.logger)
        driver = Driver(
            loop_options,
            start,
            store=store,
            emit=emit,
            streaming=streaming,
            reuse_responses=True,
            store_retry=retry,
        )
        return await driver.run()

    return leg


@takes_options
async def generate_text(
    *,
    messages: str | Message | Sequence[Message | str],
    session: DurableSession | None = None,
    **options: Unpack[AgentOptions],
) -> GenerateTextResult:
    """Run the agent loop to completion or suspension.

    Args:
        messages: The conversation so far; a string is one user message.
        session: ``DurableSession(store, run_id)`` to checkpoint every step
            (only calls with tools checkpoint).
        **options: The agent spec: ``model`` and any other key of
            :class:`~nbdurable.loop.AgentOptions` (``tools``, ``instructions``,
            ``max_steps``, ``stop_when``, ``output_type``, ...), each documented there.

    Returns:
        The leg's :class:`GenerateTextResult`.

    Raises:
        ConfigurationError: Invalid options.
        TypeError: An unknown keyword, or no ``model``.
        Exception: Whatever the model raised (tool errors never raise).
    """
    _, leg = new_call(messages, session, options, streaming=False)
    return await leg(_ignore)


@takes_options
async def resume_from_checkpoint(
    store: SessionStore, run_id: str, **options: Unpack[AgentOptions]
) -> GenerateTextResult:
    """Continue a durable run from its latest checkpoint.

    Takes the options of :func:`generate_text` except ``messages`` (the
    checkpoint's history) and ``session`` (``store`` + ``run_id``). Pending
    approvals are settled from ``approval_responses``: approved calls run,
    denied ones become is_error results with the reason, unanswered ones are
    denied. ``step_index`` and cumulative usage continue; the result's
    ``usage`` is this leg's own.

    Raises:
        CheckpointNotFoundError: The store has no checkpoint for ``run_id``.
    """
    return await resumed(store, run_id, options, streaming=False)(_ignore)
