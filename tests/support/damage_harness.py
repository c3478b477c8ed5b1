"""Damaged SQLite store files, page by page: build a store, damage copies, read them back.

Shared by ``benchmarks/damage_sweep.py`` (1,000+ variants) and
``tests/stores/test_damage_sweep.py`` (a few dozen). The store holds 12 runs
touching every table: loop runs (message nodes, checkpoints, event batches) and
runtime records (runs, intents, journal, verdicts, a graph). Each variant damages
the pages of one table or index (found with SQLite's ``dbstat``): a byte
changed, a bit flipped, a page zeroed, two pages swapped, the file truncated.

Every read the library offers is then compared with the sound file's. A variant
is ``identical`` (every read as before), ``refused`` (some reads raise
:class:`nbdurable.StoreCorruptionError`, the others read as before), ``silent``
(a read returned something else without an error) or ``untyped`` (an exception
that is not ours). ``nbdurable store check`` should then say damaged exactly when
the library refused: ``agrees``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import shutil
import sqlite3
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbdurable as nd
from nbdurable.events._model import NewEvent
from nbdurable.messages import TextPart, ToolApprovalResponse
from nbdurable.models._base import ModelResponse
from nbdurable.runs import RunPatch, RuntimeRun, ToolIntent, Verdict
from nbdurable.stores._check import check_store
from nbdurable.stores._history_columns import history_columns

LOOP_RUNS = tuple(f"loop-{i}" for i in range(6))
RT_RUNS = tuple(f"rt-{i}" for i in range(3))
GRAPH_RUNS = ("g:left", "g:right", "g:join")
RUNS = (*LOOP_RUNS, *RT_RUNS, *GRAPH_RUNS)
STEPS = 6
INTENTS = 6
NOW = 1_800_000_000_000
KINDS = ("byte", "bit", "zero", "swap", "truncate")
INDEX_FILTERED = ("rt_session", "rt_list unfinished", "rt_graph g")
"""Reads that pick runtime records through a secondary index of rt_runs (by
session, state or graph): counted again through a second index or the graph's
head, so a damaged entry is an error too; the sweep counts them apart because
they were the last to be covered."""


def _tools() -> list[nd.Tool]:
    @nd.tool
    def manual_tool(run: str, i: int) -> str:
        """Probe a value."""
        return f"result {i} of {run}: " + "abcdefghij" * (3 + i)

    return [manual_tool]


def _record(run_id: str, **fields: Any) -> RuntimeRun:
    values: dict[str, Any] = {
        "run_id": run_id,
        "agent_id": "a",
        "agent_version": "1",
        "session_id": f"s-{run_id}",
        "prompt": f'"prompt of {run_id}"',
        "state": "pending",
        "created_at": NOW,
        "updated_at": NOW,
    }
    return RuntimeRun(**{**values, **fields})


def _response(text: str) -> str:
    return ModelResponse(content=[TextPart(text=text)]).model_dump_json()


def build(path: Path) -> None:
    """The 12-run store at ``path``, its write-ahead log folded into the file."""
    store: Any = nd.open_store(f"sqlite:///{path}")

    async def loops() -> None:
        for n, run_id in enumerate(LOOP_RUNS):
            steps = 2 + n % (STEPS - 1)
            turns: list[Any] = [
                nd.Turn.call("manual_tool", f"step {i} of {run_id}", run=run_id, i=i)
                for i in range(steps)
            ]
            await nd.generate_text(
                model=nd.ScriptedModel([*turns, f"{run_id} is done"]),
                messages=f"Probe for {run_id}.",
                tools=_tools(),
                session=nd.DurableSession(store, run_id=run_id),
            )

    try:
        asyncio.run(loops())
        for run_id in RT_RUNS:
            store.rt_insert(_record(run_id), enqueue=False, max_pending=100)
            claimed = store.rt_claim("me", NOW, 60_000, {("a", "1"): None})
            assert claimed is not None and claimed.run_id == run_id
            for step in range(3):
                intents = [
                    ToolIntent(
                        run_id=run_id,
                        tool_call_id=f"call-{step}-{i}",
                        tool_name="manual_tool",
                        step_index=step,
                        state="completed",
                        result={"content": f"done {i} of {run_id}"},
                    )
                    for i in range(INTENTS // 3)
                ]
                events = [
                    NewEvent(
                        type="tool_call",
                        step_index=step,
                        payload={"n": step, "run": run_id},
                        created_at=NOW + step,
                    )
                ]
                store.rt_commit(
                    run_id,
                    fence=claimed.fence,
                    events=events,
                    journal=(step, _response(f"response {step} of {run_id}")),
                    intents=intents,
                )
            store.rt_update(run_id, RunPatch(state="waiting_approval"))
        for run_id in RT_RUNS:
            response = {"approval_id": "ap1", "approved": True, "reason": None, "token": "t.o.k"}
            store.rt_verdict(
                run_id,
                Verdict(ToolApprovalResponse.model_validate(response), ("ap1",)),
                now=NOW + 5,
            )
        store.rt_insert_many(
            [
                _record(GRAPH_RUNS[0], graph_id="g", node_id="left", session_id="s-g"),
                _record(GRAPH_RUNS[1], graph_id="g", node_id="right", session_id="s-g2"),
                _record(
                    GRAPH_RUNS[2],
                    graph_id="g",
                    node_id="join",
                    state="queued",
                    depends_on=list(GRAPH_RUNS[:2]),
                    session_id="s-g3",
                ),
            ],
            max_pending=100,
        )
    finally:
        store.close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    report = check_store(f"sqlite:///{path}")
    assert report.clean, report.lines()  # the sound file checks clean


Reads = dict[str, Any]
"""What each read returned, by name; a failed read maps to its exception."""


def _dump(value: Any) -> Any:
    if isinstance(value, list):
        return [_dump(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump()
    return value


def _columns(store: Any, run_id: str) -> dict[str, Any]:
    """What ``nd.inspect.history`` reads: the run's checkpoint metadata as columns."""
    found = history_columns(store, run_id)
    return {f.name: getattr(found, f.name) for f in dataclasses.fields(found)}


