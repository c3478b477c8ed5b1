"""Crash safety of the event log: the writer is SIGKILLed while the model streams.

A child process (this file run as a script) runs a durable ``stream_chat`` (or
resumes one) on a store, with a :class:`ScriptedModel` that streams long texts
over several tool steps. A subscriber in the child, on its own connection,
prints every event it reads back from the store: those events were committed.
The test kills the child with SIGKILL in the middle of a step's stream and
checks the log it left:

- the store opens cleanly (SQLite: ``PRAGMA integrity_check`` says ok);
- every event the child saw committed is there, identical;
- offsets are 1..N with no hole;
- the killed leg has no terminal event and no ``model_attempt_failed``: the
  attempt in flight just stops;
- the fold shows the completed steps' text and, as provisional text of the step
  in flight, exactly what its last attempt streamed, a prefix of the script.

Then the run is resumed (in another child that is killed again, or in the test
process) and the new leg continues the offsets with no hole, starts with
``run_started`` (``resumed=True``), re-runs the step in flight under a new
attempt id and writes no delta of a completed step again; the final fold shows
the clean text of every step. The JSONL store gets one kill too: a torn last
line may be ignored with a RuntimeWarning, every line before it is intact.
"""

from __future__ import annotations

import asyncio
import gc
import os
import queue
import signal
import sqlite3
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable import events as ev

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="SIGKILL is POSIX")

RUN_ID = "crash::stream#1"
STEPS = 5
"""Four tool steps, then the final answer."""
WORDS = 300
"""Words (one delta each) a step streams."""
STREAM_DELAY = 0.002
"""Seconds between deltas in the children: a step streams for about 0.7 s."""
SLOW_KEY = "NBDURABLE_TEST_SLOW_KEY"
"""A child whose environment names a key makes ``lookup`` hang on it."""
MAX_KILL_AFTER = 80
"""Kills land after at most this many deltas of a step: a wide margin before it completes."""


@nd.tool
async def lookup(key: str) -> str:
    """Look a key up."""
    if os.environ.get(SLOW_KEY) == key:
        print("tool running", flush=True)
        await asyncio.sleep(60)  # the kill lands here
    return f"value of {key}"


def step_text(step: int) -> str:
    return " ".join(f"s{step}w{i}" for i in range(WORDS))


def script(stream_delay: float) -> nd.ScriptedModel:
    turns: list[nd.Turn | str] = [
        nd.Turn.call("lookup", step_text(i), key=f"k{i}") for i in range(STEPS - 1)
    ]
    turns.append(step_text(STEPS - 1))
    return nd.ScriptedModel(turns, stream_delay=stream_delay)


# -- the child: run or resume, print every committed event ------------------------


async def _child(url: str, resume: bool, after: int, stream_delay: float) -> None:
    writer = nd.open_store(url)
    # SQLite: read back through a second connection, what another process would see.
    reader = nd.open_store(url) if url.startswith("sqlite") else writer
    model = script(stream_delay)
    if resume:
        stream = nd.resume_stream_from_checkpoint(writer, RUN_ID, model=model, tools=[lookup])
    else:
        stream = nd.stream_chat(
            model=model, messages="go", tools=[lookup], session=nd.DurableSession(writer, RUN_ID)
        )
    async for event in nd.subscribe(reader, RUN_ID, after=after, wait=True, poll_interval=0.01):
        sys.stdout.write(f"event {event.model_dump_json()}\n")
        sys.stdout.flush()
    await stream.result()
    print("done", flush=True)


# -- the test side -----------------------------------------------------------------


@dataclass
class Leg:
    """One killed leg: what the child printed and where the log stood."""

    after: int
    printed: list[ev.Event] = field(default_factory=list)
    kill_step: int = 0


def _url(kind: str, tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'runs.db'}" if kind == "sqlite" else f"jsonl:///{tmp_path}/runs"


