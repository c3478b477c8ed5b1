"""Broken store files, for real: build a store, damage a copy of its bytes, read it back.

Shared by ``tests/stores/test_broken_files.py`` (a few damages) and
``benchmarks/corruption_sweep.py`` (every offset of a file). What is checked of
a damaged copy:

- every read of the store API either returns exactly what the sound store
  returned, or raises :class:`nbdurable.StoreCorruptionError` naming the file
  (never SQLite's own exception, never different data without an error);
- ``check_store`` reports damage whenever a read failed or differed, and lists
  each run whose reads failed or differed among the affected runs.
"""

from __future__ import annotations

import asyncio
import shutil
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbdurable as nd
from nbdurable.stores._check import CheckReport, check_store

RUNS = ("run-0", "run-1", "run-2")
STEPS = 4


def _tools() -> list[nd.Tool]:
    @nd.tool
    def probe(run: str, i: int) -> str:
        """Probe a value."""
        return f"probe result {i} of {run}: " + "abcdefghij" * 20

    return [probe]


def build(url: str) -> None:
    """A store holding three loop runs of ``STEPS`` tool steps each, with their event logs."""
    store = nd.open_store(url)

    async def go() -> None:
        for run_id in RUNS:
            turns: list[Any] = [
                nd.Turn.call("probe", f"step {i} of {run_id}", run=run_id, i=i)
                for i in range(STEPS)
            ]
            await nd.generate_text(
                model=nd.ScriptedModel([*turns, f"{run_id} is done"]),
                messages=f"Probe for {run_id}.",
                tools=_tools(),
                session=nd.DurableSession(store, run_id=run_id),
            )

    try:
        asyncio.run(go())
    finally:
        store.close()


Reads = dict[str, Any]
"""What each read returned: ``{name: value}``; a failed read maps to the exception."""


def observe(url: str) -> tuple[Reads, list[BaseException]]:
    """Every read of the store at ``url``: by name, what it returned or raised."""
    reads: Reads = {}
    errors: list[BaseException] = []

    def read(name: str, action: Callable[[], Any]) -> None:
        try:
            reads[name] = action()
        except Exception as exc:
            reads[name] = exc
            errors.append(exc)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # torn JSONL lines
        try:
            store: Any = nd.open_store(url)
        except Exception as exc:
            return {"open": exc}, [exc]
        try:
            read("list", store.list)
            read("list_runs", lambda: [r.model_dump() for r in store.list_runs()])
            for run_id in RUNS:
                read(f"{run_id} history", lambda r=run_id: store.history(r))
                read(f"{run_id} load", lambda r=run_id: store.load(r))
                for step in range(STEPS + 1):
                    read(f"{run_id} load {step}", lambda r=run_id, s=step: store.load(r, s))
                read(
                    f"{run_id} events",
                    lambda r=run_id: asyncio.run(nd.events.read_events(store, r)),
                )
        finally:
            store.close()
    return reads, errors


@dataclass
class Outcome:
    """How one damaged copy behaved."""

    failed: dict[str, BaseException] = field(default_factory=dict)
    """Reads that raised, by name."""
    differed: list[str] = field(default_factory=list)
    """Reads that returned something else than the sound store (undetected by the read)."""
    report: CheckReport | None = None
    untyped: list[BaseException] = field(default_factory=list)
    """Exceptions that are not StoreCorruptionError: each one is a bug."""

    @property
    def runs_hit(self) -> set[str]:
        """Runs with a read that failed or differed."""
        names = [*self.failed, *self.differed]
        return {name.split(" ")[0] for name in names if name.startswith("run-")}


def damage(source: Path, target: Path, change: Callable[[bytearray], bytes | bytearray]) -> None:
    """Copy ``source`` to ``target`` (or change it in place) with its bytes changed by ``change``."""
    if source != target:
        shutil.copyfile(source, target)
    data = bytearray(target.read_bytes())
    target.write_bytes(bytes(change(data)))


def flip(offset: int, length: int = 16) -> Callable[[bytearray], bytearray]:
    """Invert ``length`` bytes from ``offset``."""

    def change(data: bytearray) -> bytearray:
        for i in range(offset, min(offset + length, len(data))):
            data[i] ^= 0xFF
        return data

    return change


def judge(url: str, sound: Reads) -> Outcome:
    """Read the damaged store at ``url`` and check it; compare with the sound reads."""
    reads, errors = observe(url)
    outcome = Outcome()
    for name, value in reads.items():
        if isinstance(value, BaseException):
            outcome.failed[name] = value
        elif sound.get(name) != value:
            outcome.differed.append(name)
    outcome.untyped = [e for e in errors if not isinstance(e, nd.StoreCorruptionError)]
    outcome.report = check_store(url)
    return outcome


def problems(outcome: Outcome, path: Path) -> list[str]:
    """What is wrong with how a damaged copy behaved (empty when all is as promised)."""
    found = [f"untyped {type(e).__name__}: {e}" for e in outcome.untyped]
    for name, exc in outcome.failed.items():
        if isinstance(exc, nd.StoreCorruptionError) and str(path.name) not in str(exc):
            found.append(f"{name}: the error does not name the file: {exc}")
    report = outcome.report
    assert report is not None
    if (outcome.failed or outcome.differed) and report.clean:
        found.append(
            f"reads failed or differed ({sorted(outcome.failed)}, "
            f"{outcome.differed}) but the check found nothing"
        )
    if outcome.differed and not report.affected_runs and not report.damage:
        found.append(f"silently different reads: {outcome.differed}")
    unexplained = outcome.runs_hit - set(report.affected_runs)
    if unexplained and not any(d.run_id is None for d in report.damage):
        found.append(f"runs {sorted(unexplained)} read wrongly but the check does not name them")
    return found
