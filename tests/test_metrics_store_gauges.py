"""The store-wide gauges' sample: a scrape waits for it a bounded time, one sample runs at a
time, and ``nbdurable_store_up`` says 0 when the store does not answer (a store that hangs)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence

import pytest
from support.scraping import samples, value

from nbdurable import metrics
from nbdurable.durable.store import RunStore
from nbdurable.runs import RuntimeRun


class HangingStore:
    """Run records that answer at once until ``hang`` is set; then each read waits for ``go``."""

    def __init__(self) -> None:
        self.hang = threading.Event()
        self.go = threading.Event()
        self.reads = 0

    def rt_list(self, states: Sequence[str] | None = None) -> list[RuntimeRun]:
        self.reads += 1
        if self.hang.is_set():
            self.go.wait(30)
            raise ConnectionError("the store went away")
        return []


RunStore.register(HangingStore)  # run records without the rest: a virtual subclass


@pytest.fixture
def store() -> Iterator[HangingStore]:
    hanging = HangingStore()
    metrics.enable_metrics(hanging, store_name="s")  # type: ignore[arg-type]
    yield hanging
    hanging.go.set()
    metrics.disable_metrics()


def _scrape() -> tuple[float, float]:
    began = time.monotonic()
    text = metrics.render().decode()
    return value(samples(text), "nbdurable_store_up"), time.monotonic() - began


@pytest.mark.serial
def test_a_hanging_store_reads_as_down_within_the_bounded_wait(
    store: HangingStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _scrape()[0] == 1
    store.hang.set()
    # under the sample timeout a slow store still shows its previous sample
    assert _scrape() == (1, pytest.approx(metrics.SAMPLE_WAIT_S, abs=0.3))
    monkeypatch.setattr(metrics, "SAMPLE_TIMEOUT_S", 0.0)  # now the sample is overdue
    for _ in range(3):
        up, seconds = _scrape()
        assert up == 0 and seconds < 1.0
    assert store.reads == 2  # one sample at a time: the scrapes shared the hanging one
    store.hang.clear()
    store.go.set()  # the hanging read fails; the next sample answers
    deadline = time.monotonic() + 5
    while _scrape()[0] != 1:
        assert time.monotonic() < deadline


@pytest.mark.serial
def test_a_store_that_never_answered_is_down_at_the_first_scrape(store: HangingStore) -> None:
    store.hang.set()
    up, seconds = _scrape()
    assert up == 0 and seconds < 1.0
