"""Writing one verdict: the checks before it, then the store's conditional write (one wins).

What :meth:`Run.record_verdict <nbdurable.runtime.Run.record_verdict>` does once
it has read the run's pending requests and record: which request is answered,
whether the principal may decide it, whether an edit or a reply is acceptable
(:mod:`._edits`), whether an approving token is still good, and then the write
every store applies in its own transaction
(:meth:`~nbdurable.runs.Verdict.decide`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError
from ..durable._offload import offload
from ..durable._signer import expired_age, request_still_signed
from ..messages import ToolApprovalRequest, ToolApprovalResponse, VerdictSource
from ..runs import RuntimeRun, Verdict, approval_expired, check_decider, latest_verdict
from . import _lifecycle as lifecycle
from ._edits import check_edit
from ._state_events import unclaimed_event

if TYPE_CHECKING:
    from ._seam import RunControl

__all__ = ["write_verdict"]


async def write_verdict(
    runtime: RunControl,
    record: RuntimeRun,
    pending: Sequence[ToolApprovalRequest],
    approval_id: str | None,
    *,
    approved: bool,
    token: str | None,
    reason: str | None,
    max_age_ms: int | None,
    source: VerdictSource | None,
    arguments: Mapping[str, Any] | None = None,
    reply: str | None = None,
) -> None:
    """Check one verdict on ``record`` (waiting for ``pending``), then record it once.

    Every token is still verified (signature, binding, expiry) before the
    resumed leg runs the call. ``pending`` is read before ``record``, so a
    verdict that emptied it shows in the record.

    Args:
        runtime: The runtime's records, registry and signer.
        record: The run's record.
        pending: The requests the run's checkpoint waits for.
        approval_id: The request answered; None answers the one open request.
        approved: The verdict.
        token: The signed token of an approval, kept for the resumed leg.
        reason: Why, shown to the model with a denial.
        max_age_ms: Tokens older than this are refused when the verdict is recorded.
        source: Who gave the verdict and how; checked against the run's
            rule on who may decide (:func:`~nbdurable.runs.check_decider`).
        arguments: With an approval: edited arguments the call runs with
            (checked by :func:`~nbdurable.runtime._edits.check_edit`).
        reply: With a denial: the human's answer, the call's result.

    Raises:
        EditNotAllowedError: ``arguments`` for a tool that allows no edits.
        InvalidEditError: ``arguments`` that do not fit the tool's schema.
        ApprovalNotPendingError: Another verdict won, or the request is not pending.
        ApprovalExpiredError: The approval's token is older than ``max_age_ms``.
        ApproverNotAllowedError: ``source`` may not decide this call.
        ConfigurationError: No such request, or ``approval_id`` is None and not
            exactly one request is open.
    """
    edited: dict[str, Any] | None = None
    if approval_id is None:
        open_ = [r for r in pending if r.approval_id not in record.verdicts]
        if len(open_) != 1:
            answered = latest_verdict(record) if not open_ else None
            if answered is not None:  # answered meanwhile, or before
                raise answered
            if not pending:
                raise ConfigurationError(f"run {record.run_id!r} waits for no approval")
            raise ConfigurationError(
                f"run {record.run_id!r} waits for {len(open_)} approvals; name one"
            )
        approval_id = open_[0].approval_id
    request = next((r for r in pending if r.approval_id == approval_id), None)
    known = approval_id in record.decided or approval_id in record.verdicts
    if request is None and not known and record.state == "waiting_approval":
        raise ConfigurationError(f"run {record.run_id!r} has no approval {approval_id!r}")
    if arguments is not None and not approved:
        raise ConfigurationError("edited arguments come only with an approval")
    if reply is not None and approved:
        raise ConfigurationError("a reply answers the call instead of approving it")
    if request is not None and not known:
        check_decider(record, approval_id, request.tool_name, source, approved=approved)
        if arguments is not None:
            edited = check_edit(runtime.registry, record, request, arguments)
    elif arguments is not None:
        arguments = dict(arguments)  # a repeat (or a loser): the store tells which
    if approved and token is None and request is not None:
        token = request.token  # echoed: it pins this call and this run
    if approved and request is not None and not known:
        if not request_still_signed(runtime.signer, request):
            # docs/core.md: a request its own (now retired) key signed can only be
            # denied; recording an approval would read "approved" for a call that
            # then settles as a denial
            raise ConfigurationError(
                f"run {record.run_id!r}: approval {approval_id!r} was signed with a key "
                "that is no longer trusted (retired), so it can only be denied "
                "(or the run forked)"
            )
        age = expired_age(runtime.signer, token, max_age_ms)
        if age is not None and max_age_ms is not None:
            raise approval_expired(
                record.run_id,
                approval_id,
                age,
                max_age_ms,
                "pending_approvals() gives the request again with a fresh token",
            )
    response = ToolApprovalResponse(
        approval_id=approval_id,
        approved=approved,
        reason=reason,
        token=token if approved else None,
        source=source,
        arguments=arguments,
        reply=reply,
    )
    original = dict(request.input) if request is not None and edited is not None else None
    verdict = Verdict(response, tuple(r.approval_id for r in pending), original)
    stored, recorded = await offload(
        runtime.runtime_store.rt_verdict, record.run_id, verdict, now=runtime.now()
    )
    if recorded:
        # fenced: a claim that came first wrote this pending itself (claim_event)
        await offload(unclaimed_event, runtime, stored)
        runtime.wake()
        lifecycle.decided(record, verdict=response.kind, now=runtime.now())
