"""A draining Temporal worker (SIGTERM): no model or tool call starts; what it took goes back.

The process-wide flag is set by the worker's signal handler before the SDK's own
shutdown, so the activities already running see it at their next call.
"""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from ._driver import DEFINITION_MISMATCH

__all__ = ["Draining", "draining", "handed_back", "start_draining"]

_DRAINING: list[bool] = [False]


def start_draining() -> None:
    """Mark the worker of this process as draining (a SIGTERM): no new call starts."""
    _DRAINING[0] = True


def draining() -> bool:
    """Whether the worker running this activity drains (:func:`start_draining`, or shut down)."""
    return _DRAINING[0] or activity.is_worker_shutdown()


class Draining(Exception):
    """A call not started because the worker drains (the workflow schedules it elsewhere)."""


def handed_back() -> ApplicationError:
    """A model or tool activity a draining worker gives back untouched.

    The workflow schedules it again, after a short backoff, on its task queue,
    where another worker takes it (a definition mismatch's hand-back naming no
    definition: the same workflow path, so no history changes).
    """
    return ApplicationError(
        "this worker is draining: the call goes to another worker, untouched",
        type=DEFINITION_MISMATCH,
        non_retryable=True,
    )
