"""How the tests start the Temporal dev server: one task-queue partition.

The dev server splits every task queue into four partitions, as a cluster does to
spread a busy queue over matching hosts. A test's queue is fresh and has one or two
workers: a task written to a partition none of its pollers waits on is forwarded to
the root partition, and a run's every workflow and activity task waited on that (a
run of the engine suite took 2 to 3 times as long). One process gains nothing from
partitions; what the tests prove is the same on one.
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
