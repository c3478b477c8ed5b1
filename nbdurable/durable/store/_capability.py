"""What a store can do: the capabilities it declares, typed."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["Capability"]


class Capability(StrEnum):
    """A capability a store declares in its ``capabilities`` class attribute.

    The conformance suite (:mod:`nbdurable.testing`) runs each capability's
    tests on every store that declares it. A ``StrEnum``: each member equals
    its value (``Capability.HISTORY == "history"``), so sets of the strings
    older stores declare still match.
    """

    HISTORY = "history"
    """``load(run_id, step_index=)``, ``history``, ``list``, ``list_runs`` and ``delete``."""
    PERSISTENT = "persistent"
    """Checkpoints outlive the process; a committed save survives a SIGKILL."""
    INCREMENTAL = "incremental"
    """A save writes only what is new: its cost does not grow with the history."""
    MULTIPROCESS = "multiprocess"
    """Several processes may write different runs to one store at once."""
    VERSIONED_SCHEMA = "versioned_schema"
    """The storage layout carries a version; opening a newer one is refused."""
    RUNTIME = "runtime"
    """Run records, leases, tool intents and the model journal (a :class:`RunStore`)."""
    EVENTS = "events"
    """A per-run event log (an :class:`EventLog`)."""
    COMMIT = "commit"
    """:meth:`RunStore.rt_commit` writes a run owner's changes in one fenced transaction."""
    REMOTE = "remote"
    """Reads cross a network (a round trip each): ``DurableRuntime`` keeps a mirror of
    its run records so that synchronous reads on the event loop never wait for one."""
