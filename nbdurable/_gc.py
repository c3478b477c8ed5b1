"""Bulk reads without garbage-collector passes."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["gc_paused"]


@contextmanager
def gc_paused() -> Iterator[None]:
    """No garbage collection pass while a bulk read builds its objects.

    Building 10,000 loaded messages allocates some 70,000 objects, none of them
    in a cycle, and each pass of the collector walks the growing heap: a third
    of a cold load's CPU went to them (issue 42); a 500-step history frame lost
    as much. Collection resumes after, as it was (a caller that turned it off
    keeps it off).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
