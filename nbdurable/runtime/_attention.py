"""Retry or settle a ``needs_attention`` run from a front end, signed and recorded like a verdict.

A run stops in ``needs_attention`` when a ``manual`` tool call was interrupted
(or a graph node paused on a failed dependency). A person decides: **Retry**
(run the call again) or **Settle** (record it as a denied call, with a reason,
and let the run go on). A front end (a run widget, the dashboard, ``%durable``)
gets a token this process signed, bound to the run, the action, the run's
fence and the number of decisions taken on the run so far; it sends the token
back with the click. The token is verified before anything changes, then one
decision per stop is claimed through the store's conditional notice claim (of
two clicks, from any views or processes, exactly one acts), the run goes on,
and the decision is kept in :attr:`~nbdurable.runs.RuntimeRun.decided` under
``retry@FENCE.N`` / ``settle@FENCE.N`` with who gave it and how
(:class:`~nbdurable.messages.VerdictSource`), as an approval's verdict is.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from .._errors import ApproverNotAllowedError
from ..durable._offload import offload
from ..durable._signer import expired_age
from ..messages import VerdictSource
from ..runs import (
    AttentionAction,
    Decision,
    RunPatch,
    RuntimeRun,
    attention_key,
    check_decider,
    undecided_late_results,
)
from ._checked_verdicts import Outcome
from ._in_flight import verdict_in_flight
from ._late_results import blind_retry_error
from ._run import Run

if TYPE_CHECKING:
    from ._seam import RunServices

__all__ = ["attention_token", "decide_attention"]

_KIND = "attention"
"""The signed payload's ``kind``: such a token never passes for an approval's."""


def attention_token(runtime: RunServices, record: RuntimeRun, action: AttentionAction) -> str:
    """A token for one click on ``action`` of ``record`` as it is now (its current stop)."""
    payload = {
        "kind": _KIND,
        "action": action,
        "run_id": record.run_id,
        "fence": record.fence,
        "decision": attention_key(record, action)[1],
    }
    return runtime.signer.sign_payload(payload)


async def decide_attention(
    runtime: RunServices,
    run_id: str,
    action: AttentionAction,
    *,
    token: object,
    source: VerdictSource,
    reason: str | None = None,
    rerun: bool = False,
    use_hint: str = "await run.use_late_result()",
    rerun_hint: str = "await run.retry(rerun=True)",
) -> Outcome:
    """Retry or settle ``run_id`` with the front end's token; the outcome says what became of it.

    The token must verify with ``runtime.signer``, be an attention token for
    this run and ``action``, name the run's current fence and decision number
    (the stop the button was shown for) and be younger than the runtime's
    ``approval_max_age_ms``; the run's rule on who may decide its tools'
    calls (``Agent(approvers=...)``) applies to the interrupted calls. Then
    the decision is claimed once (a second click anywhere gets ``stale``), the
    run goes on (:meth:`Run.retry` / :meth:`Run.deny`) and the decision is
    recorded with ``source``.

    Args:
        runtime: The runtime holding the signer and the store.
        run_id: The run.
        action: ``retry`` (run the interrupted call again) or ``settle``
            (record it as a denied call and go on).
        token: The token :func:`attention_token` gave the front end.
        source: Who decides, and how (recorded).
        reason: Why, for a settle (the model sees it as the call's error result).
        rerun: Retry even a call with a late result (it runs a second time).
        use_hint: How to use a late result instead, in the front end's words.
        rerun_hint: How to retry anyway, in the front end's words.

    Returns:
        ``approved`` (retried) or ``denied`` (settled) when this decision acted;
        ``invalid token``, ``expired``, ``stale`` (decided already, or the run
        moved on), ``not allowed`` or ``error`` when nothing changed.

    Raises:
        LateResultUndecidedError: A retry of a call with a late result, without
            ``rerun`` (nothing changed; the message uses the hints).
    """
    run = Run(runtime, run_id)
    with verdict_in_flight(run_id):
        record = await offload(run.record)
        if record.state != "needs_attention":
            return Outcome("stale", f"already handled: the run is {record.state}")
        payload = runtime.signer.verify(token)
        if (
            payload is None
            or payload.get("kind") != _KIND
            or payload.get("action") != action
            or payload.get("run_id") != run_id
        ):
            return Outcome("invalid token", "invalid token: nothing was done, the run waits")
        key, number = attention_key(record, action)
        if payload.get("fence") != record.fence or payload.get("decision") != number:
            return Outcome("stale", "already handled: the run stopped again since; look again")
        if expired_age(runtime.signer, token, runtime.approval_max_age_ms) is not None:
            return Outcome("expired", "this button's token expired: nothing was done; look again")
        store = runtime.runtime_store
        interrupted = [i for i in await offload(store.rt_intents, run_id) if i.state == "started"]
        try:
            for intent in interrupted:
                check_decider(
                    record,
                    intent.tool_call_id,
                    intent.tool_name,
                    source,
                    approved=action == "retry",
                )
        except ApproverNotAllowedError as refused:
            return Outcome("not allowed", f"not allowed: {refused}", refusal=refused)
        if action == "retry" and not rerun:
            late = undecided_late_results(record, interrupted)
            if late:  # before the claim: nothing is used up by a refusal
                raise blind_retry_error(run_id, late, use=use_hint, rerun=rerun_hint)
        claimed = await offload(store.rt_claim_notices, run_id, [f"attention-{key}"])
        if not claimed:
            return Outcome("stale", "already handled elsewhere (another click or process)")
        if action == "retry":
            await run.retry(rerun=rerun)
        else:
            await run.deny(reason=reason or "Denied after an interruption.")
        token_sha = hashlib.sha256(str(token).encode()).hexdigest()
        entry = Decision(
            approved=action == "retry",
            reason=reason if action == "settle" else None,
            token_sha256=token_sha,
            at=runtime.now(),
            source=source,
        )
        # after the change: the record never says "retried" for a run that was not
        fresh = await offload(run.record)
        await offload(store.rt_update, run_id, RunPatch(decided={**fresh.decided, key: entry}))
    if action == "retry":
        return Outcome("approved", "retried")
    return Outcome("denied", f"settled: {reason}" if reason else "settled")