def kill_mid_stream(url: str, *, resume: bool, after: int, step: int, deltas: int) -> Leg:
    """Start a child leg and SIGKILL it once ``deltas`` deltas of ``step`` are committed.

    (Of the first step from ``step`` on: a kill that landed late left the run past it.)
    """
    attempt: list[str | None] = [None]
    seen = [0]

    def enough(event: ev.Event) -> bool:
        at = event.step_index
        if event.type == ev.MODEL_ATTEMPT_STARTED and at is not None and at >= step:
            attempt[0] = event.attempt_id
        elif event.type == ev.MODEL_DELTA and attempt[0] and event.attempt_id == attempt[0]:
            seen[0] += 1
        return seen[0] >= deltas

    leg = kill_when(url, enough, resume=resume, after=after)
    leg.kill_step = step
    return leg


def kill_when(
    url: str,
    done: Callable[[ev.Event], bool],
    *,
    resume: bool,
    after: int,
    stream_delay: float = STREAM_DELAY,
    slow_key: str = "",
) -> Leg:
    """Start a child leg; SIGKILL it once ``done`` is true of a committed event."""
    proc = subprocess.Popen(
        [
            sys.executable,
            __file__,
            url,
            "resume" if resume else "start",
            str(after),
            str(stream_delay),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, SLOW_KEY: slow_key},
    )
    lines: queue.Queue[str | None] = queue.Queue()
    reader = threading.Thread(target=_pump, args=(proc, lines), daemon=True)
    reader.start()
    leg = Leg(after=after)
    deadline = time.monotonic() + 30
    try:
        while True:
            try:
                line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError("the child never got to the kill point") from None
            if line is None:
                raise AssertionError(f"the child ended early: {proc.communicate()[1]}")
            if not line.startswith("event "):
                continue
            event = ev.Event.model_validate_json(line.removeprefix("event "))
            leg.printed.append(event)
            assert event.type not in ev.TERMINAL_EVENTS, "the leg ended before the kill"
            if done(event):
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join(timeout=10)
        # closed here, not by the collector: a pipe collected later warns (ResourceWarning)
        # inside whatever test happens to be recording warnings at that moment
        errors = proc.stderr.read() if proc.stderr and not proc.stderr.closed else ""
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
    assert proc.returncode == -signal.SIGKILL, errors
    # lines printed between the kill decision and the kill were committed too
    while (line := lines.get_nowait()) is not None:
        if line.startswith("event "):
            leg.printed.append(ev.Event.model_validate_json(line.removeprefix("event ")))
    return leg


def _pump(proc: subprocess.Popen[str], lines: queue.Queue[str | None]) -> None:
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.put(line)
    lines.put(None)


def open_after_kill(url: str, tmp_path: Path) -> tuple[nd.HistoryStore, list[ev.Event], int]:
    """Open the store, read the whole log; return it and how many torn-line warnings came up."""
    if url.startswith("sqlite"):
        with sqlite3.connect(tmp_path / "runs.db") as conn:
            assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    # garbage left by earlier tests is collected here, not inside the recording below
    # (an unclosed pipe of another test's child once warned in it)
    gc.collect()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        store = nd.open_store(url)
        log = list(store.read_events(RUN_ID))  # type: ignore[attr-defined]
    torn = [
        w for w in caught if issubclass(w.category, RuntimeWarning) and "torn" in str(w.message)
    ]
    assert len(torn) == len(caught), [str(w.message) for w in caught]
    if url.startswith("sqlite"):
        assert not torn
    return store, log, len(torn)


