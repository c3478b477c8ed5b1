"""Claiming a run's notifications on its record: one notification per approval, from any process."""

from __future__ import annotations

from collections.abc import Sequence

from ._patch import RunPatch
from ._record import RuntimeRun

__all__ = ["claim_notices"]


def claim_notices(run: RuntimeRun, keys: Sequence[str]) -> tuple[RuntimeRun | None, list[str]]:
    """``run`` with ``keys`` added to :attr:`RuntimeRun.notified`, and the keys newly claimed.

    A pure function; stores call it inside the transaction that writes its
    result, so of several processes claiming one key exactly one gets it back.
    Returns ``(None, [])`` when every key was claimed before (nothing to write).
    """
    fresh = [key for key in dict.fromkeys(keys) if key not in run.notified]
    if not fresh:
        return None, []
    return RunPatch(notified=[*run.notified, *fresh]).apply(run), fresh
