"""``nbdurable demo`` as a real process: a SIGKILLed worker, recovery, approval, denial."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import nbdurable as nd

from .conftest import fits


def _demo(
    tmp_path: Path, *args: str, stdin: str = ""
) -> tuple[subprocess.CompletedProcess[str], str]:
    url = f"sqlite:///{tmp_path / 'demo.db'}"
    done = subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", "demo", "--store", url, *args],
        input=stdin,
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
        timeout=60,
    )
    return done, url


def _only_run(url: str) -> tuple[str, list[tuple[int, str]]]:
    store = nd.open_store(url)
    try:
        [run] = store.rt_list()  # type: ignore[attr-defined]
        steps = [(c.step_index, c.status) for c in store.history(run.run_id)]
        return run.state, steps
    finally:
        store.close()


def test_demo_yes_crashes_recovers_approves_and_shows_a_denial(tmp_path: Path) -> None:
    started = time.monotonic()
    done, url = _demo(tmp_path, "--yes")
    took = time.monotonic() - started
    out = done.stdout
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert took < 20, took  # the demo itself aims at well under 10 s
    # the worker process streamed step 0, committed it, then died mid-step 1
    assert "  Let me look at the warehouse tables first." in out
    assert "● checkpoint: step 0 committed (running)" in out
    assert "== crash: the worker was killed by SIGKILL in the middle of step 1" in out
    crash = out.index("== crash")
    assert "   0  running" in out[crash:]  # the committed checkpoint survived
    # recovery in the parent: step 1 is streamed again, then it waits for a human
    recover = out.index("== recover")
    assert "stg_2024 is a staging table nobody has read for 41 days" in out[recover:]
    assert "Approve drop_table(name='stg_2024')? [y/N] y (--yes)" in out
    assert "← drop_table: dropped stg_2024" in out
    # the second call is denied by the demo; the model reacts
    assert "Approve drop_table(name='orders')? [y/N] n" in out
    assert "✗ drop_table: orders is production data" in out
    assert "Summary: dropped stg_2024, kept orders." in out
    assert _only_run(url) == (
        "completed",
        [(0, "running"), (1, "suspended"), (2, "suspended"), (3, "completed")],
    )
    paths = ("store: ", "  nbdurable runs")  # a long temporary path may not fit
    assert fits("\n".join(line for line in out.splitlines() if not line.startswith(paths)))


def test_demo_answered_no_on_stdin_the_model_backs_off(tmp_path: Path) -> None:
    done, url = _demo(tmp_path, stdin="n\n")
    out = done.stdout
    assert done.returncode == 0, done.stderr
    assert "Approve drop_table(name='stg_2024')? [y/N] n" in out
    assert "✗ drop_table: Denied by the operator." in out
    assert "Understood: I left stg_2024 in place. Nothing was dropped." in out
    assert "drop_table(name='orders')" not in out
    assert _only_run(url) == ("completed", [(0, "running"), (1, "suspended"), (2, "completed")])


def test_demo_without_store_or_answer_uses_a_temporary_store_and_denies(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "nbdurable.cli", "demo"],
        input="",
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written where it ran
    store_line = next(line for line in done.stdout.splitlines() if line.startswith("store: "))
    assert "nbdurable-demo-" in store_line
    assert "[y/N] (no answer: N)" in done.stdout
    assert "I left stg_2024 in place" in done.stdout


def test_demo_refuses_a_store_its_two_processes_cannot_share(cli) -> None:
    status, out, err = cli("demo", "--store", "memory://")
    assert status == 2 and out == ""
    assert err.startswith("nbdurable: the demo needs a store two processes share")
