"""``approvals``: every approval request of a store, with its verdict (the inbox).

The rows come from what is cheap to read first: the runtime's run records
(verdicts recorded on a run, with who gave them) and the checkpoints'
metadata (the requests a run waited for; no messages are loaded). A run's
event log is read only when those leave a request or a verdict unexplained
(a store without run records, such as a JSONL session store, or a verdict
whose request no checkpoint kept), never for every run of the store.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .._errors import ConfigurationError, RunNotFoundError
from ..durable._records import RunRecord
from ..durable._signer import token_issued_at
from ..durable.store import EventLog, HistoryStore, RunStore
from ..events._model import APPROVAL_RESOLVED, TOOL_APPROVAL_REQUEST, TOOL_CALL
from ..messages import ToolApprovalRequest, ToolApprovalResponse, VerdictSource
from ..runs import Decision, RuntimeRun
from ._source import StoreLike, opened

if TYPE_CHECKING:
    from ._frame import InspectFrame

__all__ = [
    "APPROVAL_COLUMNS",
    "APPROVAL_MAX_AGE_MS",
    "APPROVAL_STATUSES",
    "approval_rows",
    "approvals",
    "check_statuses",
]

APPROVAL_STATUSES: tuple[str, ...] = (
    "pending",
    "expired",
    "approved",
    "denied",
    "replied",
    "cancelled",
)
"""Every status an approval request can have (see :func:`approvals`)."""

APPROVAL_MAX_AGE_MS = 7 * 24 * 3600 * 1000
"""The token age past which a pending request shows as ``expired``: the
runtime's default ``approval_max_age_ms`` (a test keeps the two equal)."""

APPROVAL_COLUMNS = (
    "run_id",
    "approval_id",
    "agent_path",
    "tool",
    "arguments",
    "edited_arguments",
    "requested_at",
    "status",
    "decided_at",
    "decided_by",
    "authenticated",
    "via",
    "addressed_to",
    "minted_by",
    "minted_via",
    "grant_id",
    "reason",
    "reply",
    "waited",
    "tool_call_id",
    "allow_edit",
    "parameters",
)
"""The columns of :func:`approvals`, in order (``approval_rows`` gives the same keys)."""

_WAITING = frozenset({"pending", "expired"})


@dataclass
class _Request:
    approval_id: str
    tool_call_id: str | None
    tool: str | None
    arguments: dict[str, Any]
    agent_path: tuple[str, ...]
    requested_at: int | None
    issued_at: int | None
    allow_edit: bool = False
    parameters: dict[str, Any] | None = None


@dataclass
class _Verdict:
    approved: bool
    reason: str | None
    at: int | None
    source: dict[str, Any] | None
    tool_call_id: str | None = None
    arguments: dict[str, Any] | None = None
    reply: str | None = None


def check_statuses(status: str | Sequence[str] | None) -> frozenset[str]:
    """The statuses asked for (every one for None).

    Raises:
        ConfigurationError: A name that is not an approval status.
    """
    if status is None:
        return frozenset(APPROVAL_STATUSES)
    names = [status] if isinstance(status, str) else list(status)
    unknown = [name for name in names if name not in APPROVAL_STATUSES]
    if unknown or not names:
        raise ConfigurationError(
            f"unknown approval status {', '.join(map(repr, unknown)) or '(none given)'}; "
            f"use one or more of {', '.join(APPROVAL_STATUSES)}"
        )
    return frozenset(names)


