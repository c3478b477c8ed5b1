"""The custom messages between the kernel and the widgets' views, typed.

Every message, either way, is a JSON object tagged by one key, ``type``; the
views (``static/*.js``) send and read the same tags. docs/notebook.md, "Widget
messages", lists each one, its fields and who sends it.
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict, cast

__all__ = [
    "Ack",
    "AskSnapshot",
    "Attend",
    "Bare",
    "Dismiss",
    "Edit",
    "KernelMessage",
    "Open",
    "Ping",
    "Pong",
    "QueryChange",
    "Reply",
    "Snapshot",
    "StepsDelta",
    "StepsState",
    "Verdict",
    "ViewMessage",
    "Visibility",
    "received",
]

# -- from a view to the kernel -----------------------------------------------------------


class Ping(TypedDict):
    """Is the kernel there? Answered by :class:`Pong` (both views)."""

    type: Literal["ping"]
    nonce: int


class AskSnapshot(TypedDict):
    """Every step, please: a run view's front-end model, when it is created or missed a delta.

    Answered by :class:`Snapshot`. It also tells the kernel that a front end composes
    the ``snapshot`` trait from the deltas: the kernel stops syncing it.
    """

    type: Literal["snapshot"]


class Verdict(TypedDict):
    """A click on Approve, Deny or a card's grant; answered by :class:`Ack` at once."""

    type: Literal["approve", "deny", "grant"]
    approval_id: str
    reason: str | None
    token: NotRequired[str | None]
    """A run view's card: the request's signed token."""
    run_id: NotRequired[str]
    """A dashboard row: the run that asks (the kernel looks its token up)."""


class Edit(TypedDict):
    """Edit's form sent: approve the call with these arguments; answered by :class:`Ack` at once.

    The token binds the call as the model made it (a run view's card sends it; a
    dashboard row sends ``run_id`` and the kernel looks it up); the kernel checks
    the arguments against the tool's schema before anything is recorded.
    """

    type: Literal["edit"]
    approval_id: str
    arguments: dict[str, Any]
    token: NotRequired[str | None]
    """A run view's card: the request's signed token."""
    run_id: NotRequired[str]
    """A dashboard row: the run that asks (the kernel looks its token up)."""


class Reply(TypedDict):
    """Reply's text sent: the call's result instead of running it; answered by :class:`Ack`."""

    type: Literal["reply"]
    approval_id: str
    text: str
    """What the model reads as the call's result (not an error)."""
    token: NotRequired[str | None]
    """A run view's card: the request's signed token (a reply needs none, like a denial)."""
    run_id: NotRequired[str]
    """A dashboard row: the run that asks."""


class Attend(TypedDict):
    """A click on Retry or Settle of a ``needs_attention`` run; answered by :class:`Ack` at once."""

    type: Literal["retry", "settle"]
    reason: NotRequired[str | None]
    """Settle: what the model reads as the interrupted call's error result."""
    token: NotRequired[str | None]
    """A run view: the signed token of the action it was given."""
    run_id: NotRequired[str]
    """A dashboard row: the run (the kernel signs its token)."""


class QueryChange(TypedDict, total=False):
    """The dashboard's filter, search, order or page changed (any of the fields)."""

    type: Literal["query"]
    status: str
    search: str
    sort_by: str
    descending: bool
    page: int
    page_size: int


class Open(TypedDict):
    """Show a run below the dashboard: its live view (``run``) or its history browser."""

    type: Literal["open"]
    run_id: str
    view: NotRequired[Literal["run", "history"]]


class Dismiss(TypedDict):
    """Remove an answered approval's line from the dashboard."""

    type: Literal["dismiss"]
    approval_id: str


class Visibility(TypedDict):
    """The dashboard's view came into sight or left it (scrolled away, a hidden tab)."""

    type: Literal["visibility"]
    visible: bool


class Bare(TypedDict):
    """The dashboard's **close** (the run below) and **Refresh** (read the store now)."""

    type: Literal["close", "refresh"]


ViewMessage = (
    Ping
    | AskSnapshot
    | Verdict
    | Edit
    | Reply
    | Attend
    | QueryChange
    | Open
    | Dismiss
    | Visibility
    | Bare
)

# -- from the kernel to a view -----------------------------------------------------------


class Pong(TypedDict):
    """The answer to a :class:`Ping`, with its nonce."""

    type: Literal["pong"]
    nonce: int | None


class Ack(TypedDict):
    """A verdict (:class:`Verdict`, :class:`Edit`, :class:`Reply`) reached this kernel.

    Its outcome comes by the traits.
    """

    type: Literal["ack"]
    approval_id: str


class StepsDelta(TypedDict):
    """A run view's steps since the previous delta, numbered in sequence."""

    type: Literal["steps"]
    seq: int
    changed: list[dict[str, Any]]
    """A new step whole; a known one as ``{"index", ...changed fields}`` (new text: ``append``)."""
    removed: NotRequired[list[int]]
    """The indexes of steps that are gone (omitted when none)."""


class StepsState(TypedDict):
    """Every step, with the number of the last delta: the ``snapshot`` trait's value."""

    seq: int
    steps: list[dict[str, Any]]


class Snapshot(StepsState):
    """The answer to :class:`AskSnapshot`."""

    type: Literal["snapshot"]


KernelMessage = Pong | Ack | StepsDelta | Snapshot


def received(content: object) -> ViewMessage | None:
    """A view's message, or None for anything that is not one.

    Only the tag is checked: a view's fields are untrusted, so handlers read
    them with ``.get`` and check each value they use.
    """
    if isinstance(content, dict) and isinstance(content.get("type"), str):
        return cast(ViewMessage, content)
    return None
