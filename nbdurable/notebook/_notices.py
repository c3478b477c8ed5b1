"""Background notices in a kernel go to a log file, never into whichever cell runs.

A runtime in a notebook works in the background: lease renewals, takeovers, state
events. Its logger (``nbdurable``) has no handler of its own, so Python's last-resort
handler prints its warnings as red stderr, and ipykernel puts stderr in the cell that
happens to run at that moment, which says nothing about it. In a Jupyter kernel the
extension gives the logger a file instead; the run widget shows what a run does.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

__all__ = ["LOG_PATH", "keep_notices_out_of_cells"]

LOG_PATH = Path(".nbdurable") / "notebook.log"
"""Where a kernel's nbdurable log lines go (relative to the kernel's working directory)."""

_MARK = "nbdurable_notebook_log"


def keep_notices_out_of_cells(shell: Any, path: Path = LOG_PATH) -> Path | None:
    """Send the ``nbdurable`` logger's records to ``path`` when ``shell`` is a Jupyter kernel.

    Once per process; a terminal IPython (or a test's shell) keeps Python's usual
    handling. Returns the log file, or None when nothing changed.
    """
    if shell is None or "IPKernelApp" not in getattr(shell, "config", {}):
        return None
    logger = logging.getLogger("nbdurable")
    if any(getattr(handler, _MARK, False) for handler in logger.handlers):
        return None
    path = path.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path, delay=True, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    setattr(handler, _MARK, True)
    logger.addHandler(handler)
    logger.propagate = False  # not to the root's handlers, which write into the running cell
    return path
