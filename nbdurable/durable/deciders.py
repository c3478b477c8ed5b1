"""Who decides: the name a process claims, and the rule a run's record holds on who may.

A verdict records its source (:class:`~nbdurable.messages.VerdictSource`). Names
claimed by a notebook, the CLI or the Python API are recorded as claimed, never
as authenticated; only the HTTP bridge's named tokens authenticate. An approval
link is a bearer credential: its verdict names whom the link was addressed to,
never who used it.

The rule is read from the run record (saved at submission from the agent), so a
process deciding without the agent's definition (the CLI, the HTTP bridge)
enforces it as the worker would.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Mapping
from typing import Any

from .._errors import ApproverNotAllowedError, ConfigurationError
from ..messages import VerdictSource
from .runtime_run import RuntimeRun

__all__ = [
    "USER_ENV_VAR",
    "check_decider",
    "claimed_user",
    "decided_phrase",
    "valid_name",
    "verdict_line",
    "who_decided",
]

USER_ENV_VAR = "NBDURABLE_USER"


def valid_name(name: object, what: str = "a principal's name") -> str:
    """``name`` stripped, when it is a nonblank string.

    Raises:
        ConfigurationError: Not a string, or blank.
    """
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError(f"{what} must be a nonblank string, not {name!r}")
    return name.strip()


def claimed_user() -> str | None:
    """The name this process claims: ``NBDURABLE_USER``, else the OS user, else None."""
    name = os.environ.get(USER_ENV_VAR, "").strip()
    if name:
        return name
    try:
        return getpass.getuser() or None
    except (KeyError, OSError):  # no user database entry (some containers)
        return None


def check_decider(
    record: RuntimeRun,
    approval_id: str,
    tool_name: str,
    source: VerdictSource | None,
    *,
    approved: bool,
) -> None:
    """Refuse a verdict from someone the run's rule does not allow.

    With approvers named for ``tool_name``, the verdict's principal must be one
    of them: ``by`` (authenticated or claimed), or for a link ``addressed_to``.
    With ``submitter_may_approve`` False, the submitter may not approve (a
    denial stays open to them). A standing grant is checked when it is made.

    Raises:
        ApproverNotAllowedError: The principal may not decide this call.
    """
    if source is not None and source.via == "grant":
        return
    principal = None
    if source is not None:
        principal = source.addressed_to if source.via == "link" else source.by
    allowed = (record.approvers or {}).get(tool_name)
    if allowed is not None and principal not in allowed:
        raise ApproverNotAllowedError(
            record.run_id,
            approval_id,
            tool_name=tool_name,
            principal=principal,
            allowed=tuple(allowed),
        )
    if (
        approved
        and not record.submitter_may_approve
        and record.submitted_by is not None
        and principal == record.submitted_by
    ):
        raise ApproverNotAllowedError(
            record.run_id,
            approval_id,
            tool_name=tool_name,
            principal=principal,
            message=(
                f"{principal!r} submitted run {record.run_id!r} and may not approve its calls "
                f"(approval {approval_id!r}, {tool_name}); nothing was recorded and it still waits"
            ),
        )


def _waited(ms: int) -> str:
    seconds = max(0, ms // 1000)
    for size, unit in ((86400, "d"), (3600, "h"), (60, "min")):
        if seconds >= size:
            return f"{seconds // size} {unit}"
    return f"{seconds} s"


def who_decided(source: Mapping[str, Any] | None) -> str:
    """How a verdict's source reads: ``by ana (claimed)``, ``via link addressed to lee``, ...

    Empty when nothing was recorded (verdicts from before sources were).
    """
    if not source:
        return ""
    via, by = source.get("via"), source.get("by")
    if via == "grant":
        grant = source.get("grant_id")
        return f"by standing grant {grant}" if grant else "by a standing grant"
    if via == "link":
        to = source.get("addressed_to")
        return f"via link addressed to {to}" if to else "via link"
    if by:
        return f"by {by}" if source.get("authenticated") else f"by {by} (claimed)"
    return f"via {via}" if via else ""


def decided_phrase(source: Mapping[str, Any] | None, waited_ms: int | None = None) -> str:
    """Who decided and when: ``by ana (claimed), 2 min after the request`` (may be empty)."""
    phrase = who_decided(source)
    if waited_ms is not None and waited_ms >= 0:
        after = f"{_waited(waited_ms)} after the request"
        phrase = f"{phrase}, {after}" if phrase else after
    return phrase


def verdict_line(
    approved: bool, source: Mapping[str, Any] | None, waited_ms: int | None = None
) -> str:
    """One line on a verdict: ``approved by ana (claimed), 2 min after the request``."""
    verdict = "approved" if approved else "denied"
    phrase = decided_phrase(source, waited_ms)
    if not phrase:
        return verdict
    return f"{verdict}{',' if phrase[0].isdigit() else ''} {phrase}"