def observe(path: Path) -> Reads:
    """Every read of the store API on the file at ``path``, by name."""
    reads: Reads = {}

    def read(name: str, action: Callable[[], Any]) -> None:
        try:
            reads[name] = _dump(action())
        except Exception as exc:
            reads[name] = exc

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            store: Any = nd.open_store(f"sqlite:///{path}")
        except Exception as exc:
            return {"open": exc}
        try:
            read("list", store.list)
            read("list_runs", store.list_runs)
            read("rt_list", store.rt_list)
            read("rt_list unfinished", lambda: store.rt_list(["pending", "queued"]))
            read("rt_graph g", lambda: store.rt_graph("g"))
            for run_id in RUNS:
                read(f"{run_id} history", lambda r=run_id: store.history(r))
                read(f"{run_id} history columns", lambda r=run_id: _columns(store, r))
                read(f"{run_id} load", lambda r=run_id: store.load(r))
                for step in range(STEPS + 1):
                    read(f"{run_id} load {step}", lambda r=run_id, s=step: store.load(r, s))
                read(
                    f"{run_id} events",
                    lambda r=run_id: asyncio.run(nd.events.read_events(store, r)),
                )
                read(f"{run_id} rt_get", lambda r=run_id: store.rt_get(r))
                read(f"{run_id} rt_intents", lambda r=run_id: store.rt_intents(r))
                read(
                    f"{run_id} rt_session",
                    lambda r=run_id: store.rt_session(f"s-{r}", ["pending", "queued", "running"]),
                )
                for step in range(3):
                    read(
                        f"{run_id} rt_journaled {step}",
                        lambda r=run_id, s=step: store.rt_journaled(r, s),
                    )
        finally:
            store.close()
    return reads


@dataclass
class Outcome:
    """How one damaged variant behaved."""

    variant: str
    refused: dict[str, BaseException] = field(default_factory=dict)
    differed: list[str] = field(default_factory=list)
    untyped: dict[str, BaseException] = field(default_factory=dict)
    check_clean: bool = True
    check_runs: list[str] = field(default_factory=list)
    check_file_level: bool = False
    """The check reports damage to the file that it does not tie to a run."""
    check_error: BaseException | None = None

    @property
    def verdict(self) -> str:
        """``untyped``, ``silent``, ``refused`` or ``identical``."""
        if self.untyped:
            return "untyped"
        if self.differed:
            return "silent"
        return "refused" if self.refused else "identical"

    @property
    def silent_elsewhere(self) -> list[str]:
        """Reads that differed without an error, but for the :data:`INDEX_FILTERED` ones."""
        return [n for n in self.differed if not any(k in n for k in INDEX_FILTERED)]

    @property
    def agrees(self) -> bool:
        """Whether the check reports damage whenever the library refused (or misread) a read.

        The check may find more: damage where no read of the library goes (free
        space, an index no read uses) is reported by the check alone; see
        :attr:`check_only`.
        """
        if self.check_error is not None:
            return False
        return self.verdict == "identical" or not self.check_clean

    @property
    def check_only(self) -> bool:
        """Every read as before, and the check reports damage (where no read goes)."""
        return self.verdict == "identical" and not self.check_clean

    @property
    def runs_named(self) -> bool:
        """Whether the check names every run the library refused naming it.

        Or reports damage to the file as a whole (a damaged page of an index
        that every lookup walks fails the reads of runs it holds nothing of).
        """
        named = {getattr(e, "run_id", None) for e in self.refused.values()}
        return self.check_file_level or {r for r in named if r is not None} <= set(self.check_runs)


