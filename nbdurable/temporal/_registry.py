"""The worker's runtime (store, agents, signer), reachable from workflow code.

Workflows run with the unsandboxed runner in the worker process: the agents'
tools and models are plain Python objects of that process.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..runtime._seam import RunServices

__all__ = ["set_worker_runtime", "worker_runtime"]

_RUNTIME: list[RunServices] = []


def set_worker_runtime(runtime: RunServices) -> None:
    """Make ``runtime`` the one this process's workflows run under."""
    _RUNTIME[:] = [runtime]


def worker_runtime() -> RunServices:
    """The runtime this process's workflows run under.

    Raises:
        RuntimeError: No worker was started in this process.
    """
    if not _RUNTIME:
        raise RuntimeError("no nbdurable Temporal worker runs in this process")
    return _RUNTIME[0]
