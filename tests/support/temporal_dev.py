"""How the tests start the Temporal dev server: one task-queue partition.

The dev server splits every task queue into four partitions, as a cluster does to
spread a busy queue over matching hosts. A test's queue is fresh and has one or two
workers: a task written to a partition none of its pollers waits on is forwarded to
the root partition, and a run's workflow and activity tasks waited on that: the Temporal
tests (``tests/temporal/``, the engine suite on Temporal) took about a fifth longer,
run side by side with the same tests on one partition, and more so the more loaded the
machine. One process gains nothing from partitions; what the tests prove is the same on
one.
"""

from __future__ import annotations

ONE_PARTITION = (
    "--dynamic-config-value",
    "matching.numTaskqueueReadPartitions=1",
    "--dynamic-config-value",
    "matching.numTaskqueueWritePartitions=1",
)
"""``temporal server start-dev`` arguments: every task queue has one partition."""

EAGER_OFF = ("--dynamic-config-value", "system.enableActivityEagerExecution=false")
"""Activities go through the task queue, not eagerly to the worker that scheduled them."""
