"""What a leg of an agent run starts from, whichever engine executes it.

The embedded engine and the Temporal workflow both start a leg from the run's
latest checkpoint or, for a first leg, from its session's history and its
prompt (a graph node's with its dependencies' results), and both run the loop
with the same options of the run's agent.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from .._deps import Deps
from ..durable._offload import offload
from ..durable._signer import ApprovalSigner
from ..loop._options import LoopOptions, build_options
from ..messages import Message, ToolApprovalResponse
from ..runs import RunGrants, RuntimeRun
from ._agent import Agent
from ._graphs import prompt_with_results
from ._prompts import prompt_message

if TYPE_CHECKING:
    from ._seam import RunRecords

__all__ = ["first_messages", "leg_options"]


async def first_messages(runtime: RunRecords, record: RuntimeRun) -> tuple[Message, ...]:
    """A first leg's messages: the session's latest completed history, then the prompt.

    A graph node's prompt carries its dependencies' results; failed runs of the
    session add no history.
    """
    history = await _session_history(runtime, record)
    if not record.depends_on:  # the prompt alone: no store read, no trip to a store thread
        return (*history, prompt_message(record.prompt_value))
    return (*history, await offload(_first_message, runtime, record))


def _first_message(runtime: RunRecords, record: RuntimeRun) -> Message:
    if not record.depends_on:
        return prompt_message(record.prompt_value)
    results = []
    for run_id in record.depends_on:
        dep = runtime.runtime_store.rt_get(run_id)
        if dep is not None:
            results.append((dep.node_id or dep.run_id, dep.result_text or ""))
    return prompt_with_results(record.prompt_value, results)


async def _session_history(runtime: RunRecords, record: RuntimeRun) -> Sequence[Message]:
    if record.session_id in runtime.new_sessions:
        # Made for this run at its submission here: no run of it came before.
        runtime.new_sessions.discard(record.session_id)
        return ()
    completed = await offload(runtime.runtime_store.rt_session, record.session_id, ["completed"])
    before = [r for r in completed if r.seq < record.seq]
    if not before:
        return ()
    latest = await runtime.store_retry.acall(
        "load a checkpoint", runtime.store.load, before[-1].run_id
    )
    return latest.messages if latest is not None else ()


def leg_options(
    agent: Agent,
    record: RuntimeRun,
    *,
    approval_responses: Sequence[ToolApprovalResponse] = (),
    approval_signer: ApprovalSigner | None = None,
    deps: Deps | None = None,
    approval_grants: Callable[[], RunGrants] | None = None,
) -> LoopOptions:
    """The loop options of a leg of ``record``, a run of ``agent``.

    The leg's standing approvals are the record's (as the leg's input, so a
    Temporal workflow sees the same ones on replay); ``approval_grants``, a
    function, lets an owner that rereads the record apply a grant or a
    revocation made during the leg from the next gated call on.
    """
    spec = agent.loop_options()
    spec.update(
        {"approval_responses": approval_responses, "approval_signer": approval_signer, "deps": deps}
    )
    options = build_options(**spec)
    grants = approval_grants or RunGrants.of(record.grants)
    return dataclasses.replace(options, max_steps=record.max_steps, approval_grants=grants)
