"""Who decides: the name a process claims, and the rule a run's record holds on who may.

A verdict records its source (:class:`~nbdurable.messages.VerdictSource`). Names
claimed by a notebook, the CLI or the Python API are recorded as claimed, never
as authenticated; only the HTTP bridge's named tokens authenticate. An approval
link is a bearer credential: its verdict names whom the link was addressed to,
never who used it, and who minted it (signed into its token).

Who may mint a link (:func:`check_minter`): for a call of a tool the run's
approvers name, only one of those approvers (or the notifier, addressing an
approver), and only addressed to an approver; anyone for any other call. A
link verdict on a restricted call is checked again against the minter its
token names, so a link minted any other way decides nothing.

The rule is read from the run record (saved at submission from the agent), so a
process deciding without the agent's definition (the CLI, the HTTP bridge)
enforces it as the worker would.
"""

from __future__ import annotations

import getpass
import os

from .._errors import ApproverNotAllowedError, ConfigurationError
from ..messages import VerdictSource
from ._record import RuntimeRun

__all__ = [
    "check_decider",
    "check_minter",
    "claimed_user",
    "valid_name",
]

USER_ENV_VAR = "NBDURABLE_USER"

MINT_VIAS: tuple[str, ...] = ("http", "api", "notify")
"""How a link can be minted: the bridge's API (a named token's principal,
authenticated), Python or a notebook (a claimed name), a notification (the
notifier, addressing an approver)."""


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
    if allowed is not None and source is not None and source.via == "link":
        _check_link_minter(record, approval_id, tool_name, source, tuple(allowed))
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


def _check_link_minter(
    record: RuntimeRun,
    approval_id: str,
    tool_name: str,
    source: VerdictSource,
    allowed: tuple[str, ...],
) -> None:
    """Refuse a link verdict on a restricted call whose token does not name an allowed minter.

    The mint checks it already (:func:`check_minter`); checked again here from
    the signed token, so a link minted by any other path (or before links
    recorded their minter) cannot decide a call reserved for its approvers.
    """
    via, by = source.minted_via, source.minted_by
    if via == "notify" or (via in MINT_VIAS and by in allowed):
        return
    if via is None:
        why = "names no minter (minted before links recorded who minted them)"
    else:
        why = f"was minted by {_minter(by, via)}, who is not one of its approvers"
    raise ApproverNotAllowedError(
        record.run_id,
        approval_id,
        tool_name=tool_name,
        principal=source.addressed_to,
        allowed=allowed,
        message=(
            f"the link addressed to {source.addressed_to!r} {why}: approval {approval_id!r} "
            f"({tool_name}) of run {record.run_id!r} takes links minted by "
            f"{', '.join(allowed)} or their notifications only; nothing was recorded and it "
            "still waits"
        ),
    )


def check_minter(
    record: RuntimeRun,
    approval_id: str,
    tool_name: str,
    *,
    minted_by: str | None,
    via: str,
    to: str | None = None,
) -> str | None:
    """Whom a link ``minted_by`` may mint for a call of ``tool_name`` is addressed to; else refused.

    For a tool the run's approvers (``Agent(approvers=...)``) do not name,
    anyone may mint a link, addressed to ``to`` or to nobody, as before. For a
    tool they name, the minter must be one of them (``via="notify"``: the
    notifier, which mints only for approvers), and the link is addressed to
    ``to``, by default the minter, who must be one of them too: a link
    addressed to anyone else could never decide.

    Args:
        record: The run's record (its approvers).
        approval_id: The approval the link is for.
        tool_name: The tool of the call.
        minted_by: Who mints: a named token's principal (``via="http"``), a
            claimed name (``api``), None for the unnamed token or the notifier.
        via: How the link is minted (one of :data:`MINT_VIAS`).
        to: Whom the link is to be addressed to (None: see above).

    Returns:
        The addressee to sign into the link (None: nobody).

    Raises:
        ApproverNotAllowedError: The minter or the addressee is not an approver
            of the call (HTTP 403); nothing was minted.
        ConfigurationError: An unknown ``via``, or a blank ``to``.
    """
    if via not in MINT_VIAS:
        raise ConfigurationError(f"a link is minted via one of {', '.join(MINT_VIAS)}, not {via!r}")
    if to is not None:
        to = valid_name(to, "a link's addressee")
    allowed = (record.approvers or {}).get(tool_name)
    if allowed is None:
        return to
    names = tuple(allowed)
    if via != "notify" and minted_by not in allowed:
        raise ApproverNotAllowedError(
            record.run_id,
            approval_id,
            tool_name=tool_name,
            principal=minted_by,
            allowed=names,
            message=(
                f"{_minter(minted_by, via)} may not mint a link for approval {approval_id!r} "
                f"({tool_name}) of run {record.run_id!r}: only {', '.join(names)} may; "
                "nothing was minted"
            ),
        )
    to = to if to is not None else minted_by
    if to not in allowed:
        raise ApproverNotAllowedError(
            record.run_id,
            approval_id,
            tool_name=tool_name,
            principal=to,
            allowed=names,
            message=(
                f"a link for approval {approval_id!r} ({tool_name}) of run {record.run_id!r} "
                f"may be addressed only to {', '.join(names)}, not "
                f"{repr(to) if to is not None else 'nobody'}; nothing was minted"
            ),
        )
    return to


def _minter(by: str | None, via: str | None) -> str:
    """Who minted a link, as a phrase: ``lee``, ``lee (claimed)``, ``the unnamed token``."""
    if via == "notify":
        return "a notification"
    if by is None:
        return "the unnamed token" if via == "http" else "an unnamed principal"
    return f"{by!r}" if via == "http" else f"{by!r} (claimed)"