def approval_rows(
    store: StoreLike,
    *,
    run_id: str | None = None,
    status: str | Sequence[str] | None = None,
    now: int | None = None,
    max_age_ms: int | None = APPROVAL_MAX_AGE_MS,
) -> list[dict[str, Any]]:
    """The rows of :func:`approvals` as plain dicts (no pandas), oldest request first.

    Times are epoch milliseconds; ``waited`` is in milliseconds; ``agent_path``
    is a tuple. The arguments are the same as :func:`approvals`'.

    Raises:
        ConfigurationError: An unknown status.
        RunNotFoundError: ``run_id`` names no run of the store.
    """
    wanted = check_statuses(status)
    clock = int(time.time() * 1000) if now is None else now
    rows: list[dict[str, Any]] = []
    with opened(store) as source:
        for rid, record in _candidates(source, run_id, waiting_only=wanted <= _WAITING):
            rows.extend(_run_rows(source, rid, record, clock, max_age_ms))
    rows = [row for row in rows if row["status"] in wanted]
    rows.sort(key=lambda r: (r["requested_at"] is None, r["requested_at"] or 0, r["run_id"]))
    return rows


def approvals(
    store: StoreLike,
    *,
    run_id: str | None = None,
    status: str | Sequence[str] | None = None,
    now: int | None = None,
    max_age_ms: int | None = APPROVAL_MAX_AGE_MS,
) -> InspectFrame:
    """Every approval request of a store (or of one run), one row each, oldest first.

    Columns: ``run_id``, ``approval_id``, ``agent_path`` (the sub-agents down to
    the one that made the call, ``/``-joined; empty for the run's own calls),
    ``tool``, ``arguments`` (a dict: the call as the model made it),
    ``edited_arguments`` (a dict: what an approval with edits ran instead;
    None otherwise), ``requested_at``, ``status`` (categorical):

    - ``pending``: no verdict yet; the run waits for it;
    - ``expired``: pending, but its token is ``max_age_ms`` old or older; still
      decidable (the process holding the secret signs a fresh token);
    - ``approved`` / ``denied``: a verdict was recorded (an approval with
      edits is ``approved``, with ``edited_arguments``);
    - ``replied``: a human answered the call in place of the tool (``reply``);
    - ``cancelled``: the run ended (or went on) without a recorded verdict;

    ``decided_at``, ``decided_by`` (a name: authenticated only where
    ``authenticated`` is true, otherwise the name the deciding process claimed),
    ``authenticated``, ``via`` (``widget``, ``magic``, ``cli``, ``http``,
    ``link``, ``api`` or ``grant``), ``addressed_to`` (whom a link was addressed
    to), ``minted_by`` and ``minted_via`` (who minted that link, and how:
    ``http`` for a named bridge token, ``api`` for a claimed name, ``notify``
    for a notification), ``grant_id`` (the standing approval that covered the call), ``reason``
    (a denial's), ``waited`` (a Timedelta: until the verdict; until now for a
    pending one; until the run ended for a cancelled one), ``tool_call_id``,
    ``reply`` (a reply's text), ``allow_edit`` (whether the tool lets a human
    edit the call) and ``parameters`` (with ``allow_edit``: the tool's JSON
    schema of its arguments, for a form).
    Who decided is blank where the verdict's source was not recorded.

    Works on every store: run records and checkpoint metadata first, a run's
    event log only where they leave something unexplained.

    Args:
        store: A store, or a store URL.
        run_id: Only this run's requests.
        status: Only requests in this status (or these statuses).
        now: The time to measure waits and token ages against, epoch ms
            (default: the wall clock).
        max_age_ms: The token age at which a pending request counts as
            ``expired`` (default: the runtime's default ``approval_max_age_ms``,
            7 days; None: never).

    Raises:
        ConfigurationError: An unknown status, or pandas is not installed.
        RunNotFoundError: ``run_id`` names no run of the store.
    """
    from ._views import frame_module

    module = frame_module()  # a clear error when pandas is missing
    import pandas as pd

    rows = approval_rows(store, run_id=run_id, status=status, now=now, max_age_ms=max_age_ms)
    shown = [{**row, "agent_path": "/".join(row["agent_path"])} for row in rows]
    result = module.frame(
        shown,
        columns=APPROVAL_COLUMNS,
        index="approval_id",
        categories={"status": APPROVAL_STATUSES},
        datetimes=("requested_at", "decided_at"),
    )
    result["waited"] = pd.to_timedelta(result["waited"], unit="ms")
    return result  # type: ignore[no-any-return]


