"""How a run record keeps the retry and settle decisions on its ``needs_attention`` stops.

A decision is kept in :attr:`~nbdurable.runs.RuntimeRun.decided` beside the
approvals' verdicts, under ``retry@FENCE.N`` or ``settle@FENCE.N``: the action,
the run's fence at the stop, and how many such decisions the run had before (a
graph node may stop twice under one fence). ``approved`` is True for a retry.
"""

from __future__ import annotations

from typing import Literal

from ._record import Decision, RuntimeRun

__all__ = ["ACTIONS", "AttentionAction", "attention_decisions", "attention_key", "decided_action"]

AttentionAction = Literal["retry", "settle"]
ACTIONS: tuple[AttentionAction, ...] = ("retry", "settle")
"""What a person may do with a ``needs_attention`` run."""


def decided_action(key: str) -> AttentionAction | None:
    """The action a :attr:`~nbdurable.runs.RuntimeRun.decided` key records, None for a verdict's."""
    action, at, _ = key.partition("@")
    if not at:
        return None
    for known in ACTIONS:
        if action == known:
            return known
    return None


def attention_decisions(record: RuntimeRun) -> list[tuple[AttentionAction, Decision]]:
    """The retry and settle decisions recorded on ``record``, oldest first."""
    found = [
        (action, entry)
        for key, entry in record.decided.items()
        if (action := decided_action(key)) is not None
    ]
    return sorted(found, key=lambda item: item[1].at)


def attention_key(record: RuntimeRun, action: AttentionAction) -> tuple[str, int]:
    """The ``decided`` key of the next decision on ``record``'s stop, and its number."""
    number = len(attention_decisions(record))
    return f"{action}@{record.fence}.{number}", number
