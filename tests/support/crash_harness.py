"""Kill a writer with SIGKILL in the middle of saves, then check what the store kept.

Run as a script, this module is the writer: it saves one run's checkpoints as
fast as it can and prints ``ok <step>`` after each save returns (a committed
checkpoint). Imported, it gives :func:`torture`, which starts writers, kills
them at random moments and checks after every kill that

- the store opens cleanly;
- every checkpoint a writer reported loads intact (equal to what was saved);
- the latest checkpoint is complete (equal to the expected one at its step):
  no partial checkpoint is ever returned;
- the history has every step, in order, once the writer has resumed.

``tests/stores/test_crash.py`` runs a few kills; ``benchmarks/crash_torture.py``
runs many.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field

import nbdurable as nd

EDIT_EVERY = 25
"""Every this many steps the history starts over with a new first message (as
after a rewind): a history that does not extend the previous one (a full JSONL
line, a new SQLite chain), and histories that stay short enough to verify every
committed checkpoint after every kill."""


def _pair(i: int) -> tuple[nd.Message, nd.Message]:
    call_id = f"call_{i}"
    call = nd.assistant([nd.ToolCallPart(tool_call_id=call_id, tool_name="probe", args={"n": i})])
    parts: list[nd.ToolResultPart | nd.ImagePart] = [
        nd.ToolResultPart(
            tool_call_id=call_id, tool_name="probe", result=f"result {i}: " + "x" * 1500
        )
    ]
    if i % 10 == 0:
        parts.append(nd.ImagePart(data=bytes([i % 256]) * 4096, media_type="image/png"))
    return call, nd.Message(role="tool", content=tuple(parts))


def _first(step: int) -> nd.Message:
    image = bytes(range(256)) * 4
    return nd.user([f"Probe the system (brief version {step // EDIT_EVERY}).", image])


def expected(run_id: str, step: int) -> nd.AgentCheckpoint:
    """The checkpoint the writer saves at ``step``, rebuilt from nothing."""
    messages: tuple[nd.Message, ...] = (_first(step),)
    for i in range(step - step % EDIT_EVERY, step + 1):
        messages = (*messages, *_pair(i))
    return _checkpoint(run_id, step, messages)


def _checkpoint(run_id: str, step: int, messages: tuple[nd.Message, ...]) -> nd.AgentCheckpoint:
    return nd.AgentCheckpoint(
        run_id=run_id,
        step_index=step,
        status="running",
        messages=messages,
        usage=nd.Usage(input_tokens=step, output_tokens=2 * step, total_tokens=3 * step),
        created_at=1_700_000_000_000 + step,
    )


def write(url: str, run_id: str, start: int, stop: int) -> None:
    """Save steps ``start..stop-1``, building each history from the previous one as the loop does."""
    store = nd.open_store(url)
    messages: tuple[nd.Message, ...] = expected(run_id, start - 1).messages if start else ()
    for step in range(start, stop):
        if step % EDIT_EVERY == 0 or not messages:
            messages = expected(run_id, step).messages
        else:
            messages = (*messages, *_pair(step))
        store.save(_checkpoint(run_id, step, messages))
        print(f"ok {step}", flush=True)
    store.close()


@dataclass
class Report:
    """What a torture session saw."""

    kills: int = 0
    committed: int = 0
    torn_warnings: int = 0
    steps_verified: int = 0
    latest_steps: list[int] = field(default_factory=list)


def torture(url: str, run_id: str, kills: int, *, seed: int = 0, max_delay: float = 0.15) -> Report:
    """Kill ``kills`` writers mid-run and check the store after each kill.

    Raises:
        AssertionError: The store lost a committed checkpoint, returned a
            partial one, or did not reopen.
    """
    rng = random.Random(seed)
    report = Report()
    reported: set[int] = set()
    for _ in range(kills):
        start = _next_step(url, run_id, report)
        proc = subprocess.Popen(
            [sys.executable, __file__, url, run_id, str(start), str(start + 100_000)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        lines: list[str] = []
        first = threading.Event()
        reader = threading.Thread(target=_read_lines, args=(proc, lines, first), daemon=True)
        reader.start()
        if not first.wait(timeout=60):
            proc.kill()
            raise AssertionError(f"writer never saved: {proc.communicate()[1]}")
        time.sleep(rng.uniform(0, max_delay))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join(timeout=10)
        report.kills += 1
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read() if proc.stderr else ""
        now = {int(line.split()[1]) for line in lines if line.startswith("ok ")}
        reported |= now
        report.committed += len(now)
        _verify(url, run_id, reported, now, report)
    return report


def _read_lines(proc: subprocess.Popen[str], lines: list[str], first: threading.Event) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        first.set()


def _open(url: str, report: Report) -> nd.HistoryStore:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = nd.open_store(url)
    report.torn_warnings += sum("torn" in str(w.message) for w in caught)
    return store


def _next_step(url: str, run_id: str, report: Report) -> int:
    store = _open(url, report)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            latest = store.load(run_id)
        report.torn_warnings += sum("torn" in str(w.message) for w in caught)
        return 0 if latest is None else latest.step_index + 1
    finally:
        store.close()


def _verify(url: str, run_id: str, reported: set[int], new: set[int], report: Report) -> None:
    store = _open(url, report)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            latest = store.load(run_id)
            assert latest is not None, "no checkpoint after a kill"
            top = max(reported)
            # the kill may land after a commit and before its "ok" line
            assert top <= latest.step_index <= top + 1, (top, latest.step_index)
            assert latest == expected(run_id, latest.step_index), "partial latest checkpoint"
            steps = [info.step_index for info in store.history(run_id)]
            assert steps == list(range(latest.step_index + 1)), steps
            for step in sorted(new):
                assert store.load(run_id, step_index=step) == expected(run_id, step), step
                report.steps_verified += 1
        report.torn_warnings += sum("torn" in str(w.message) for w in caught)
        report.latest_steps.append(latest.step_index)
    finally:
        store.close()


if __name__ == "__main__":
    write(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
