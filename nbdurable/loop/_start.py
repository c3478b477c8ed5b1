"""Where a leg starts: a call's messages and session, or a stored checkpoint."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .._errors import CheckpointNotFoundError, ConfigurationError
from ..durable._checkpoint import AgentCheckpoint, ForkPoint
from ..durable._offload import offload
from ..durable._transient import StoreRetry
from ..durable.store import DurableSession, SessionStore
from ..messages import Message, TextPart, Usage, user
from ._options import LoopOptions

__all__ = [
    "LegStart",
    "call_start",
    "coerce_messages",
    "leg_start_from_checkpoint",
    "resume_start",
    "session_retry",
    "session_run_id",
]


@dataclass(frozen=True)
class LegStart:
    """Where a leg starts.

    Attributes:
        messages: History so far (the checkpoint's, or the caller's).
        next_step_index: Index the next step gets.
        run_usage: Cumulative usage before this leg.
        run_id: The durable run id (None without a session or tools).
        durable: Whether to save checkpoints.
        completed: The stored checkpoint when resuming a completed run (no new step).
        known_approvals: Approval ids pending in the checkpoint (sub-agents' included),
            so verdicts that match nothing can be reported.
        forked_from: The fork point the run's checkpoints carry (a forked run's lineage).
    """

    messages: Sequence[Message]
    next_step_index: int = 0
    run_usage: Usage = Usage()
    run_id: str | None = None
    durable: bool = False
    completed: AgentCheckpoint | None = None
    known_approvals: frozenset[str] = frozenset()
    forked_from: ForkPoint | None = None


def leg_start_from_checkpoint(checkpoint: AgentCheckpoint) -> LegStart:
    """The start of a leg that continues ``checkpoint``."""
    return LegStart(
        messages=checkpoint.messages,
        next_step_index=checkpoint.step_index + 1,
        run_usage=checkpoint.usage,
        run_id=checkpoint.run_id,
        durable=True,
        completed=checkpoint if checkpoint.status == "completed" else None,
        known_approvals=frozenset(r.approval_id for r in checkpoint.pending_approvals),
        forked_from=checkpoint.forked_from,
    )


def coerce_messages(messages: str | Message | Sequence[Message | str]) -> tuple[Message, ...]:
    """Accept a prompt string, one message or a sequence; strings become user messages."""
    if isinstance(messages, (str, Message)):
        messages = [messages]
    result = tuple(user(m) if isinstance(m, str) else m for m in messages)
    if not result:
        raise ConfigurationError("messages must not be empty")
    for message in result:
        if not isinstance(message, Message):
            raise ConfigurationError(f"not a Message: {message!r}")
        if message.role == "user" and all(
            isinstance(p, TextPart) and not p.text.strip() for p in message.content
        ):  # what runtime.submit refuses too: the model would be asked about nothing
            raise ConfigurationError("a user message (the prompt) must not be blank")
    return result


def session_run_id(session: DurableSession | None, options: LoopOptions) -> str | None:
    """The run id of a durable call (tools and a session), else None."""
    if session is None or not options.tools:
        return None
    if not isinstance(session, DurableSession):
        raise ConfigurationError("session must be a DurableSession(store, run_id=None)")
    return session.run_id or options.deps.generate_id()


def session_retry(session: DurableSession | None, options: LoopOptions) -> StoreRetry | None:
    """The retry of a durable call's store calls (``DurableSession.store_retry_ms``)."""
    if session is None:
        return None
    return StoreRetry.for_store(session.store, session.store_retry_ms, options.deps.logger)


async def call_start(
    messages: tuple[Message, ...],
    session: DurableSession | None,
    run_id: str | None,
    options: LoopOptions,
    retry: StoreRetry | None = None,
) -> LegStart:
    """Where a plain call starts; a run id the store knows continues its counters."""
    if run_id is None or session is None:
        return LegStart(messages=messages)
    try:
        if retry is None:
            existing = await offload(session.store.load, run_id)
        else:
            existing = await retry.acall("load a checkpoint", session.store.load, run_id)
    except Exception as exc:
        options.deps.logger.error("nbdurable: loading run %s failed: %r", run_id, exc)
        existing = None
    if existing is None:
        return LegStart(messages=messages, run_id=run_id, durable=True)
    return LegStart(
        messages=messages,
        next_step_index=existing.step_index + 1,
        run_usage=existing.usage,
        run_id=run_id,
        durable=True,
    )


async def resume_start(store: SessionStore, run_id: str) -> tuple[LegStart, tuple[str, ...]]:
    """Load the latest checkpoint of ``run_id`` as the start of a new leg.

    Returns:
        The leg's start and the agent path the checkpoint was saved under.

    Raises:
        CheckpointNotFoundError: The store has no checkpoint for ``run_id``.
    """
    checkpoint = await offload(store.load, run_id)
    if checkpoint is None:
        raise CheckpointNotFoundError(run_id)
    return leg_start_from_checkpoint(checkpoint), checkpoint.agent_path
