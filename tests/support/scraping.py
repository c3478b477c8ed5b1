"""Scraping a process's ``/metrics`` and reading it with the Prometheus text parser."""

from __future__ import annotations

import re
import subprocess
import time
import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

Sample = tuple[str, dict[str, str], float]


def get(url: str) -> tuple[int, str]:
    """Status and body of a GET (an HTTP error's too)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def metrics_base(proc: subprocess.Popen[str], timeout: float = 30) -> str:
    """The ``http://host:port`` a worker started with ``--metrics-port 0`` printed."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        found = re.search(r"nbdurable metrics: (http://\S+)/metrics", line)
        if found:
            return found.group(1)
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no metrics line: {proc.communicate(timeout=5)}")


def samples(text: str) -> list[Sample]:
    """Every sample of a Prometheus text exposition: (name, labels, value)."""
    return [
        (sample.name, dict(sample.labels), sample.value)
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]


def families(text: str) -> set[str]:
    """The metric family names of a Prometheus text exposition."""
    return {family.name for family in text_string_to_metric_families(text)}


def value(scraped: list[Sample], name: str, **labels: str) -> float:
    """The sum of the samples named ``name`` whose labels include ``labels`` (0 when none)."""
    return sum(v for n, ls, v in scraped if n == name and labels.items() <= ls.items())


def scrape(base: str) -> list[Sample]:
    """A process's ``/metrics``, parsed."""
    status, body = get(f"{base}/metrics")
    assert status == 200, body
    return samples(body)