def _candidates(
    source: HistoryStore, run_id: str | None, *, waiting_only: bool
) -> list[tuple[str, RuntimeRun | None]]:
    """The runs that may hold approval requests, with their run records."""
    runtime: Any = source if isinstance(source, RunStore) else None
    if run_id is not None:
        record = runtime.rt_get(run_id) if runtime is not None else None
        if record is None and not source.history(run_id):
            raise RunNotFoundError(run_id)
        return [(run_id, record)]
    records: list[RuntimeRun] = runtime.rt_list() if runtime is not None else []
    by_id = {r.run_id: r for r in records}
    found: list[tuple[str, RuntimeRun | None]] = []
    seen: set[str] = set()
    for info in source.list_runs():
        if info.agent_path:  # a sub-agent's own checkpoints: its parent lists its requests
            continue
        seen.add(info.run_id)
        record = by_id.get(info.run_id)
        if _may_hold(info, record, waiting_only):
            found.append((info.run_id, record))
    found.extend(
        (rid, r)
        for rid, r in by_id.items()
        if rid not in seen
        and (r.state == "waiting_approval" or r.decided or r.verdicts or r.grants)
    )
    return found


def _may_hold(info: RunRecord, record: RuntimeRun | None, waiting_only: bool) -> bool:
    """Whether a run may hold requests (in a waiting status when ``waiting_only``)."""
    if record is None:
        # A plain session's run: its past requests show only in its history.
        return info.pending_approval_count > 0 or not waiting_only
    if waiting_only:
        return record.state == "waiting_approval"
    return (
        record.state == "waiting_approval"
        or bool(record.decided or record.verdicts or record.grants)
        or info.pending_approval_count > 0
    )


def _run_rows(
    source: HistoryStore,
    run_id: str,
    record: RuntimeRun | None,
    now: int,
    max_age_ms: int | None,
) -> list[dict[str, Any]]:
    requests: dict[str, _Request] = {}
    infos = source.history(run_id)
    for info in infos:
        for asked in info.pending_approvals:
            if asked.approval_id not in requests:
                requests[asked.approval_id] = _from_request(asked, info.created_at)
    latest = {r.approval_id for r in infos[-1].pending_approvals} if infos else set()
    verdicts = _recorded_verdicts(record)
    unexplained = set(verdicts) - set(requests) or (set(requests) - latest - set(verdicts))
    # calls a standing grant covered were never requested: only the log names them
    granted = record is not None and bool(record.grants)
    if (unexplained or granted) and isinstance(source, EventLog):
        _read_events(source, run_id, requests, verdicts)
    ended = record.updated_at if record is not None and record.finished else None
    rows = []
    for approval_id, request in requests.items():
        verdict = verdicts.get(approval_id)
        rows.append(_row(run_id, request, verdict, approval_id in latest, ended, now, max_age_ms))
    return rows


def _from_request(request: ToolApprovalRequest, seen_at: int | None) -> _Request:
    issued = token_issued_at(request.token)
    return _Request(
        approval_id=request.approval_id,
        tool_call_id=request.tool_call_id,
        tool=request.tool_name,
        arguments=dict(request.input),
        agent_path=tuple(request.agent_path),
        requested_at=issued if issued is not None else seen_at,
        issued_at=issued,
        allow_edit=request.allow_edit,
        parameters=dict(request.parameters) if request.parameters is not None else None,
    )


def _recorded_verdicts(record: RuntimeRun | None) -> dict[str, _Verdict]:
    if record is None:
        return {}
    found: dict[str, _Verdict] = {}
    # applied entries may predate ``decided``: a decision (read second) wins
    entries: list[tuple[str, ToolApprovalResponse | Decision]] = [
        *record.verdicts.items(),
        *record.decided.items(),
    ]
    for approval_id, entry in entries:
        found[approval_id] = _Verdict(
            approved=entry.approved,
            reason=entry.reason,
            at=entry.at if isinstance(entry, Decision) else None,
            source=_json(entry.source),
            arguments=entry.arguments,
            reply=entry.reply,
        )
    return found


