"""The in-memory reference store: every checkpoint, run record and event in this process.

Its private modules: ``_store`` (the class: checkpoints and the event log) and
``_runs`` (the runtime's run records).
"""

from ._store import InMemorySessionStore

__all__ = ["InMemorySessionStore"]
