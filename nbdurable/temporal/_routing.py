"""Where an activity a worker handed back goes next.

Any worker of a task queue may pick a run's model or tool activity up, and one
whose definition of the run's agent differs hands it back untouched
(``definition_mismatch``). On a shared queue the mismatched worker, idle after
each hand-back, is often the one that polls first again. So the hand-back names
the run's definition (agent id, version, fingerprint), and the workflow sends
the next attempt to that definition's own queue, which only workers serving it
poll (:func:`definition_queue`; :func:`nbdurable.temporal.serve` polls one per
definition it serves). An attempt nobody takes there within ``ROUTED_WAIT`` (no
such worker runs, or only hosts without these queues) goes back to the shared
queue, and that call's later hand-backs stay there, each after a backoff, as
before the definitions' queues: a call is routed once.

A task run's ``task_begin`` is routed the same way, by ``(task, version)`` (a task
has no fingerprint: its hand-back names :data:`TASK_DEFINITION` in that place), but
every time a worker of the shared queue hands it back, and it waits
``TASK_ROUTED_WAIT`` there: a parked task run waits on its own queue, not on a
backoff, so it starts as soon as a worker serving it polls (on the shared queue
each attempt went to whichever poller asked first, and the worker that just handed
it back often was that one: minutes, on a loaded machine).
"""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError, TimeoutType
from temporalio.exceptions import TimeoutError as ActivityTimeoutError

from ..runs import RuntimeRun

__all__ = [
    "DEFINITION_QUEUES",
    "ROUTED_WAIT",
    "TASK_DEFINITION",
    "TASK_DEFINITION_QUEUES",
    "TASK_ROUTED_WAIT",
    "HandBacks",
    "definition_key",
    "definition_queue",
    "handed_back_delay",
]

DEFINITION_QUEUES = "nbdurable-definition-queues"
"""Patch: an activity handed back for a definition mismatch is sent to its definition's queue."""
ROUTED_WAIT = timedelta(seconds=3)
"""How long an attempt waits on a definition's queue for a worker to take it (a worker
polling there takes it at once; one not taken means none is there)."""
TASK_DEFINITION_QUEUES = "nbdurable-task-definition-queues"
"""Patch: a task run's ``task_begin`` handed back goes to its ``(task, version)``'s queue."""
TASK_DEFINITION = "task"
"""What a task run's hand-back names in the fingerprint's place."""
TASK_ROUTED_WAIT = timedelta(seconds=60)
"""How long a routed ``task_begin`` waits on its queue before one more try on the shared
queue (a host that serves the task without polling its queue): about two attempts a
minute in the history of a run parked for a version nobody serves."""


def handed_back_delay(times: int) -> timedelta:
    """How long to wait before scheduling again an activity a worker handed back.

    A worker whose definition of the run's agent differs hands the activity back
    untouched; the next attempt may reach another worker (200 ms, doubling, at most 10 s).
    """
    return timedelta(milliseconds=min(200 * 2 ** min(times, 6), 10_000))


def definition_queue(task_queue: str, agent_id: str, version: str, fingerprint: str) -> str:
    """The task queue that only workers of ``task_queue`` serving this definition poll."""
    key = json.dumps([agent_id, version, fingerprint], separators=(",", ":"))
    return f"{task_queue}.definition-{hashlib.sha256(key.encode()).hexdigest()[:16]}"


def definition_key(run: RuntimeRun) -> tuple[str, ...]:
    """What a hand-back names of ``run``: its (agent id, version, fingerprint), or nothing.

    A run recorded without a fingerprint matches any definition of its version:
    no queue is its own, so its hand-backs name nothing and stay on the shared queue.
    """
    if run.fingerprint is None:
        return ()
    return (run.agent_id, run.agent_version, run.fingerprint)


class HandBacks:
    """One activity call's hand-backs inside a workflow: where its next attempt goes.

    Args:
        patch: The patch that guards routing (None: the caller checked one already).
        wait: How long a routed attempt waits on the definition's queue.
        every_time: Route after every hand-back that names a definition, with no
            backoff (a task's begin); by default a call is routed once.
    """

    def __init__(
        self,
        *,
        patch: str | None = DEFINITION_QUEUES,
        wait: timedelta = ROUTED_WAIT,
        every_time: bool = False,
    ) -> None:
        self.times = 0
        self.queue: str | None = None
        self.routed = False
        self._patch = patch
        self._wait = wait
        self._every_time = every_time

    def options(self) -> dict[str, Any]:
        """The next attempt's ``execute_activity`` options (none: the workflow's own queue)."""
        if self.queue is None:
            return {}
        return {"task_queue": self.queue, "schedule_to_start_timeout": self._wait}

    async def handed_back(self, cause: ApplicationError) -> None:
        """After a ``definition_mismatch``: route the next attempt, or back off first.

        The first hand-back that names a definition sends the next attempt
        straight to that definition's queue. Any other hand-back (an older
        worker names nothing, a routed attempt met a worker that changed
        meanwhile, the routed attempt was not taken) waits
        :func:`handed_back_delay` first.
        """
        details = cause.details
        if (
            (self._every_time or not self.routed)
            and len(details) == 3
            and all(isinstance(value, str) for value in details)
            and (self._patch is None or workflow.patched(self._patch))
        ):
            self.queue = definition_queue(workflow.info().task_queue, *details)
            self.routed = True
            return
        await workflow.sleep(handed_back_delay(self.times))
        self.times += 1

    def not_taken(self, error: ActivityError) -> bool:
        """Whether ``error`` is a routed attempt nobody took in time (the next is not routed)."""
        cause = error.cause
        if (
            self.queue is None
            or not isinstance(cause, ActivityTimeoutError)
            or cause.type != TimeoutType.SCHEDULE_TO_START
        ):
            return False
        self.queue = None
        return True
