"""The Temporal SDK's own logs and metrics, in the worker's log format and ``/metrics``.

Its Rust core writes warnings (a failing workflow task, a lost connection) to
stderr in a format of its own; a worker's :class:`SdkTelemetry` forwards them to
Python's logging (logger ``temporalio.core`` and the core's target below it), so
``--log-format json`` writes them as JSON lines like every other library's.

The SDK (its Rust core) counts what nbdurable cannot see: workflow task
failures by reason (``temporal_workflow_task_execution_failed_total`` with
``failure_reason="NonDeterminismError"`` is a release replaying a history it
cannot serve), poll and request latencies, sticky cache hits, task slots. A
worker started with metrics on (``--metrics-port``) connects through a
:class:`temporalio.runtime.Runtime` whose metrics go to a buffer, and
:class:`SdkTelemetry`, a collector in nbdurable's Prometheus registry, folds the
buffer's updates into counters, gauges and (count and sum only) summaries at
every scrape and once a second in between (the buffer is bounded).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

from temporalio.runtime import (
    BUFFERED_METRIC_KIND_COUNTER,
    BUFFERED_METRIC_KIND_GAUGE,
    LogForwardingConfig,
    LoggingConfig,
    MetricBuffer,
    MetricBufferDurationFormat,
    Runtime,
    TelemetryConfig,
    TelemetryFilter,
)

__all__ = ["CORE_LOGGER", "SdkTelemetry"]

CORE_LOGGER = "temporalio.core"
"""The Python logger the SDK core's lines are forwarded to."""

BUFFER_SIZE = 100_000
"""Updates the SDK may buffer between two drains (then it drops new ones)."""

Labels = tuple[tuple[str, str], ...]


class SdkTelemetry:
    """The SDK runtime a worker connects with (:attr:`runtime`), and a collector of its metrics.

    Args:
        metrics: Buffer the SDK's metrics (for :meth:`collect`); without, none are kept.
    """

    def __init__(self, *, metrics: bool) -> None:
        self.buffer = (
            MetricBuffer(BUFFER_SIZE, duration_format=MetricBufferDurationFormat.SECONDS)
            if metrics
            else None
        )
        logs = LoggingConfig(
            # the SDK's default levels, forwarded instead of written to stderr
            filter=TelemetryFilter(core_level="WARN", other_level="ERROR"),
            forwarding=LogForwardingConfig(logger=logging.getLogger(CORE_LOGGER)),
        )
        self.runtime = Runtime(telemetry=TelemetryConfig(logging=logs, metrics=self.buffer))
        self._lock = threading.Lock()
        self._kinds: dict[str, tuple[int, str]] = {}
        self._values: dict[str, dict[Labels, list[float]]] = {}

    def drain(self) -> None:
        """Fold the buffered updates in (counters add, gauges set, histograms count and sum)."""
        if self.buffer is None:
            return
        with self._lock:
            for update in self.buffer.retrieve_updates():
                metric = update.metric
                labels = tuple(
                    sorted(
                        (key, str(value))
                        for key, value in update.attributes.items()
                        if key != "service_name"  # the same on every sample
                    )
                )
                self._kinds.setdefault(metric.name, (metric.kind, metric.description or ""))
                series = self._values.setdefault(metric.name, {})
                value = float(update.value)
                if metric.kind == BUFFERED_METRIC_KIND_GAUGE:
                    series[labels] = [value]
                elif metric.kind == BUFFERED_METRIC_KIND_COUNTER:
                    series[labels] = [series.get(labels, [0.0])[0] + value]
                else:
                    count, total = series.get(labels, [0.0, 0.0])
                    series[labels] = [count + 1, total + value]

    def describe(self) -> list[Any]:
        """Nothing up front: the SDK's metrics appear as it reports them."""
        return []

    def collect(self) -> Iterator[Any]:
        """The SDK's metrics as Prometheus families."""
        from prometheus_client.core import Metric

        self.drain()
        with self._lock:
            for name, (kind, description) in sorted(self._kinds.items()):
                series = self._values[name]
                if kind == BUFFERED_METRIC_KIND_COUNTER:
                    family = Metric(name, description, "counter")
                    for labels, (value,) in series.items():
                        family.add_sample(f"{name}_total", dict(labels), value)
                elif kind == BUFFERED_METRIC_KIND_GAUGE:
                    family = Metric(name, description, "gauge")
                    for labels, (value,) in series.items():
                        family.add_sample(name, dict(labels), value)
                else:
                    family = Metric(name, description, "summary")
                    for labels, (count, total) in series.items():
                        family.add_sample(f"{name}_count", dict(labels), count)
                        family.add_sample(f"{name}_sum", dict(labels), total)
                yield family