def check_killed_leg(log: Sequence[ev.Event], leg: Leg) -> str:
    """The log a kill left; returns the attempt id that was in flight.

    The attempt in flight has no failure event; it is simply cut off.
    """
    assert [e.offset for e in log] == list(range(1, len(log) + 1)), "a hole in the offsets"
    by_offset = {e.offset: e for e in log}
    assert leg.printed, "the child printed nothing"
    for seen in leg.printed:
        assert by_offset.get(seen.offset) == seen, f"committed event {seen.offset} lost or changed"
    assert [e.offset for e in leg.printed] == list(range(leg.after + 1, leg.printed[-1].offset + 1))
    this_leg = list(log[leg.after :])
    assert this_leg[0].type == ev.RUN_STARTED
    assert this_leg[0].payload["resumed"] is (leg.after > 0)
    assert not [e for e in this_leg if e.type in (*ev.TERMINAL_EVENTS, ev.MODEL_ATTEMPT_FAILED)]
    # the step in flight: its last attempt started and never completed
    started = [e for e in this_leg if e.type == ev.MODEL_ATTEMPT_STARTED]
    # The parent reads the child's output behind it: on a loaded machine the kill
    # lands in a later step than the one asked for (once: 130 deltas into the next).
    assert started[-1].step_index is not None and started[-1].step_index >= leg.kill_step
    leg.kill_step = started[-1].step_index
    in_flight = started[-1].attempt_id
    assert in_flight is not None
    assert not [e for e in this_leg if e.type == ev.MODEL_COMPLETED and e.attempt_id == in_flight]
    # the fold: completed steps show their text; the step in flight exactly what its
    # last attempt streamed (a prefix of the script), nothing more
    streamed = "".join(
        e.payload["delta"] for e in log if e.type == ev.MODEL_DELTA and e.attempt_id == in_flight
    )
    assert streamed and step_text(leg.kill_step).startswith(streamed)
    view = nd.fold_events(log)
    assert view.status == "running"
    for index, step in view.steps.items():
        if index < leg.kill_step:
            assert (step.text, step.provisional_text) == (step_text(index), "")
    current = view.steps[leg.kill_step]
    assert (current.text, current.attempt_id) == ("", in_flight)
    assert current.provisional_text == streamed
    return in_flight


def check_next_leg(log: Sequence[ev.Event], before: Sequence[ev.Event], kill_step: int) -> None:
    """The leg after a kill continues the log.

    The step in flight runs again under a new attempt id; steps completed before the kill are not re-run: no attempt, no delta again.
    """
    n = len(before)
    assert list(log[:n]) == list(before), "the resumed leg changed earlier events"
    assert [e.offset for e in log] == list(range(1, len(log) + 1)), "a hole in the offsets"
    resumed = list(log[n:])
    assert resumed[0].offset == n + 1 and resumed[0].type == ev.RUN_STARTED
    assert resumed[0].payload == {"resumed": True, "next_step_index": kill_step}
    old_attempts = {e.attempt_id for e in before if e.type == ev.MODEL_ATTEMPT_STARTED}
    first = next(e for e in resumed if e.type == ev.MODEL_ATTEMPT_STARTED)
    assert first.step_index == kill_step and first.attempt_id not in old_attempts
    model_events = (ev.MODEL_ATTEMPT_STARTED, ev.MODEL_DELTA, ev.MODEL_COMPLETED)
    assert not [e for e in resumed if e.type in model_events and (e.step_index or 0) < kill_step]


def check_final(log: Sequence[ev.Event], kills: dict[int, int]) -> None:
    """After the last leg: every step clean, each completed once, its deltas written once."""
    assert [e.offset for e in log] == list(range(1, len(log) + 1))
    assert log[-1].type == ev.RUN_FINISHED
    view = nd.fold_events(log)
    assert view.status == "completed" and view.text == step_text(STEPS - 1)
    assert sorted(view.steps) == list(range(STEPS))
    for index, step in view.steps.items():
        assert (step.text, step.provisional_text) == (step_text(index), "")
        assert step.attempts == 1 + kills.get(index, 0)
        completed = [e for e in log if e.type == ev.MODEL_COMPLETED and e.step_index == index]
        assert len(completed) == 1, f"step {index} completed {len(completed)} times"
        winner = completed[0].attempt_id
        deltas = [e for e in log if e.type == ev.MODEL_DELTA and e.step_index == index]
        clean = "".join(e.payload["delta"] for e in deltas if e.attempt_id == winner)
        assert clean == step_text(index)
        # every other delta of the step belongs to an attempt cut off before the winner began
        start = next(e.offset for e in log if e.attempt_id == winner)
        assert all(e.offset < start for e in deltas if e.attempt_id != winner)
    assert not [e for e in log if e.type == ev.MODEL_ATTEMPT_FAILED]


