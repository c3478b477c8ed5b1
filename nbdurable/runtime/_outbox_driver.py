"""The driver of a leg whose effects run outside this loop: Temporal's and Restate's base.

A workflow (Temporal) and a handler (Restate) both run the pure step machine
where no I/O may happen: each effect with I/O becomes an activity or a
journaled step, and the stream parts and checkpoints the loop emits collect in
an *outbox* (ordered, tagged with the event log they belong to) that the engine
writes before its next effect. What both drivers do the same way is here: the
outbox, the checkpoint's size check, whose call an effect makes (``scope``),
and how an agent tool's failure reaches the parent model. Each engine's
subclass turns the model and tool calls into its own effects.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, Self, TypeVar

from .._errors import LimitExceededError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._checkpoint_size import CheckpointSize
from ..loop._driver import Driver
from ..loop._effects import ToolInvocation, ToolOutcome, error_result
from ..loop._options import LoopOptions
from ..loop._start import LegStart
from ..loop._subagent import AgentTool, child_run_id, child_start, subagent_prompt
from ..parts import StreamPart
from ._agent import Agent
from ._limits import Limits
from ._outcome import LegEnded

__all__ = ["OutboxDriver", "SubAgentFailed"]

L = TypeVar("L")


class SubAgentFailed(Exception):
    """A sub-agent's model call failed; the message is the error as the embedded driver words it."""


class OutboxDriver(Driver, Generic[L]):
    """Drives one agent loop (the run's, or a sub-agent's) whose effects run elsewhere.

    Args:
        options: The loop's options.
        start: Where the loop starts.
        leg: What the engine's effects need, shared with sub-agents (Temporal:
            the workflow's settings; Restate: the context, the steps, the settings).
        run_id: The run the leg belongs to.
        agent: The run's registration.
        limits: The executing runtime's limits.
        outbox: Parts and checkpoints not yet written (shared with sub-agents).
        path: Names of the agent tools from the run's agent to this loop's agent.
        log: The event log this loop writes: the run's, a sub-agent's key, or
            None for a sub-agent without tools (it keeps no log, as embedded).
    """

    traced = False  # the loop replays: its effects (model, tools) make the spans

    run_fates: ClassVar[tuple[type[BaseException], ...]] = (LegEnded, LimitExceededError)
    """What a sub-agent raises that decides the run, not the sub-agent's answer."""

    def __init__(
        self,
        options: LoopOptions,
        start: LegStart,
        *,
        leg: L,
        run_id: str,
        agent: Agent,
        limits: Limits,
        outbox: list[dict[str, Any]],
        path: tuple[str, ...] = (),
        log: str | None,
    ) -> None:
        super().__init__(options, start, emit=self._collect)
        self.leg = leg
        self.run_id = run_id
        self.agent = agent
        self.limits = limits
        self.outbox = outbox
        self.path = path
        self.log = log
        self._checkpoint_size = CheckpointSize()

    @property
    def scope(self) -> dict[str, Any]:
        """Whose call an effect makes: the run, the agent-tool path, the event log."""
        return {"run_id": self.run_id, "path": list(self.path), "log": self.log}

    def outbox_value(self, value: StreamPart | AgentCheckpoint) -> Any:
        """What the outbox holds of a part or a checkpoint: its JSON (an activity's argument).

        An engine whose steps run in the leg's own process (Restate) holds the
        object itself: nothing to encode, and a checkpoint's messages stay the
        objects the store saw last (it writes only the new ones).
        """
        return value.model_dump(mode="json")

    def _collect(self, part: StreamPart) -> None:
        if self.log is not None:
            self.outbox.append({"log": self.log, "part": self.outbox_value(part)})

    async def save_checkpoint(self, checkpoint: AgentCheckpoint) -> None:
        """Queue the checkpoint in the outbox (written before the next effect).

        Raises:
            LimitExceededError: The checkpoint is over ``max_payload_bytes``.
        """
        # counted by what is new since the last save, as the embedded driver does
        size = self._checkpoint_size.measure(checkpoint, self.history_extends(checkpoint))
        self.limits.check_payload(size)
        if self.log is not None:
            self.outbox.append({"log": self.log, "checkpoint": self.outbox_value(checkpoint)})

    async def run_agent_tool(self, tool: AgentTool, invocation: ToolInvocation) -> ToolOutcome:
        """A sub-agent in this loop; its failure is the parent model's tool result.

        Raises:
            Exception: One of :attr:`run_fates`: it decides the run.
        """
        call = invocation.call
        try:
            return await self.run_subagent(tool, invocation)
        except self.run_fates:
            raise
        except SubAgentFailed as exc:
            return ToolOutcome(result=error_result(call, str(exc)))
        except Exception as exc:  # like the embedded driver: the parent model reacts
            return ToolOutcome(result=error_result(call, f"{type(exc).__name__}: {exc}"))

    async def child_driver(
        self, agent: AgentTool, options: LoopOptions, invocation: ToolInvocation
    ) -> tuple[Driver, bool]:
        """A sub-agent as a child driver of this loop; with tools it checkpoints under its key."""
        prompt = subagent_prompt(invocation)
        durable = bool(agent.tools)
        start = LegStart(messages=prompt)
        log = child_run_id(self.log or self.run_id, agent.name, invocation.call.tool_call_id)
        if durable:
            saved = await self.begin_child(log)
            existing = None if saved is None else AgentCheckpoint.model_validate(saved)
            start = child_start(prompt, log, existing)
        path = (*self.path, agent.name)
        return self.child(options, start, path, log if durable else None), durable

    async def begin_child(self, log: str) -> dict[str, Any] | None:
        """Write the outbox, then mark the sub-agent's log started; its checkpoint (JSON)."""
        raise NotImplementedError

    def child(
        self, options: LoopOptions, start: LegStart, path: tuple[str, ...], log: str | None
    ) -> Self:
        """A driver of this engine for the sub-agent at ``path``, sharing this leg and outbox."""
        return type(self)(
            options,
            start,
            leg=self.leg,
            run_id=self.run_id,
            agent=self.agent,
            limits=self.limits,
            outbox=self.outbox,
            path=path,
            log=log,
        )
