"""Prometheus metrics of agent runs (``prometheus-client``), off until :func:`enable_metrics`.

The runtime calls the module-level :data:`HOOKS` when a run starts, ends,
retries or is taken over, when a lease is renewed or lost, around each model
and tool call and step, and when a store call fails transiently. It is None
until :func:`enable_metrics` runs, so a process that never enables metrics pays
one attribute read per event and never imports ``prometheus_client``.

Two kinds of metric:

- **Per-process** counters and histograms (``nbdurable_runs_started_total``,
  ``nbdurable_model_call_seconds``, ...): what this process did. Sum them
  across processes.
- **Store-wide** gauges (``nbdurable_store_runs``,
  ``nbdurable_store_approvals_pending``): read from the store at scrape time,
  labelled with ``store``. Every process scraping the same store reports the
  same value, so aggregate them with ``max by (store, ...)``, never ``sum``.

Labels are bounded: agent ids, states, reasons, tool names, outcomes, and model
names (at most :data:`MAX_MODELS` of them; later ones count as ``other``). A run
id is never a label. The registry also has the standard process metrics
(``process_*``, ``python_info``, ``python_gc_*``); prometheus-client's
``*_created`` series are left out of :func:`render` unless ``created=True``.
"""

from __future__ import annotations

import functools
import hashlib
import re
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ._errors import ConfigurationError
from ._extras import import_for
from .durable import _transient as _transient
from .durable._transient import bounded_wait
from .durable.store import HistoryStore, RunStore
from .runs import HUMAN_STATES, RUN_STATES, TERMINAL_STATES

if TYPE_CHECKING:
    from .messages import Usage
    from .runs import RuntimeRun

__all__ = [
    "CONTENT_TYPE",
    "HOOKS",
    "MetricsHooks",
    "disable_metrics",
    "enable_metrics",
    "render",
    "store_label",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""Content type of :func:`render`'s output (the Prometheus text format)."""

HOOKS: MetricsHooks | None = None
"""The active metrics, or None when metrics are off (the default)."""

MAX_MODELS = 50
"""Distinct ``model`` label values a process reports; later models count as ``other``."""

_CREATED = re.compile(rb"^[a-zA-Z_:][a-zA-Z0-9_:]*_created[{ ]")
"""A ``*_created`` sample line of the text format (a counter's or histogram's start time)."""

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
_DECISION_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400)


