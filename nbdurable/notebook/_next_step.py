"""What happens to a run after a verdict, said truthfully in one phrase.

An approval, a denial, a retry or a settle only records a decision: whether the
run then goes on depends on who serves its agent. A confirmation that says "the
run resumes" when no runtime serves the agent is a promise the product breaks, so
every confirmation (a run widget's card, the dashboard, ``%durable approve``,
``%durable retry``) ends with :func:`next_step`: it resumes here (this kernel's
runtime serves the agent), it resumes on worker X (another live runtime took it),
or it waits for a worker serving the agent, and how to provide one.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace
from typing import TYPE_CHECKING

from .._errors import LateResultUndecidedError
from ..durable._offload import offload
from ..durable.store import RunStore
from ..messages import VerdictSource
from ..runs import (
    ACTIVE_STATES,
    BUSY_STATES,
    TERMINAL_STATES,
    AttentionAction,
    RuntimeRun,
    definition_matches,
    describe_holder,
    lease_holder,
    of_engine,
    process_gone,
)
from ..runtime._attention import decide_attention
from ..runtime._checked_verdicts import Outcome
from ..runtime._origin import importable
from ._session import current_url, deciding_user

if TYPE_CHECKING:
    from ..runtime._runtime import DurableRuntime

__all__ = ["SETTLE_S", "attended", "confirmed", "next_step", "provide", "serves_here"]

SETTLE_S = 1.5
"""How long :func:`next_step` watches for another runtime's claim before saying the
run waits (a worker polling the store takes a pending run within its poll interval)."""


def serves_here(runtime: DurableRuntime, record: RuntimeRun) -> bool:
    """Whether this runtime's engine executes ``record``.

    It does when it serves the run's agent and version with the definition the run
    was submitted under, on the run's engine.
    """
    if not of_engine(record, runtime.engine.name) or runtime.engine.home_loop() is None:
        return False
    return definition_matches(record, runtime.registry.definitions()) is True


def _held_elsewhere(runtime: DurableRuntime, record: RuntimeRun, now: int) -> str | None:
    """The live runtime holding ``record`` that is not this one, if any."""
    owner = record.lease_owner
    if record.state not in ACTIVE_STATES or not owner:
        return None
    if owner in (runtime.owner_id, lease_holder(runtime.owner_id)):
        return None
    if (record.lease_expires_at or 0) <= now or process_gone(owner):
        return None
    return describe_holder(owner)


async def next_step(
    runtime: DurableRuntime,
    run_id: str,
    *,
    store_url: str | None = None,
    settle_s: float = SETTLE_S,
) -> str:
    """What happens to ``run_id`` next, as the tail of a confirmation.

    ``the run resumes here``, ``the run resumes on worker runtime-… (pid 42 on
    host)``, or ``the run waits for a worker serving janitor v1: …`` (with the
    command or the import that provides one), or that it still waits for its other
    approvals. Empty for a run that ended, unless this kernel serves it and it
    ended by running: it resumed here, within the decision's own awaits.

    Args:
        runtime: The kernel's runtime.
        run_id: The run a verdict was just recorded on.
        store_url: The store's URL, for the ``nbdurable worker`` command it suggests.
        settle_s: How long to watch for another runtime's claim of a pending run.
    """
    store = runtime.store
    if not isinstance(store, RunStore):
        return ""
    record = await offload(store.rt_get, run_id)
    if record is not None and record.state == "waiting_approval":
        return "the run goes on once its other approvals are answered"
    if record is None:
        return ""
    agent = f"{record.agent_id} v{record.agent_version}"
    # A run this kernel serves resumes on this loop, possibly within the decision's
    # own awaits: read now, it may have ended already, and that was its next step.
    ended_by_running = record.state in TERMINAL_STATES and record.state != "cancelled"
    resumed_here = record.state in BUSY_STATES or ended_by_running
    if resumed_here and serves_here(runtime, record):
        runtime.wake()
        return f"the run resumes here (this kernel serves {agent})"
    if record.state not in BUSY_STATES:
        return ""
    deadline = time.monotonic() + settle_s
    while True:
        held = _held_elsewhere(runtime, record, int(time.time() * 1000))
        if held is not None:
            return f"the run resumes on worker {held}"
        if record.state not in BUSY_STATES or time.monotonic() >= deadline:
            break
        await asyncio.sleep(0.05)
        fresh = await offload(store.rt_get, run_id)
        if fresh is None:
            return ""
        record = fresh
    if record.state not in BUSY_STATES:
        return f"the run is {record.state}"
    return f"the run waits for a worker serving {agent}: {provide(record, store_url)}"


def provide(record: RuntimeRun, store_url: str | None) -> str:
    """How to provide a run's agent, from where its definition lives (its recorded origin)."""
    url = store_url or "STORE_URL"
    run_id, origin = record.run_id, record.agent_origin
    found = importable(origin)
    if found is not None:
        module, attribute = found
        return (
            f"%durable resume {run_id} imports it from {origin} (`from {module} import "
            f"{attribute.split('.')[0]}`), or start `nbdurable worker --store {url} "
            f"--agents {origin}`"
        )
    where = f" ({origin})" if origin else ""
    return (
        f"run the cell defining agent {record.agent_id!r} version {record.agent_version!r}"
        f"{where}, then %durable resume {run_id}, or start "
        f"`nbdurable worker --store {url} --agents MODULE:AGENTS`"
    )


async def confirmed(runtime: DurableRuntime, run_id: str, said: str) -> str:
    """``said`` (a recorded verdict's line) followed by what happens next, when anything does."""
    then = await next_step(runtime, run_id, store_url=current_url())
    return f"{said}; {then}" if then else said


async def attended(
    runtime: DurableRuntime,
    run_id: str,
    action: AttentionAction,
    *,
    token: object,
    reason: str | None = None,
) -> Outcome:
    """A widget's Retry or Settle, decided and confirmed: what became of it, in one line.

    Goes through :func:`~nbdurable.runtime._attention.decide_attention` as the
    notebook's user, ``via="widget"``; a late result it will not run again blind
    is said with the magics that decide it. A recorded decision's line says what
    happens next (:func:`confirmed`).
    """
    command = f"%durable retry {run_id}"
    try:
        outcome = await decide_attention(
            runtime,
            run_id,
            action,
            token=token,
            source=VerdictSource(by=deciding_user(), via="widget"),
            reason=reason,
            use_hint=f"{command} --use-late-result",
            rerun_hint=f"{command} --rerun",
        )
    except LateResultUndecidedError as refused:  # the magic decides a late result
        return Outcome("error", str(refused))
    if not outcome.recorded:
        return outcome
    return replace(outcome, message=await confirmed(runtime, run_id, outcome.message))
