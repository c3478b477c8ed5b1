"""Granting and revoking standing approvals on a runtime run (behind ``Run.grant``/``revoke``).

A grant is signed by the runtime's approval signer, kept in the run record
(any process, either engine, reads it there) and announced by a
``grant_added`` event; ``revoke`` records the grant's id as revoked and writes
``grant_revoked``. Each leg hands the record's grants to the loop, which
verifies them at every gated call (:mod:`nbdurable.runs`).

A grant made while the run waits on calls it covers approves those calls too
(their verdicts carry the grant's id, as a covered call's do). A grant made
while a leg runs covers that leg's later calls on the embedded engine (the
owner rereads the record as it writes it); on the Temporal engine it applies
from the next leg, whose input carries the record.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import ApprovalNotPendingError, ConfigurationError
from ..durable._offload import offload
from ..events._model import GRANT_ADDED, GRANT_REVOKED, NewEvent
from ..messages import ToolApprovalResponse, VerdictSource
from ..runs import Grant, RunGrants, Verdict, check_decider, claimed_user, sign_grant
from . import _lifecycle as lifecycle
from ._state_events import unclaimed_event

if TYPE_CHECKING:
    from ._run import Run

__all__ = ["DEFAULT_GRANT_MINUTES", "add_grant", "revoke_grant"]

DEFAULT_GRANT_MINUTES = 30
_VIA = frozenset({"api", "magic", "widget", "cli", "http"})


def _duration_ms(minutes: float | None, seconds: float | None) -> int:
    if minutes is not None and seconds is not None:
        raise ConfigurationError("give a grant's duration in minutes= or seconds=, not both")
    if minutes is None and seconds is None:
        minutes = DEFAULT_GRANT_MINUTES
    value = seconds if seconds is not None else minutes
    total = (value or 0) * (1 if seconds is not None else 60)
    if isinstance(value, bool) or not isinstance(value, int | float) or not total > 0:
        raise ConfigurationError(f"a grant's duration must be positive, not {value!r}")
    return int(total * 1000)


async def add_grant(
    run: Run,
    tool: str,
    *,
    minutes: float | None,
    seconds: float | None,
    match: Mapping[str, Any] | None,
    agent_path: Sequence[str],
    by: str | None,
    via: str,
) -> Grant:
    """Sign a grant for ``run``, record it, announce it, and settle the calls it covers.

    Raises:
        ConfigurationError: A finished run, an invalid duration, rule or path,
            or a tool the run's agent (when registered here) does not have.
        ApproverNotAllowedError: The agent names who may decide the tool's
            calls, and the granter is not among them (or is the run's
            submitter where the submitter may not approve).
    """
    if via not in _VIA:
        raise ConfigurationError(f"via must be one of {sorted(_VIA)}, not {via!r}")
    if isinstance(agent_path, str):
        raise ConfigurationError("agent_path is a sequence of agent names, not a string")
    runtime = run.runtime
    record = await offload(run.record)
    if record.finished:
        raise ConfigurationError(f"run {run.run_id!r} is {record.state}: there is nothing to grant")
    agent = runtime.registry.get(record.agent_id, record.agent_version)
    if agent is not None and not agent_path and tool not in agent.tool_map:
        tools = ", ".join(sorted(agent.tool_map)) or "none"
        raise ConfigurationError(f"agent {record.agent_id!r} has no tool {tool!r} (tools: {tools})")
    granted_by = by if by is not None else claimed_user()
    # A grant decides calls ahead of time: only someone who may decide them may grant it.
    check_decider(
        record, f"grant of {tool}", tool, VerdictSource(by=granted_by, via=via), approved=True
    )
    now = runtime.now()
    grant = sign_grant(
        runtime.signer,
        grant_id=f"grant_{uuid.uuid4().hex[:16]}",
        run_id=run.run_id,
        tool=tool,
        expires_at=now + _duration_ms(minutes, seconds),
        match=match,
        agent_path=agent_path,
        granted_by=granted_by,
        via=via,
    )
    await offload(runtime.runtime_store.rt_grants, run.run_id, add=grant.token, now=now)
    await offload(_announce, run, GRANT_ADDED, grant.event_payload())
    await _settle_waiting(run, grant)
    runtime.wake()
    return grant


async def revoke_grant(run: Run, grant_id: str, *, by: str | None, via: str) -> None:
    """Record ``grant_id`` as revoked on ``run``: no gated call is covered by it from now on.

    Revoking twice is a no-op.

    Raises:
        ConfigurationError: The run has no grant ``grant_id``.
    """
    runtime = run.runtime
    record = await offload(run.record)
    grants = RunGrants.of(record.grants)
    known = {g.grant_id for g in grants.verified(runtime.signer, run.run_id)}
    if grant_id not in known:
        raise ConfigurationError(f"run {run.run_id!r} has no grant {grant_id!r}")
    if grant_id in grants.revoked:
        return
    await offload(runtime.runtime_store.rt_grants, run.run_id, revoke=grant_id, now=runtime.now())
    await offload(
        _announce,
        run,
        GRANT_REVOKED,
        {"grant_id": grant_id, "revoked_by": by if by is not None else claimed_user(), "via": via},
    )


def _announce(run: Run, event_type: str, payload: dict[str, Any]) -> None:
    """Append the grant's event; the record is the authority, so a failed append is only logged."""
    runtime = run.runtime
    event = NewEvent(type=event_type, payload=payload, created_at=runtime.now())
    try:
        runtime.store_retry.call(
            "write an event", runtime.event_store.append_events, run.run_id, [event]
        )
    except Exception as exc:
        runtime.deps.logger.error(
            "nbdurable: %s event of %s failed: %r", event_type, run.run_id, exc
        )


async def _settle_waiting(run: Run, grant: Grant) -> None:
    """Approve the pending calls ``grant`` covers (a verdict decided elsewhere first wins)."""
    runtime = run.runtime
    requests = await run.pending_approvals()
    if not requests:
        return
    pending_ids = tuple(r.approval_id for r in requests)
    source = VerdictSource(by=grant.granted_by, via="grant", grant_id=grant.grant_id)
    for request in requests:
        now = runtime.now()
        if not grant.covers(request.tool_name, request.input, request.agent_path, now):
            continue
        response = ToolApprovalResponse(
            approval_id=request.approval_id, approved=True, token=request.token, source=source
        )
        before = await offload(run.record)
        try:
            verdict = Verdict(response, pending_ids)
            stored, recorded = await offload(
                runtime.runtime_store.rt_verdict, run.run_id, verdict, now=now
            )
        except ApprovalNotPendingError:
            continue  # decided meanwhile
        if recorded:
            await offload(unclaimed_event, runtime, stored)  # fenced, as a verdict's
            lifecycle.decided(before, verdict="approved", now=now)