def store_label(url: str) -> str:
    """A short, credential-free label naming a store URL (scheme and a digest of the rest)."""
    scheme, _, rest = url.partition("://")
    digest = hashlib.sha256(rest.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{scheme}:{digest}" if rest else digest


def enable_metrics(
    store: HistoryStore | None = None,
    *,
    store_name: str = "default",
    registry: Any = None,
    created: bool = False,
) -> MetricsHooks:
    """Turn on Prometheus metrics of every run in this process.

    Args:
        store: The runtime store whose runs the store-wide gauges count at
            scrape time (none: no store-wide gauges).
        store_name: The ``store`` label of those gauges (see :func:`store_label`).
        registry: The ``prometheus_client.CollectorRegistry`` to register in
            (default: a new one, not the library's global registry, with the
            standard process metrics).
        created: Keep prometheus-client's ``*_created`` series in :func:`render`
            (off: they double the series count and alert rules rarely need them).

    Returns:
        The active hooks (``hooks.registry`` is the registry).

    Raises:
        ConfigurationError: prometheus-client is not installed
            (``pip install 'nbdurable[metrics]'``).
    """
    global HOOKS
    import_for("metrics", "metrics", "prometheus_client")
    HOOKS = MetricsHooks(registry=registry, store=store, store_name=store_name, created=created)
    _transient.STORE_ERROR_HOOK = HOOKS.store_error
    return HOOKS


def disable_metrics() -> None:
    """Turn metrics off again (the registry keeps what it counted)."""
    global HOOKS
    HOOKS = None
    _transient.STORE_ERROR_HOOK = None


def render() -> bytes:
    """The active metrics in the Prometheus text format (empty when metrics are off)."""
    hooks = HOOKS
    if hooks is None:
        return b""
    from prometheus_client import generate_latest

    text = bytes(generate_latest(hooks.registry))
    if hooks.created:
        return text
    return b"".join(line for line in text.splitlines(keepends=True) if not _CREATED.match(line))


class MetricsHooks:
    """The metric families of one process, and the calls the runtime makes on them."""

    def __init__(
        self,
        *,
        registry: Any,
        store: HistoryStore | None,
        store_name: str,
        created: bool = False,
    ) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram

        self.created = created
        """Whether :func:`render` keeps the ``*_created`` series."""
        if registry is None:
            from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

            registry = CollectorRegistry()
            ProcessCollector(registry=registry)  # process_cpu_seconds_total, memory, fds
            PlatformCollector(registry=registry)  # python_info
            GCCollector(registry=registry)  # python_gc_*
        self.registry = registry
        self._models: set[str] = set()
        count = functools.partial(Counter, registry=self.registry)
        time_it = functools.partial(Histogram, registry=self.registry, buckets=_LATENCY_BUCKETS)
        self.runs_started = count(
            "nbdurable_runs_started",
            "Run legs this process started (claimed), by agent and model.",
            ["agent", "model"],
        )
        self.runs_finished = count(
            "nbdurable_runs_finished",
            "Runs this process brought to a final state, by agent, model and state.",
            ["agent", "model", "state"],
        )
        self.runs_failed = count(
            "nbdurable_runs_failed",
            "Runs this process ended as failed, by agent, model and reason.",
            ["agent", "model", "reason"],
        )
        self.runs_suspended = count(
            "nbdurable_runs_suspended",
            "Run legs this process ended waiting (approval, client tool), by agent and state.",
            ["agent", "state"],
        )
        self.model_retries = count(
            "nbdurable_model_retries",
            "Runs this process put in retry_wait after a model error, by agent.",
            ["agent"],
        )
        self.takeovers = count(
            "nbdurable_takeovers",
            "Runs this process took over from another owner, by agent and cause.",
            ["agent", "cause"],
        )
        self.model_calls = count(
            "nbdurable_model_calls",
            "Model calls that answered, by agent and model.",
            ["agent", "model"],
        )
        self.tokens = count(
            "nbdurable_model_tokens",
            "Tokens of the model calls that answered, by agent, model and kind "
            "(input, output, cached_input).",
            ["agent", "model", "kind"],
        )
        self.cost = count(
            "nbdurable_model_cost_dollars",
            "Cost of the model calls that answered (the models' prices), by agent and model.",
            ["agent", "model"],
        )
        self.lease_renewals = count("nbdurable_lease_renewals", "Lease renewals this process made.")
        self.leases_lost = count(
            "nbdurable_leases_lost",
            "Leases this process found taken by another owner while it ran the run.",
        )
        self.store_errors = count(
            "nbdurable_store_errors",
            "Store calls that failed transiently (and were retried), by operation.",
            ["operation"],
        )
        self.step_seconds = time_it(
            "nbdurable_step_seconds",
            "Duration of one agent step (model call and its tool calls), by agent.",
            ["agent"],
        )
        self.model_seconds = time_it(
            "nbdurable_model_call_seconds",
            "Duration of model calls, by agent and outcome (ok, error).",
            ["agent", "outcome"],
        )
        self.tool_seconds = time_it(
            "nbdurable_tool_call_seconds",
            "Duration of tool calls, by tool and outcome (ok, error).",
            ["tool", "outcome"],
        )
        self.decision_seconds = Histogram(
            "nbdurable_approval_decision_seconds",
            "Time from a run's suspension for approval to a verdict, by verdict.",
            ["verdict"],
            buckets=_DECISION_BUCKETS,
            registry=self.registry,
        )
        if store is not None:
            self.registry.register(_StoreGauges(store, store_name))

    # --- the calls the runtime makes ------------------------------------------------

    def run_started(self, agent: str, model: str = "-") -> None:
        """A run leg of ``agent`` (whose model is ``model``) was claimed and starts here."""
        self.runs_started.labels(agent, self._model_label(model)).inc()

    def run_left(self, agent: str, state: str, reason: str | None, model: str = "-") -> None:
        """A run leg of ``agent`` (whose model is ``model``) ended here in ``state``."""
        if state in TERMINAL_STATES:
            model = self._model_label(model)
            self.runs_finished.labels(agent, model, state).inc()
            if state == "failed":
                self.runs_failed.labels(agent, model, reason or "error").inc()
        elif state == "retry_wait":
            self.model_retries.labels(agent).inc()
        elif state in HUMAN_STATES:
            self.runs_suspended.labels(agent, state).inc()

    def model_used(self, agent: str, model: str, usage: Usage) -> None:
        """A model call answered: count it, its tokens and its cost."""
        model = self._model_label(model)
        self.model_calls.labels(agent, model).inc()
        self.tokens.labels(agent, model, "input").inc(max(usage.input_tokens, 0))
        self.tokens.labels(agent, model, "output").inc(max(usage.output_tokens, 0))
        if usage.cached_input_tokens:
            self.tokens.labels(agent, model, "cached_input").inc(usage.cached_input_tokens)
        if usage.cost:
            self.cost.labels(agent, model).inc(max(usage.cost, 0.0))

    def _model_label(self, model: str) -> str:
        """``model``, or ``other`` once :data:`MAX_MODELS` names are in use (bounded labels)."""
        name = model or "-"
        if name in self._models:
            return name
        if len(self._models) >= MAX_MODELS:
            return "other"
        self._models.add(name)
        return name

    def taken_over(self, agent: str, cause: str) -> None:
        """A run was taken over by this process from another owner."""
        self.takeovers.labels(agent, cause).inc()

    def lease_renewed(self, kept: bool) -> None:
        """A lease renewal succeeded (``kept``) or found the lease lost."""
        if kept:
            self.lease_renewals.inc()
        else:
            self.leases_lost.inc()

    def store_error(self, operation: str) -> None:
        """A store call failed transiently."""
        self.store_errors.labels(operation).inc()

    def decided(self, verdict: str, seconds: float) -> None:
        """An approval was answered ``seconds`` after its run suspended."""
        self.decision_seconds.labels(verdict).observe(max(seconds, 0.0))

    def timed(self, histogram: Any, *labels: str) -> _Timer:
        """A timer observing into ``histogram`` (labels then ``ok`` or ``error``) on exit."""
        return _Timer(histogram, labels)


class _Timer:
    """``with hooks.timed(hooks.model_seconds, agent):`` observes the block's duration."""

    def __init__(self, histogram: Any, labels: tuple[str, ...]) -> None:
        self.histogram = histogram
        self.labels = labels
        self.outcome = "ok"
        self.started = 0.0

    def __enter__(self) -> _Timer:
        self.started = time.perf_counter()
        return self

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> None:
        outcome = "error" if kind is not None else self.outcome
        elapsed = time.perf_counter() - self.started
        self.histogram.labels(*self.labels, outcome).observe(elapsed)


SAMPLE_WAIT_S = 0.5
"""How long a scrape waits for the store-wide gauges' sample (the scrape answers anyway)."""

SAMPLE_TIMEOUT_S = 2.0
"""How long a sample may go unanswered before ``nbdurable_store_up`` says 0.

The sample's waits inside the store are bounded by this too (PostgreSQL's pool
would wait 30 s for a connection), so during an outage a sample fails soon.
"""


class _Sample:
    """One reading of the store: run counts by state, or a failure (``counts`` None)."""

    def __init__(self, counts: dict[str, int] | None, oldest: dict[str, int] | None = None) -> None:
        self.counts = counts
        self.oldest = oldest or {}
        """Waiting state -> epoch ms of the last change of its longest-waiting run."""


class _StoreSampler:
    """Reads the store on a thread of its own, one sample at a time.

    A scrape starts a sample (unless one is under way) and waits for it
    :data:`SAMPLE_WAIT_S` at most: a store that hangs holds one thread, never a
    scrape. Past the wait the scrape answers with the previous sample while
    the current one is younger than :data:`SAMPLE_TIMEOUT_S` (a slow store),
    and with the store down after that.
    """

    def __init__(self, store: HistoryStore) -> None:
        self.store = store
        self._cond = threading.Condition()
        self._done = 0  # samples finished
        self._since: float | None = None  # when the sample under way began
        self._last: _Sample | None = None

    def read(self) -> _Sample | None:
        """The latest sample, or None when the store has not answered in time."""
        with self._cond:
            if self._since is None:
                self._since = time.monotonic()
                threading.Thread(
                    target=self._sample, name="nbdurable-store-gauges", daemon=True
                ).start()
            since, wanted = self._since, self._done + 1
            if self._cond.wait_for(lambda: self._done >= wanted, SAMPLE_WAIT_S):
                return self._last
            previous = self._last
            slow = time.monotonic() - since < SAMPLE_TIMEOUT_S
            if slow and previous is not None and previous.counts is not None:
                return previous
            return None

    def _sample(self) -> None:
        counts: dict[str, int] | None
        oldest: dict[str, int] = {}
        try:
            with bounded_wait(SAMPLE_TIMEOUT_S):
                records = [(r.state, r.updated_at) for r in _list_runs(self.store)]
            counts = dict.fromkeys(RUN_STATES, 0)
            for state, updated_at in records:
                counts[state] = counts.get(state, 0) + 1
                if state in HUMAN_STATES:
                    oldest[state] = min(oldest.get(state, updated_at), updated_at)
        except Exception:  # the store is away: the scrape says so instead of failing
            counts = None
        with self._cond:
            self._last = _Sample(counts, oldest)
            self._since = None
            self._done += 1
            self._cond.notify_all()


class _StoreGauges:
    """Store-wide gauges, from a sample of the store taken at scrape time (bounded wait)."""

    def __init__(self, store: HistoryStore, store_name: str) -> None:
        self.sampler = _StoreSampler(store)
        self.store_name = store_name

    def describe(self) -> list[Any]:
        return []  # computed at scrape time only: registering must not query the store

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        sample = self.sampler.read()
        counts = None if sample is None else sample.counts
        store_up = GaugeMetricFamily(
            "nbdurable_store_up",
            f"Whether the store answered this scrape's sample within {SAMPLE_TIMEOUT_S:g} s "
            "(1) or not (0).",
            labels=["store"],
        )
        store_up.add_metric([self.store_name], 0 if counts is None else 1)
        yield store_up
        if counts is None:
            return
        runs = GaugeMetricFamily(
            "nbdurable_store_runs",
            "Runs in the store by state (store-wide: aggregate with max, not sum).",
            labels=["store", "state"],
        )
        for state, count in sorted(counts.items()):
            runs.add_metric([self.store_name, state], count)
        yield runs
        waiting = GaugeMetricFamily(
            "nbdurable_store_approvals_pending",
            "Runs waiting for an approval verdict (store-wide: aggregate with max, not sum).",
            labels=["store"],
        )
        waiting.add_metric([self.store_name], counts.get("waiting_approval", 0))
        yield waiting
        age = GaugeMetricFamily(
            "nbdurable_store_oldest_waiting_seconds",
            "Seconds the longest-waiting run of each waiting state has waited, 0 when none "
            "(store-wide: aggregate with max).",
            labels=["store", "state"],
        )
        now_ms = time.time() * 1000
        for state in sorted(HUMAN_STATES):
            since = None if sample is None else sample.oldest.get(state)
            waited = 0.0 if since is None else max(now_ms - since, 0.0) / 1000
            age.add_metric([self.store_name, state], waited)
        yield age


def _list_runs(store: HistoryStore) -> list[RuntimeRun]:
    if not isinstance(store, RunStore):  # the scrape says the store is down
        raise ConfigurationError(f"{type(store).__name__} keeps no run records")
    return list(store.rt_list())
