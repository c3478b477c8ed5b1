"""The notebook widgets: a live run view, a runs dashboard and a history browser.

- :class:`RunWidget` (anywidget; front-end in ``static/``): one run,
  replayed from its event log then followed live, with signed approval cards.
- :class:`RunsDashboard` (anywidget view; front-end ``static/dashboard_view.js``):
  pending approvals with Approve / Deny, then a live, sortable, filterable, paged
  table of runs; a click shows a run's widget or history below.
- :class:`HistoryBrowser`: a run's checkpoints, one step at a time, with
  "rewind from here".

Each is displayed like any widget: ``IPython.display.display(RunWidget(runtime, run_id))``.
"""

from ...runtime._checked_verdicts import Outcome, submit_verdict
from ._dashboard import RunsDashboard
from ._history import HistoryBrowser
from ._run_widget import FLUSH_INTERVAL, RunWidget

__all__ = [
    "FLUSH_INTERVAL",
    "HistoryBrowser",
    "Outcome",
    "RunWidget",
    "RunsDashboard",
    "submit_verdict",
]
