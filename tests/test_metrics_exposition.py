"""The exposition operators alert on: model calls, tokens and cost by agent and model (bounded),
the standard process metrics, no ``*_created`` series unless asked, ``promtool check metrics``
clean, and the alert rules docs/observability.md shows accepted by ``promtool check rules``."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("prometheus_client")

from support.scraping import samples, value

import nbdurable as nd
from nbdurable import metrics
from nbdurable.messages import Usage
from nbdurable.tracing import model_name

ROOT = Path(__file__).resolve().parent.parent
PROMTOOL = shutil.which("promtool")


@pytest.fixture
def enabled() -> Iterator[metrics.MetricsHooks]:
    hooks = metrics.enable_metrics(nd.open_store("memory://"), store_name="test")
    try:
        yield hooks
    finally:
        metrics.disable_metrics()


@nd.tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


async def test_model_calls_tokens_and_cost_are_counted_by_agent_and_model(
    enabled: metrics.MetricsHooks,
) -> None:
    agent = nd.Agent(
        "adder",
        nd.ScriptedModel(
            [nd.Turn.call("add", a=1, b=2), "3"], model_id="m-1", price_per_million=(1.0, 2.0)
        ),
        [add],
        version="1",
    )
    runtime = await nd.DurableRuntime.open(store=nd.open_store("memory://"), agents=[agent])
    run = await runtime.submit("adder", "1+2?")
    result = await run.result()
    await runtime.close()
    scraped = samples(metrics.render().decode())
    labels = {"agent": "adder", "model": model_name(agent.model)}
    assert value(scraped, "nbdurable_model_calls_total", **labels) == 2
    assert value(scraped, "nbdurable_model_tokens_total", **labels, kind="input") == (
        result.usage.input_tokens
    )
    assert value(scraped, "nbdurable_model_tokens_total", **labels, kind="output") == (
        result.usage.output_tokens
    )
    assert result.usage.cost
    cost = value(scraped, "nbdurable_model_cost_dollars_total", **labels)
    assert cost == pytest.approx(result.usage.cost)


def test_the_model_label_is_bounded(enabled: metrics.MetricsHooks) -> None:
    for n in range(metrics.MAX_MODELS + 10):
        enabled.model_used("a", f"model-{n}", Usage(input_tokens=1, output_tokens=1))
    text = metrics.render().decode()
    models = set(re.findall(r'nbdurable_model_calls_total\{agent="a",model="([^"]+)"', text))
    assert len(models) == metrics.MAX_MODELS + 1
    assert "other" in models


def test_process_metrics_are_there_and_created_series_are_not_unless_asked(
    enabled: metrics.MetricsHooks,
) -> None:
    enabled.model_used("a", "m", Usage(input_tokens=1))
    text = metrics.render().decode()
    for name in ("process_cpu_seconds_total", "process_resident_memory_bytes", "python_info"):
        assert re.search(rf"^{name}[{{ ]", text, re.M), name
    assert not re.search(r"^\w+_created[{ ]", text, re.M)
    metrics.enable_metrics(created=True).model_used("a", "m", Usage(input_tokens=1))
    assert re.search(r"^nbdurable_model_calls_created[{ ]", metrics.render().decode(), re.M)


@pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)"
)
def test_promtool_finds_the_exposition_clean(enabled: metrics.MetricsHooks) -> None:
    enabled.model_used("a", "m", Usage(input_tokens=3, output_tokens=2, cost=0.01))
    enabled.run_started("a", "m")
    enabled.run_left("a", "failed", "error", "m")
    with enabled.timed(enabled.model_seconds, "a"):
        pass
    assert PROMTOOL is not None
    checked = subprocess.run(
        [PROMTOOL, "check", "metrics"], input=metrics.render(), capture_output=True
    )
    assert checked.returncode == 0 and not checked.stdout.strip() and not checked.stderr.strip(), (
        checked.stdout + checked.stderr
    )


def alert_rules() -> str:
    doc = (ROOT / "docs" / "observability.md").read_text()
    [rules] = re.findall(r"^```yaml\n(groups:.*?)^```", doc, re.S | re.M)
    return rules


@pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)"
)
def test_the_documented_alert_rules_pass_promtool(tmp_path: Path) -> None:
    rules = tmp_path / "nbdurable.rules.yml"
    rules.write_text(alert_rules())
    assert PROMTOOL is not None
    checked = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 3 rules found" in checked.stdout


RULE_TESTS = """
rule_files: [nbdurable.rules.yml]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: 'nbdurable_store_oldest_waiting_seconds{store="s",state="waiting_approval",instance="w1"}'
        values: '14000+60x40'
      - series: 'nbdurable_store_oldest_waiting_seconds{store="s",state="waiting_approval",instance="w2"}'
        values: '14000+60x40'
      - series: 'nbdurable_store_up{store="s",instance="w1"}'
        values: '1 1 0x40'
      - series: 'nbdurable_runs_failed_total{agent="a",model="m",reason="error",instance="w1"}'
        values: '0+5x40'
      - series: 'nbdurable_runs_finished_total{agent="a",model="m",state="failed",instance="w1"}'
        values: '0+5x40'
      - series: 'nbdurable_runs_finished_total{agent="a",model="m",state="completed",instance="w1"}'
        values: '0+5x40'
      - series: 'nbdurable_runs_finished_total{agent="b",model="m",state="completed",instance="w1"}'
        values: '0+5x40'
    alert_rule_test:
      - eval_time: 2m
        alertname: NbdurableRunWaitingTooLong
      - eval_time: 15m
        alertname: NbdurableRunWaitingTooLong
        exp_alerts:
          - exp_labels: {severity: warning, store: s, state: waiting_approval}
            exp_annotations:
              summary: "A run has been in waiting_approval for over 4 hours (s)"
              description: "Find it with `nbdurable runs list --status waiting_approval`; approve, deny or retry it."
      - eval_time: 3m
        alertname: NbdurableStoreDown
      - eval_time: 6m
        alertname: NbdurableStoreDown
        exp_alerts:
          - exp_labels: {severity: critical, store: s}
            exp_annotations:
              summary: "The run store s has not answered for 2 minutes"
      - eval_time: 30m
        alertname: NbdurableRunErrorRate
        exp_alerts:
          - exp_labels: {severity: warning, agent: a}
            exp_annotations:
              summary: "Over 10% of a's runs failed in the last 15 minutes"
"""
"""Series that make each rule fire (and not too early), one agent that never fails."""


@pytest.mark.skipif(
    PROMTOOL is None, reason="promtool is not installed (apt-get install prometheus)"
)
def test_the_documented_alert_rules_fire_when_they_should(tmp_path: Path) -> None:
    (tmp_path / "nbdurable.rules.yml").write_text(alert_rules())
    (tmp_path / "tests.yml").write_text(RULE_TESTS)
    assert PROMTOOL is not None
    tested = subprocess.run(
        [PROMTOOL, "test", "rules", "tests.yml"], capture_output=True, text=True, cwd=tmp_path
    )
    assert tested.returncode == 0, tested.stdout + tested.stderr
