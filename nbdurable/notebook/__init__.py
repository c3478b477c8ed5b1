"""nbdurable in Jupyter: the ``%%agent`` and ``%durable`` magics, the kernel session, widgets.

``%load_ext nbdurable`` adds the magics. One :class:`NotebookSession` per kernel
holds the store (``sqlite:///.nbdurable/runs.db`` by default) and a
:class:`~nbdurable.DurableRuntime` opened on the kernel's own event loop, so runs
execute as tasks beside the notebook's cells. From Python::

    from nbdurable.notebook import session

    nb = session()
    run = await nb.runtime.submit("janitor", "Clean up the staging tables.")
    nb.store                     # the store the magics use
"""

from __future__ import annotations

from typing import Any

from ._needs import needs, temporal_binary
from ._session import DEFAULT_STORE, NotebookSession, session, set_session

__all__ = [
    "DEFAULT_STORE",
    "HistoryBrowser",
    "NotebookSession",
    "RunWidget",
    "RunsDashboard",
    "load_ipython_extension",
    "needs",
    "session",
    "set_session",
    "temporal_binary",
]

_WIDGETS = ("HistoryBrowser", "RunWidget", "RunsDashboard")


def __getattr__(name: str) -> Any:
    # The widgets (and ipywidgets with them) load when first asked for.
    if name in _WIDGETS:
        from . import widgets

        return getattr(widgets, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_ipython_extension(ipython: Any) -> None:
    """Add ``%%agent`` and ``%durable`` to an IPython shell (``%load_ext nbdurable``).

    In a Jupyter kernel, nbdurable's background log lines go to
    ``.nbdurable/notebook.log`` instead of whichever cell runs at the time.
    """
    from ._magics import DurableMagics
    from ._notices import keep_notices_out_of_cells

    ipython.register_magics(DurableMagics)
    keep_notices_out_of_cells(ipython)