async def resume_here(store: nd.HistoryStore) -> None:
    stream = nd.resume_stream_from_checkpoint(store, RUN_ID, model=script(0), tools=[lookup])
    result = await stream.result()
    assert result.status == "completed" and result.text == step_text(STEPS - 1)


@pytest.mark.spec("S003-27", "S003-28")
async def test_sigkilled_sqlite_writer_keeps_every_committed_event_and_resumes(
    tmp_path: Path,
) -> None:
    """Three kills mid-stream, two of them in the same step, then a clean finish.

    After each kill the log holds every committed event with gap-free offsets and
    no terminal event; each resumed leg continues the offsets, re-runs the step in
    flight under a new attempt id and never re-streams a completed step.
    """
    url = _url("sqlite", tmp_path)
    plan = [(1, 40), (1, 1), (3, MAX_KILL_AFTER)]  # (step, deltas seen before the kill)
    kills: dict[int, int] = {}
    before: list[ev.Event] = []
    previous_step: int | None = None
    for step, deltas in plan:
        leg = kill_mid_stream(url, resume=bool(before), after=len(before), step=step, deltas=deltas)
        store, log, _ = open_after_kill(url, tmp_path)
        store.close()
        if previous_step is not None:
            check_next_leg(log, before, previous_step)
        check_killed_leg(log, leg)
        kills[leg.kill_step] = kills.get(leg.kill_step, 0) + 1
        before, previous_step = log, leg.kill_step
    store, _, _ = open_after_kill(url, tmp_path)
    try:
        await resume_here(store)
        log = list(store.read_events(RUN_ID))  # type: ignore[attr-defined]
    finally:
        store.close()
    assert previous_step is not None
    check_next_leg(log, before, previous_step)
    check_final(log, kills)


@pytest.mark.spec("S003-27", "S003-28")
async def test_sigkilled_jsonl_writer_keeps_every_line_before_a_torn_one(tmp_path: Path) -> None:
    """On JSONL too: a torn last line may be ignored (RuntimeWarning), the rest holds."""
    url = _url("jsonl", tmp_path)
    leg = kill_mid_stream(url, resume=False, after=0, step=2, deltas=30)
    store, log, _torn = open_after_kill(url, tmp_path)
    try:
        check_killed_leg(log, leg)
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", "ignored a torn last line", RuntimeWarning)
            await resume_here(store)
            final = list(store.read_events(RUN_ID))  # type: ignore[attr-defined]
    finally:
        store.close()
    check_next_leg(final, log, 2)
    check_final(final, {2: 1})


@pytest.mark.spec("S003-28")
async def test_a_completed_model_response_is_reused_after_a_kill_during_its_tools(
    tmp_path: Path,
) -> None:
    """A model response committed before the kill is reused, not asked for again."""
    url = _url("sqlite", tmp_path)

    def completed_step_1(event: ev.Event) -> bool:
        return event.type == ev.MODEL_COMPLETED and event.step_index == 1

    leg = kill_when(url, completed_step_1, resume=False, after=0, stream_delay=0, slow_key="k1")
    store, before, _ = open_after_kill(url, tmp_path)
    try:
        # the response was committed, its calls made visible, then the tool hung until the kill
        assert leg.printed[-1] in before  # everything shown was committed
        done = [i for i, e in enumerate(before) if e.type == ev.MODEL_COMPLETED]
        assert done and before[done[-1]].step_index == 1
        assert all(e.type == ev.TOOL_CALL for e in before[done[-1] + 1 :])
        await resume_here(store)
        log = list(store.read_events(RUN_ID))  # type: ignore[attr-defined]
    finally:
        store.close()
    check_final(log, {})  # one attempt and one model_completed per step


if __name__ == "__main__":
    asyncio.run(_child(sys.argv[1], sys.argv[2] == "resume", int(sys.argv[3]), float(sys.argv[4])))
