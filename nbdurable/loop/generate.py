"""``generate_text`` and ``resume_from_checkpoint``: one leg of the loop, awaited to its end."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .._deps import Deps
from ..durable.signer import ApprovalSigner
from ..durable.store import DurableSession, SessionStore
from ..durable.transient import DEFAULT_STORE_RETRY_MS, StoreRetry
from ..messages import Message, ToolApprovalResponse
from ..models.base import Model
from ..tools import Tool
from .driver import Driver, EmitFn
from .options import (
    DEFAULT_MAX_STEPS,
    ApproveToolCall,
    GenerateTextResult,
    LoopOptions,
    PrepareStep,
    StopCondition,
    build_options,
)
from .parts import StreamPart
from .start import call_start, coerce_messages, resume_start, session_retry, session_run_id

__all__ = ["generate_text", "resume_from_checkpoint", "run_resumed"]


def _ignore(_: StreamPart) -> None:
    return None


async def run_resumed(
    store: SessionStore,
    run_id: str,
    options: Callable[[tuple[str, ...]], LoopOptions],
    *,
    emit: EmitFn = _ignore,
    streaming: bool = False,
) -> GenerateTextResult:
    """A resume leg of ``run_id``: both resume functions, buffered and streaming.

    Args:
        store: The run's store.
        run_id: The run to continue.
        options: The caller's options for the agent path the checkpoint was saved
            under (built after the checkpoint is found).
        emit: Receives every stream part.
        streaming: Call models with ``stream()`` when they have it.

    Raises:
        CheckpointNotFoundError: The store has no checkpoint for ``run_id``.
    """
    start, agent_path = await resume_start(store, run_id)
    loop_options = options(agent_path)
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


async def generate_text(
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
) -> GenerateTextResult:
    """Run the agent loop to completion or suspension.

    Args:
        model: The model (see :class:`~nbdurable.models.Model`).
        messages: The conversation so far; a string is one user message.
        tools: Tools the model may call (a list or a name -> tool mapping).
        instructions: System instructions sent with every model call.
        max_steps: Runaway guard: the run ends (``finish_reason="max_steps"``)
            once it has this many steps, counted across legs.
        stop_when: Stop conditions checked after each tool step, e.g.
            ``total_tokens_exceed(10_000)``; they see the whole run's usage.
        prepare_step: Called before each step; may return a
            :class:`PrepareStepResult` overriding model, tools, messages or
            instructions for that step.
        max_tool_concurrency: How many calls of one batch run at once (None: all).
        approve_tool_call: Server-mode approver for gated calls; without it
            gated calls suspend the run (client mode).
        approval_responses: Verdicts for calls awaiting approval in ``messages``.
        approval_signer: Signs approval requests and verifies returned tokens.
        approval_max_age_ms: Tokens this old or older are refused.
        output_type: Structured output: the final answer must be JSON of this type
            (a pydantic model, dataclass or TypedDict); the result's ``output``
            holds it validated. A failed validation is an ``OutputValidationError``.
        session: ``DurableSession(store, run_id)`` to checkpoint every step
            (only calls with tools checkpoint).
        deps: Clock, id generator and logger.

    Returns:
        The leg's :class:`GenerateTextResult`.

    Raises:
        ConfigurationError: Invalid options.
        Exception: Whatever the model raised (tool errors never raise).
    """
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
    retry = session_retry(session, options)
    start = await call_start(history, session, run_id, options, retry)
    store = session.store if (session is not None and run_id is not None) else None
    return await Driver(options, start, store=store, store_retry=retry).run()


async def resume_from_checkpoint(
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

    return await run_resumed(store, run_id, options)
