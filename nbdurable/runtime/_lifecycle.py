"""A run's lifecycle as log lines and metrics: claimed, suspended, resumed, retried, finished.

The engine calls these at each transition. Log lines go to the
``nbdurable.runs`` logger at INFO with ``run_id``, ``agent`` and, when the run
has a trace, ``trace_id`` as record attributes (``--log-format json`` writes
them as fields); metrics go to :data:`nbdurable.metrics.HOOKS` when enabled.
"""

from __future__ import annotations

import logging
from typing import Any

from .. import metrics as _metrics
from ..messages import ResponseKind
from ..runs import RuntimeRun

__all__ = [
    "claimed",
    "cut",
    "decided",
    "lease_renewed",
    "left",
    "logger",
    "registered",
    "taken_over",
]

logger = logging.getLogger("nbdurable.runs")

_MODELS: dict[tuple[str, str], str] = {}
"""The model each agent ``(id, version)`` registered in this process names."""


def registered(agent_id: str, version: str, model: str) -> None:
    """An agent was registered here: its runs' metrics carry ``model`` as their model label."""
    _MODELS[(agent_id, version)] = model


def _model(record: RuntimeRun) -> str:
    """The ``model`` label of ``record``'s run metrics (``-``: no agent model, e.g. a task)."""
    return _MODELS.get((record.agent_id, record.agent_version)) or "-"


def _fields(record: RuntimeRun) -> dict[str, Any]:
    fields: dict[str, Any] = {"run_id": record.run_id, "agent": record.agent_id}
    traceparent = (record.trace_context or {}).get("traceparent")
    if traceparent:
        fields["trace_id"] = traceparent.split("-")[1]
    return fields


def claimed(record: RuntimeRun, resumed: bool) -> None:
    """``record`` was claimed by this process (``resumed``: after a verdict or earlier phases)."""
    verb = "resumed" if resumed else "claimed"
    logger.info(
        "run %s %s (agent %s)",
        record.run_id,
        verb,
        record.agent_id,
        extra={**_fields(record), "event": verb},
    )
    hooks = _metrics.HOOKS
    if hooks is not None:
        hooks.run_started(record.agent_id, _model(record))


def left(record: RuntimeRun, state: str, reason: str | None) -> None:
    """A leg of ``record`` ended here in ``state``."""
    event = {
        "completed": "finished",
        "failed": "finished",
        "cancelled": "finished",
        "retry_wait": "retried",
        "waiting_approval": "suspended",
        "needs_attention": "suspended",
        "pending": "released",
    }.get(state, state)
    level = logging.WARNING if state == "failed" else logging.INFO
    logger.log(
        level,
        "run %s %s: %s%s",
        record.run_id,
        event,
        state,
        f" ({reason})" if reason else "",
        extra={**_fields(record), "event": event, "state": state, "reason": reason},
    )
    hooks = _metrics.HOOKS
    if hooks is not None:
        hooks.run_left(record.agent_id, state, reason, _model(record))


def cut(run_id: str, call: str) -> None:
    """A drain ended while ``call`` of run ``run_id`` was still running: it is cut.

    The run is released with the call's intent left started, so its next owner
    treats the call as interrupted (the tool's recovery policy decides).
    """
    logger.warning(
        "run %s: the drain ended during its %s: cut, the next owner recovers it",
        run_id,
        call,
        extra={"run_id": run_id, "event": "cut", "call": call},
    )


def taken_over(record: RuntimeRun, cause: str) -> None:
    """``record`` was taken over by this process from ``record.previous_owner``."""
    logger.info(
        "run %s taken over from %s (%s)",
        record.run_id,
        record.previous_owner,
        cause,
        extra={
            **_fields(record),
            "event": "taken_over",
            "previous_owner": record.previous_owner,
            "cause": cause,
        },
    )
    hooks = _metrics.HOOKS
    if hooks is not None:
        hooks.taken_over(record.agent_id, cause)


def lease_renewed(record: RuntimeRun, kept: bool) -> None:
    """A lease renewal of ``record`` kept the lease, or found it lost."""
    if not kept:
        logger.warning(
            "run %s: lease lost to another owner",
            record.run_id,
            extra={**_fields(record), "event": "lease_lost"},
        )
    hooks = _metrics.HOOKS
    if hooks is not None:
        hooks.lease_renewed(kept)


def decided(record: RuntimeRun, *, verdict: ResponseKind, now: int) -> None:
    """A verdict on one of ``record``'s approvals was recorded at ``now`` (epoch ms).

    ``verdict`` is its kind (``approved``, ``edited``, ``denied``, ``replied``): the
    log's ``verdict`` field and the decision-time histogram's label.
    """
    logger.info(
        "run %s: approval %s",
        record.run_id,
        verdict,
        extra={**_fields(record), "event": "decided", "verdict": verdict},
    )
    hooks = _metrics.HOOKS
    if hooks is not None and record.state == "waiting_approval":
        hooks.decided(verdict, (now - record.updated_at) / 1000)
