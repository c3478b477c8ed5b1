"""The journaled steps of a run's leg on Restate: every touch of the store, the model, the tools.

Each method is the body of one ``ctx.run`` of the leg's handler
(:mod:`nbdurable.restate._handler`): Restate records its result in the
invocation's journal, so a leg re-executed after its endpoint died replays the
finished steps from the journal and runs only the unfinished one. The bodies
are the ones Temporal's activities run (:mod:`nbdurable.runtime._leg_steps`). A
step answers with a plain dict (the journal holds JSON): a decision for the
handler (``retry_after``, ``needs_attention``, ``failed``) is a value, never an
exception, because Restate retries a step that raises.
"""

from __future__ import annotations

from typing import Any

from ..models._base import ModelRequest
from ..runtime import _leg_steps as bodies
from ..runtime._leg_steps import NEEDS_ATTENTION, StepDecided
from ._config import RESTATE

__all__ = ["LegSteps", "answer"]


def answer(decided: StepDecided) -> dict[str, Any]:
    """A step's decision as the journaled value the handler reads."""
    if decided.retry_after is not None:
        return {"retry_after": decided.retry_after}
    if decided.kind in (NEEDS_ATTENTION, "cancelled", "fenced"):
        return {decided.kind: decided.message}
    return {"failed": [decided.kind, decided.message]}


class LegSteps(bodies.LegSteps):
    """The steps of an agent run's leg."""

    engine = RESTATE
    leaves = "Restate leaves it alone"

    async def model(
        self, scope: dict[str, Any], step_index: int, request: ModelRequest
    ) -> dict[str, Any]:
        """One model attempt: ``{"response": json}``, or the decision (``retry_after``, ``failed``).

        On ``retry_after`` the run is in ``retry_wait`` and the handler sleeps durably.
        """
        try:
            response, _, _ = await self.ask_model(scope, step_index, request)
        except StepDecided as decided:
            return answer(decided)
        return {"response": response.model_dump_json()}

    async def tool(
        self, scope: dict[str, Any], step_index: int, call: dict[str, Any]
    ) -> dict[str, Any]:
        """One tool call: ``{"result": part}``, or the decision (``needs_attention``, ...)."""
        try:
            result = await self.call_tool(scope, step_index, call)
        except StepDecided as decided:
            return answer(decided)
        return {"result": result.model_dump(mode="json")}
