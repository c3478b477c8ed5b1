"""Verdicts on a run's approvals: where they come from, and recording one, once.

A verdict is recorded on the run record in one rule (:meth:`Verdict.decide`),
which every store applies inside its own transaction
(:meth:`~nbdurable.durable.store.RunStore.rt_verdict`): of two
verdicts on one approval, from any processes, exactly one wins. The record keeps
each as a :class:`~nbdurable.runs.Decision`. Who may decide is the run's rule
(:mod:`._deciders`); the checked path from a front end (a token to verify) is
:func:`~nbdurable.runtime._checked_verdicts.submit_verdict`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._errors import ApprovalExpiredError, ApprovalNotPendingError, ConfigurationError
from ..messages import ToolApprovalResponse, VerdictSource
from ._deciders import claimed_user, valid_name
from ._patch import RunPatch
from ._record import Decision, RuntimeRun

__all__ = [
    "VIAS",
    "Verdict",
    "approval_expired",
    "claimed_source",
    "decision",
    "decided_phrase",
    "latest_verdict",
    "verdict_line",
    "who_decided",
]

VIAS = frozenset({"widget", "magic", "cli", "http", "link", "api", "grant"})
"""How a verdict may be given (``VerdictSource.via``)."""


def claimed_source(by: str | None, via: str) -> VerdictSource:
    """The source of a verdict from an unauthenticated path: ``by`` or the claimed user.

    Raises:
        ConfigurationError: A blank ``by``, or ``via`` not one of :data:`VIAS`.
    """
    if via not in VIAS:
        raise ConfigurationError(f"via must be one of {', '.join(sorted(VIAS))}, not {via!r}")
    name = claimed_user() if by is None else valid_name(by, "by")
    return VerdictSource(by=name, authenticated=False, via=via)


def approval_expired(
    run_id: str, approval_id: str, age_ms: int, max_age_ms: int, advice: str
) -> ApprovalExpiredError:
    """The error for a verdict whose token is too old (nothing was recorded)."""
    return ApprovalExpiredError(
        approval_id,
        age_ms=age_ms,
        max_age_ms=max_age_ms,
        message=(
            f"the token of approval {approval_id!r} of run {run_id!r} expired "
            f"({_waited(age_ms)} old, the maximum is {_waited(max_age_ms)}): nothing was "
            f"recorded and the request still waits; {advice}"
        ),
    )


@dataclass(frozen=True)
class Verdict:
    """A verdict to record on a run: the response, and the approvals the run waits for.

    What a store's :meth:`~nbdurable.durable.store.RunStore.rt_verdict`
    takes; :meth:`decide` is the rule it applies inside its transaction.

    Attributes:
        response: The verdict on one approval (its token, reason, source, and
            edited arguments or reply).
        pending_ids: The approvals the run's checkpoint waits for.
        original_arguments: With edited arguments: the call's own, kept
            beside them in the decision.
    """

    response: ToolApprovalResponse
    pending_ids: tuple[str, ...]
    original_arguments: dict[str, Any] | None = None

    @property
    def approval_id(self) -> str:
        """The approval decided."""
        return self.response.approval_id

    def decide(self, run: RuntimeRun, now: int) -> RuntimeRun | None:
        """``run`` with this verdict recorded, or None when it is recorded already.

        A pure function; stores call it inside the transaction that writes its
        result, so of two verdicts on one approval, from any processes, exactly one
        is recorded. It applies only while the run is ``waiting_approval`` on the
        approval and no verdict on it was recorded. The same verdict again
        (approved both times with the same token and the same edits, denied
        both times, or the same reply) is a repeat, not a conflict: the caller
        reports the original success. The run becomes ``pending`` once every
        approval in ``pending_ids`` has a verdict.

        Raises:
            ApprovalNotPendingError: Another verdict was recorded (``verdict`` names
                it), or the run does not wait for the approval (``state``).
        """
        approval_id = self.approval_id
        entry = decision(self.response, now, self.original_arguments)
        earlier = run.decided.get(approval_id)
        if earlier is None and approval_id in run.verdicts:  # recorded before ``decided`` existed
            earlier = decision(run.verdicts[approval_id], run.updated_at)
        if earlier is not None:
            if _repeat(earlier, entry):
                return None
            raise ApprovalNotPendingError(
                run.run_id, approval_id, verdict=earlier.outcome, state=run.state
            )
        if run.state != "waiting_approval" or approval_id not in self.pending_ids:
            raise ApprovalNotPendingError(run.run_id, approval_id, state=run.state)
        verdicts = {**run.verdicts, approval_id: self.response}
        answered = all(pending in verdicts for pending in self.pending_ids)
        return RunPatch(
            state="pending" if answered else "waiting_approval",
            verdicts=verdicts,
            decided={**run.decided, approval_id: entry},
            updated_at=now,
        ).apply(run)


def _repeat(earlier: Decision, entry: Decision) -> bool:
    """Whether ``entry`` is ``earlier`` sent again (a retry), not another verdict."""
    if earlier.kind != entry.kind or earlier.reply != entry.reply:
        return False
    if not entry.approved:
        return True
    return earlier.token_sha256 == entry.token_sha256 and earlier.arguments == entry.arguments


def decision(
    response: ToolApprovalResponse, now: int, original_arguments: dict[str, Any] | None = None
) -> Decision:
    """What :attr:`RuntimeRun.decided` keeps of a verdict (the token only as a digest).

    An approval with edits keeps both argument sets: ``original_arguments``
    (the call's, as the token binds it) and the edited ones.
    """
    token = response.token
    edited = response.arguments
    return Decision(
        approved=response.approved,
        reason=response.reason,
        token_sha256=hashlib.sha256(token.encode()).hexdigest() if token else None,
        at=now,
        source=response.source,
        arguments=dict(edited) if edited is not None else None,
        original_arguments=dict(original_arguments)
        if edited is not None and original_arguments is not None
        else None,
        reply=response.reply,
    )


def latest_verdict(run: RuntimeRun) -> ApprovalNotPendingError | None:
    """The conflict naming the verdict recorded last on ``run`` (None: it has none).

    What a caller answering "the" open approval of a run that has none left
    raises: someone decided it meanwhile, and this says which verdict won.
    """
    if not run.decided:
        return None
    latest = max(run.decided, key=lambda approval_id: run.decided[approval_id].at)
    verdict = run.decided[latest].outcome
    return ApprovalNotPendingError(run.run_id, latest, verdict=verdict, state=run.state)


def _waited(ms: int) -> str:
    seconds = max(0, ms // 1000)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def who_decided(source: VerdictSource | Mapping[str, Any] | None) -> str:
    """How a verdict's source reads: ``by ana (claimed)``, ``via link addressed to lee``, ...

    Empty when nothing was recorded (verdicts from before sources were). A
    mapping is a source's JSON (an event's payload).
    """
    if isinstance(source, VerdictSource):
        source = source.model_dump(mode="json")
    if not source:
        return ""
    via, by = source.get("via"), source.get("by")
    if via == "grant":
        grant = source.get("grant_id")
        return f"by standing grant {grant}" if grant else "by a standing grant"
    if via == "link":
        to = source.get("addressed_to")
        phrase = f"via link addressed to {to}" if to else "via link"
        minted_via, minted_by = source.get("minted_via"), source.get("minted_by")
        if minted_via == "notify":
            return f"{phrase}, sent by notification"
        if minted_by:
            claimed = "" if minted_via == "http" else " (claimed)"
            return f"{phrase}, minted by {minted_by}{claimed}"
        if minted_via == "http":
            return f"{phrase}, minted with the unnamed token"
        return phrase
    if by:
        return f"by {by}" if source.get("authenticated") else f"by {by} (claimed)"
    return f"via {via}" if via else ""


def decided_phrase(
    source: VerdictSource | Mapping[str, Any] | None, waited_ms: int | None = None
) -> str:
    """Who decided and when: ``by ana (claimed), 2 min after the request`` (may be empty)."""
    phrase = who_decided(source)
    if waited_ms is not None and waited_ms >= 0:
        after = f"{_waited(waited_ms)} after the request"
        phrase = f"{phrase}, {after}" if phrase else after
    return phrase


_KIND_WORDS = {
    "approved": "approved",
    "edited": "approved with edited arguments",
    "denied": "denied",
    "replied": "replied in place of the tool",
}


def verdict_line(
    approved: bool,
    source: VerdictSource | Mapping[str, Any] | None,
    waited_ms: int | None = None,
    *,
    kind: str | None = None,
) -> str:
    """One line on a verdict: ``approved by ana (claimed), 2 min after the request``.

    ``kind`` (a decision's: ``edited``, ``replied``, ...) says more than
    ``approved`` where it is known: ``approved with edited arguments by ana ...``.
    """
    verdict = _KIND_WORDS.get(kind or "", "approved" if approved else "denied")
    phrase = decided_phrase(source, waited_ms)
    if not phrase:
        return verdict
    return f"{verdict}{',' if phrase[0].isdigit() else ''} {phrase}"