def _read_events(
    source: EventLog,
    run_id: str,
    requests: dict[str, _Request],
    verdicts: dict[str, _Verdict],
) -> None:
    """Fill in requests and verdicts from the run's event log (records win where both say)."""
    try:
        events = source.read_events(run_id)
    except RunNotFoundError:
        return
    if not isinstance(events, list | tuple):
        return  # an async store: inspection reads synchronously
    calls: dict[str, tuple[str, dict[str, Any]]] = {}
    for event in events:
        payload = event.payload
        if event.type == TOOL_CALL:
            call = payload.get("tool_call") or {}
            name, args = str(call.get("tool_name")), call.get("args") or {}
            calls[str(call.get("tool_call_id"))] = (name, args)
        elif event.type == TOOL_APPROVAL_REQUEST:
            request = payload.get("request") or {}
            approval_id = str(request.get("approval_id"))
            if approval_id not in requests:
                requests[approval_id] = _from_request(
                    ToolApprovalRequest.model_validate(request), event.created_at
                )
        elif event.type == APPROVAL_RESOLVED:
            approval_id = str(payload.get("approval_id"))
            earlier = verdicts.get(approval_id)
            if earlier is None:
                verdicts[approval_id] = _Verdict(
                    approved=bool(payload.get("approved")),
                    reason=payload.get("reason"),
                    at=event.created_at,
                    source=_dict(payload.get("source")),
                    tool_call_id=payload.get("tool_call_id"),
                    arguments=_dict(payload.get("arguments")),
                    reply=payload.get("reply"),
                )
            else:
                earlier.at = earlier.at if earlier.at is not None else event.created_at
                earlier.source = earlier.source or _dict(payload.get("source"))
    for approval_id, verdict in verdicts.items():  # a verdict no request was logged for
        if approval_id in requests or verdict.tool_call_id is None:
            continue
        tool, args = calls.get(verdict.tool_call_id, (None, {}))
        requests[approval_id] = _Request(
            approval_id=approval_id,
            tool_call_id=verdict.tool_call_id,
            tool=tool,
            arguments=dict(args),
            agent_path=(),
            requested_at=verdict.at,
            issued_at=None,
        )


def _row(
    run_id: str,
    request: _Request,
    verdict: _Verdict | None,
    still_pending: bool,
    ended: int | None,
    now: int,
    max_age_ms: int | None,
) -> dict[str, Any]:
    source = (verdict.source if verdict is not None else None) or {}
    decided_at = verdict.at if verdict is not None else None
    if verdict is not None:
        status = "approved" if verdict.approved else "denied"
        status = "replied" if verdict.reply is not None else status
        until = decided_at
    elif still_pending and ended is None:
        issued = request.issued_at
        old = max_age_ms is not None and issued is not None and now - issued >= max_age_ms
        status = "expired" if old else "pending"
        until = now
    else:
        status = "cancelled"
        until = ended
    start = request.requested_at
    return {
        "run_id": run_id,
        "approval_id": request.approval_id,
        "agent_path": request.agent_path,
        "tool": request.tool,
        "arguments": request.arguments,
        "edited_arguments": verdict.arguments if verdict is not None else None,
        "requested_at": start,
        "status": status,
        "decided_at": decided_at,
        "decided_by": source.get("by"),
        "authenticated": source.get("authenticated") if source else None,
        "via": source.get("via"),
        "addressed_to": source.get("addressed_to"),
        "minted_by": source.get("minted_by"),
        "minted_via": source.get("minted_via"),
        "grant_id": source.get("grant_id"),
        "reason": verdict.reason if verdict is not None else None,
        "reply": verdict.reply if verdict is not None else None,
        "waited": max(0, until - start) if until is not None and start is not None else None,
        "tool_call_id": request.tool_call_id,
        "allow_edit": request.allow_edit,
        "parameters": request.parameters,
    }


def _json(source: VerdictSource | None) -> dict[str, Any] | None:
    return None if source is None else source.model_dump(mode="json")


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None
