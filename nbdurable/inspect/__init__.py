"""Runs as data: DataFrames of runs, graphs, steps, messages, events; diff, rewind, explain, plots.

Every function takes the store first (a store object, or a URL such as
``"sqlite:///.nbdurable/runs.db"``) and works in a notebook or a plain Python
process. pandas and matplotlib are imported only when a DataFrame or a plot is
asked for (``pip install 'nbdurable[inspect]'``)::

    import nbdurable as nd

    nd.inspect.runs(store)                       # one row per run
    nd.inspect.graphs(store)                     # one row per graph
    nd.inspect.history(store, run_id)            # one row per step
    nd.inspect.messages(store, run_id, 3)        # the history at step 3
    nd.inspect.events(store, run_id)             # the event log
    nd.inspect.spans(store, run_id)              # model calls, tool calls, waits
    nd.inspect.diff(store, run_id, 2, fork_id)   # what changed
    fork = nd.inspect.rewind(store, run_id, 2, edit=nd.user("Only older than 90 days."))
    print(nd.inspect.explain(store, run_id))     # why is it stuck?
    nd.inspect.approvals(store, status="pending")  # the inbox: what waits for a human
    nd.inspect.plot_timeline(store, run_id)      # where the run's time went
"""

from ._approvals import approvals
from ._diff import Change, CheckpointDiff, diff
from ._explain import Explanation, PendingApproval, explain
from ._plots import plot_timeline, plot_usage
from ._rewind import RUN_FORKED, rewind
from ._source import StoreLike
from ._spans import spans
from ._views import events, graphs, history, messages, runs, usage

__all__ = [
    "RUN_FORKED",
    "Change",
    "CheckpointDiff",
    "Explanation",
    "PendingApproval",
    "StoreLike",
    "approvals",
    "diff",
    "events",
    "explain",
    "graphs",
    "history",
    "messages",
    "plot_timeline",
    "plot_usage",
    "rewind",
    "runs",
    "spans",
    "usage",
]