def judge(path: Path, sound: Reads, variant: str) -> Outcome:
    """Read the damaged file at ``path`` and check it; compare with the sound reads."""
    outcome = Outcome(variant)
    for name, value in observe(path).items():
        if isinstance(value, nd.StoreCorruptionError | nd.CheckpointVersionError):
            outcome.refused[name] = value
        elif isinstance(value, BaseException):
            outcome.untyped[name] = value
        elif sound.get(name) != value:
            outcome.differed.append(name)
    try:
        report = check_store(f"sqlite:///{path}")
    except Exception as exc:
        outcome.check_error = exc
    else:
        outcome.check_clean = report.clean
        outcome.check_runs = report.affected_runs
        outcome.check_file_level = any(d.run_id is None for d in report.damage)
    return outcome


def page_map(path: Path) -> tuple[int, dict[str, list[int]]]:
    """The page size and the pages of each table and index (``dbstat``)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        pages: dict[str, list[int]] = {}
        for name, pageno in conn.execute("SELECT name, pageno FROM dbstat ORDER BY pageno"):
            pages.setdefault(name, []).append(pageno)
    finally:
        conn.close()
    return page_size, pages


@dataclass(frozen=True)
class Variant:
    """One damage: its kind, the table or index whose page it hits, where."""

    kind: str
    target: str
    page: int
    offset: int
    other: int = 0

    def name(self) -> str:
        """A short label."""
        return f"{self.kind} {self.target} p{self.page}+{self.offset}" + (
            f" <-> p{self.other}" if self.kind == "swap" else ""
        )

    def apply(self, data: bytearray, page_size: int, rng: random.Random) -> bytes:
        """The damaged bytes."""
        start = (self.page - 1) * page_size
        at = start + self.offset
        if self.kind == "byte":
            data[at] = (data[at] + rng.randrange(1, 256)) % 256
        elif self.kind == "bit":
            data[at] ^= 1 << rng.randrange(8)
        elif self.kind == "zero":
            data[start : start + page_size] = bytes(page_size)
        elif self.kind == "swap":
            other = (self.other - 1) * page_size
            mine = bytes(data[start : start + page_size])
            data[start : start + page_size] = data[other : other + page_size]
            data[other : other + page_size] = mine
        else:  # truncate: inside the page or at its start
            return bytes(data[:at])
        return bytes(data)


def variants(path: Path, count: int, seed: int = 34) -> list[Variant]:
    """``count`` damages spread over every table and index, each kind in turn."""
    page_size, pages = page_map(path)
    every = [p for ps in pages.values() for p in ps]
    rng = random.Random(seed)
    targets = sorted(pages)
    found: list[Variant] = []
    for n in range(count):
        target = targets[n % len(targets)]
        kind = KINDS[n % len(KINDS)]  # (the counts of kinds and targets share no factor)
        page = rng.choice(pages[target])
        # Offsets mostly where rows live (the end of a page), some in the header.
        offset = (
            rng.randrange(page_size)
            if rng.random() < 0.3
            else page_size - 1 - int(rng.expovariate(1 / 400) % page_size)
        )
        if kind == "truncate":
            offset = rng.choice([0, offset])
            if page == 1 and offset < 512:
                # A file cut to fewer than 512 bytes is an empty database to
                # SQLite (a new store): cut it after its header instead.
                offset = 512 + offset
        other = rng.choice([p for p in every if p != page] or [page])
        found.append(Variant(kind, target, page, offset, other))
    return found


def run_variant(
    base: Path, work: Path, variant: Variant, sound: Reads, seed: int, page_size: int
) -> Outcome:
    """Damage a copy of ``base`` at ``work`` and judge it."""
    for leftover in work.parent.glob(work.name + "*"):
        leftover.unlink()
    shutil.copyfile(base, work)
    rng = random.Random(seed)
    work.write_bytes(variant.apply(bytearray(work.read_bytes()), page_size, rng))
    return judge(work, sound, variant.name())
