"""The notebook widgets: a live run view, a runs dashboard and a history browser.

- :class:`RunWidget` (anywidget; front-end in the top-level ``widgets/``): one run,
  replayed from its event log then followed live, with signed approval cards.
- :class:`RunsDashboard`: the runs table with status filters and row actions
  (show, resume, approve, deny, rewind).
- :class:`HistoryBrowser`: a run's checkpoints, one step at a time, with
  "rewind from here".

Each is displayed like any widget: ``IPython.display.display(RunWidget(runtime, run_id))``.
"""

from ...runtime.verdicts import Outcome, submit_verdict
from .dashboard import RunsDashboard
from .history import HistoryBrowser
from .run_widget import FLUSH_INTERVAL, RunWidget

__all__ = [
    "FLUSH_INTERVAL",
    "HistoryBrowser",
    "Outcome",
    "RunWidget",
    "RunsDashboard",
    "submit_verdict",
]
