"""``nbdurable store check``: find what is damaged in a store, and which runs it affects.

The check only reads. For the SQL stores (SQLite, PostgreSQL) it verifies:

- the file itself (SQLite's ``PRAGMA integrity_check``; on PostgreSQL the
  indexes with ``amcheck`` when that extension is installed);
- every checkpoint row: its metadata decodes, its run's saves are numbered
  1..n and the run's latest one exists;
- every message chain: each node exists, is valid UTF-8, decodes as a message
  and hashes to its id (``sha256(parent id + message JSON)``), and the chain
  from a checkpoint's head holds exactly its message count; each node is
  checked once, however many checkpoints share it;
- the latest checkpoint of every run decodes whole (what ``load`` returns);
- the event log: offsets 1..n without a hole, payloads that decode;
- the runtime's run records, tool intents and model journal.

The JSONL store is checked line by line (:mod:`.check_jsonl`).
"""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from pydantic import ValidationError

from .._errors import ConfigurationError, NbdurableError, StoreCorruptionError
from ..events._model import Event
from ..messages import Message
from ._chain import decode_messages, node_id
from ._rows import COLUMNS, CheckpointRow

__all__ = ["CheckReport", "Damage", "SqlSource", "check_sql", "check_store"]

T = TypeVar("T")
_TEXT_COLUMNS = frozenset(
    {"status", "usage", "pending_approvals", "agent_path", "finish_reason", "extra"}
)


@dataclass(frozen=True)
class Damage:
    """One thing found damaged.

    Attributes:
        what: What is wrong, in words.
        run_id: The run it affects, when it affects one.
        step_index: The checkpoint's step, when it is about one.
    """

    what: str
    run_id: str | None = None
    step_index: int | None = None

    def line(self) -> str:
        """One line for a terminal."""
        where = "" if self.run_id is None else f"run {self.run_id}"
        if self.step_index is not None:
            where += f" step {self.step_index}"
        return f"{where}: {self.what}" if where else self.what


@dataclass
class CheckReport:
    """What ``nbdurable store check`` found.

    Attributes:
        store: The store checked, as a URL or a description.
        damage: Everything found damaged (empty when the store is sound).
        counts: How many of each thing were checked (runs, checkpoints, ...).
        notes: What was not checked, or is worth knowing but is not damage.
    """

    store: str
    damage: list[Damage] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        """Whether nothing was found damaged."""
        return not self.damage

    @property
    def affected_runs(self) -> list[str]:
        """The runs some damage affects, in the order found."""
        return list(dict.fromkeys(d.run_id for d in self.damage if d.run_id is not None))

    def add(self, what: str, run_id: str | None = None, step_index: int | None = None) -> None:
        """Record damage."""
        self.damage.append(Damage(what, run_id, step_index))

    def count(self, name: str, n: int = 1) -> None:
        """Count checked things."""
        self.counts[name] = self.counts.get(name, 0) + n

    def lines(self) -> list[str]:
        """The damage for a terminal: one line per run and problem, its steps as ranges."""
        steps: dict[tuple[str | None, str], list[int]] = {}
        for d in self.damage:
            steps.setdefault((d.run_id, d.what), [])
            if d.step_index is not None:
                steps[(d.run_id, d.what)].append(d.step_index)
        lines = []
        for (run_id, what), found in steps.items():
            where = "" if run_id is None else f"run {run_id}"
            if found:
                where += f" step{'s' if len(found) > 1 else ''} {_ranges(sorted(set(found)))}"
            lines.append(f"{where}: {what}" if where else what)
        return lines

    def to_json(self) -> dict[str, Any]:
        """The report as JSON-able data."""
        return {
            "store": self.store,
            "clean": self.clean,
            "counts": dict(self.counts),
            "damage": [
                {"run_id": d.run_id, "step_index": d.step_index, "what": d.what}
                for d in self.damage
            ],
            "affected_runs": self.affected_runs,
            "notes": list(self.notes),
        }


class SqlSource(Protocol):
    """Read-only access to the tables of a SQL store, as stored (text may be bytes).

    Every method may raise the driver's error for a part it cannot read; the
    check records that as damage and goes on with the rest.
    """

    def file_problems(self) -> list[str]:
        """Problems the database itself reports (an integrity check), or []."""
        ...

    def schema_version(self) -> int:
        """The store's schema version (0 when it has none)."""
        ...

    def runs(self) -> list[tuple[Any, Any]]:
        """``(run_id, last_seq)`` of every run row."""
        ...

    def checkpoints(self, run_id: str | None = None) -> Iterable[tuple[Any, ...]]:
        """``(run_id, seq, head, *COLUMNS)`` of every checkpoint row (of one run)."""
        ...

    def node(self, node: bytes) -> tuple[bytes | None, Any] | None:
        """``(parent, message)`` of a node, or None when there is none with that id."""
        ...

    def events(self, run_id: str | None = None) -> Iterable[tuple[Any, ...]]:
        """Every event (of one run), ordered by run and position.

        Rows are ``(run_id, position, type, step_index, operation_id, attempt_id,
        payload, created_at)``.
        """
        ...

    def last_event(self, run_id: str) -> int:
        """The run's highest event offset as its index finds it (0 without events)."""
        ...

    def runtime_rows(self, table: str) -> Iterable[tuple[Any, ...]]:
        """``(run_id, key, JSON)`` rows of a runtime table.

        The tables are ``rt_runs`` (key: None), ``rt_intents`` and ``rt_journal``.
        """
        ...


def check_store(url: str) -> CheckReport:
    """Check the store at ``url`` (``sqlite:///``, ``jsonl:///`` or ``postgresql://``).

    Raises:
        ConfigurationError: The URL names no store that exists, or a kind the
            check does not know (``memory://`` holds nothing to check).
    """
    scheme = url.partition("://")[0].lower()
    if scheme == "sqlite":
        from ._check_sources import check_sqlite

        return check_sqlite(url)
    if scheme == "jsonl":
        from ._check_jsonl import check_jsonl

        return check_jsonl(url)
    if scheme in ("postgresql", "postgres"):
        from ._check_sources import check_postgres

        return check_postgres(url)
    raise ConfigurationError(
        f"cannot check {url!r}: expected sqlite:///path, jsonl:///dir or postgresql://..."
    )


def check_sql(source: SqlSource, report: CheckReport) -> CheckReport:
    """Run every check of a SQL store against ``source``, adding to ``report``."""
    _SqlCheck(source, report).run()
    return report


def text(value: Any) -> str:
    """A stored text value as ``str``.

    A source may hand over, in place of a value, the error that kept it from
    being read (a packed value that does not unpack): it is raised here.

    Raises:
        ValueError: The bytes are not valid UTF-8.
        StoreCorruptionError: The source could not read the value.
    """
    if isinstance(value, StoreCorruptionError):
        raise value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8")
    return str(value)


def _decodes(value: Any) -> bool:
    try:
        text(value)
    except ValueError:
        return False
    return True


def _name(value: Any) -> str:
    try:
        return text(value)
    except ValueError:
        return repr(bytes(value))


class _SqlCheck:
    def __init__(self, source: SqlSource, report: CheckReport) -> None:
        self.source = source
        self.report = report
        # Nodes already checked: id -> its depth (messages from the root to it),
        # or the reason it is damaged.
        self.good: dict[bytes, int] = {}
        self.bad: dict[bytes, str] = {}
        self.runs: set[str] = set()  # every run id seen, in any table

    def read(self, what: str, action: Callable[[], T], run_id: str | None = None) -> T | None:
        try:
            return action()
        except Exception as exc:  # a damaged page, a table that does not decode
            self.report.add(f"cannot read {what}: {_reason(exc)}", run_id)
            return None

    def run(self) -> None:
        for problem in self.read("the file", self.source.file_problems) or []:
            self.report.add(f"integrity check: {' '.join(problem.split())}")
        version = self.read("the schema version", self.source.schema_version)
        if version is None:
            return
        if version == 0:
            self.report.add("it holds no nbdurable schema (not an nbdurable store?)")
            return
        runs = self.read("the runs table", self.source.runs) or []
        latest = {_name(run_id): last for run_id, last in runs}
        self.report.counts["runs"] = 0  # first in the report; filled in at the end
        self.checkpoints(latest)
        if version >= 2:
            self.events(latest)
        if version >= 3:
            self.runtime()
        self.report.counts["runs"] = len(self.runs | set(latest))

    def per_run(
        self,
        table: str,
        read: Callable[[str | None], Iterable[tuple[Any, ...]]],
        runs: Iterable[str],
    ) -> dict[str, list[tuple[Any, ...]]]:
        """Rows of ``table`` by run: one scan, or run by run when a damaged page stops it."""
        by_run: dict[str, list[tuple[Any, ...]]] = {}
        try:
            for row in read(None):
                by_run.setdefault(_name(row[0]), []).append(row)
            self.runs.update(by_run)
            return by_run
        except Exception as exc:
            self.report.add(f"the {table} table is damaged: {_reason(exc)}")
        for run_id in dict.fromkeys([*runs, *by_run]):
            try:
                by_run[run_id] = list(read(run_id))
            except Exception as exc:
                by_run.pop(run_id, None)
                self.report.add(f"cannot read its {table}: {_reason(exc)}", run_id)
        return by_run

    # -- checkpoints and their message chains ------------------------------------------

    def checkpoints(self, latest: dict[str, Any]) -> None:
        by_run = self.per_run("checkpoints", self.source.checkpoints, latest)
        for run_id in dict.fromkeys([*latest, *by_run]):
            if run_id in by_run or not self.unreadable(run_id, "checkpoints"):
                try:
                    self.run_checkpoints(run_id, latest.get(run_id), by_run.get(run_id, []))
                except Exception as exc:  # a value of the wrong type in a damaged row
                    self.report.add(f"its checkpoint rows do not decode ({_reason(exc)})", run_id)

    def unreadable(self, run_id: str, table: str) -> bool:
        prefix = f"cannot read its {table}"
        return any(d.run_id == run_id and d.what.startswith(prefix) for d in self.report.damage)

    def run_checkpoints(self, run_id: str, last_seq: Any, rows: list[tuple[Any, ...]]) -> None:
        if last_seq is None:
            self.report.add("checkpoints without a row in the runs table", run_id)
        rows.sort(key=lambda r: int(r[1]))
        seqs = [int(r[1]) for r in rows]
        if seqs != list(range(1, len(seqs) + 1)):
            self.report.add(f"saves {_missing(seqs, max(seqs, default=0))} are missing", run_id)
        if last_seq is not None and int(last_seq) not in seqs:
            self.report.add(
                f"its latest checkpoint (save {last_seq}) is missing: loading it fails", run_id
            )
        final: tuple[CheckpointRow, Any] | None = None
        for seq, head, *values in (r[1:] for r in rows):
            self.report.count("checkpoints")
            row = self.checkpoint(run_id, int(seq), head, values)
            if row is not None and last_seq is not None and int(seq) == int(last_seq):
                final = (row, head)
        if final is not None:
            self.latest(*final)

    def checkpoint(
        self, run_id: str, seq: int, head: Any, values: list[Any]
    ) -> CheckpointRow | None:
        try:
            decoded = [
                text(v) if n in _TEXT_COLUMNS and v is not None else v
                for n, v in zip(COLUMNS, values, strict=True)
            ]
            row = CheckpointRow.from_values(run_id, decoded)
            row.info()
        except (NbdurableError, ValueError, TypeError) as exc:
            step = values[COLUMNS.index("step_index")]
            self.report.add(
                f"save {seq}: its metadata does not decode ({_reason(exc)})",
                run_id,
                step if isinstance(step, int) else None,
            )
            return None
        problem = self.chain(None if head is None else bytes(head), row.message_count)
        if problem is not None:
            self.report.add(problem, run_id, row.step_index)
            return None
        return row

    def chain(self, head: bytes | None, count: int) -> str | None:
        """Why the chain from ``head`` is not ``count`` sound messages, or None."""
        if head is None:
            return None if count == 0 else f"it names no message but counts {count}"
        path: list[bytes] = []
        node: bytes | None = head
        problem: str | None = None
        while node is not None and node not in self.good and node not in self.bad:
            if len(path) > count:
                return f"its message chain is longer than its {count} messages (a cycle?)"
            problem, parent = self.node(node)
            path.append(node)
            if problem is not None:
                break
            node = parent
        if problem is None and node is not None and node in self.bad:
            problem = self.bad[node]
        if problem is not None:
            for nid in path:
                self.bad.setdefault(nid, problem)
            return self.bad[head]
        depth = 0 if node is None else self.good[node]
        for nid in reversed(path):
            depth += 1
            self.good[nid] = depth
        if self.good[head] != count:
            return f"its message chain holds {self.good[head]} messages, not {count}"
        return None

    def node(self, nid: bytes) -> tuple[str | None, bytes | None]:
        """Why a node is damaged (or None), and its parent's id."""
        self.report.count("message nodes")
        name = f"message node {nid.hex()[:12]}"
        try:
            found = self.source.node(nid)
        except Exception as exc:
            return f"{name} cannot be read ({_reason(exc)})", None
        if found is None:
            return f"{name} is missing", None
        parent = None if found[0] is None else bytes(found[0])
        try:
            message = text(found[1])
        except StoreCorruptionError as exc:
            return f"{name} does not unpack ({exc})", None
        except ValueError:
            return f"{name} is not valid UTF-8", None
        if node_id(parent, message) != nid:
            return f"{name} does not match its content hash", None
        try:
            Message.model_validate_json(message)
        except ValidationError as exc:
            return f"{name} does not decode ({_reason(exc)})", None
        return None, parent

    def latest(self, row: CheckpointRow, head: Any) -> None:
        texts: list[str] = []
        node = None if head is None else bytes(head)
        while node is not None:
            found = self.source.node(node)
            assert found is not None  # the chain was checked
            texts.append(text(found[1]))
            node = None if found[0] is None else bytes(found[0])
        texts.reverse()
        try:
            row.checkpoint(decode_messages(texts, run_id=row.run_id, step_index=row.step_index))
        except NbdurableError as exc:
            what = f"its latest checkpoint does not load: {exc}"
            self.report.add(what, row.run_id, row.step_index)

    # -- the event log -----------------------------------------------------------------

    def events(self, runs: Iterable[str]) -> None:
        by_run = self.per_run("events", self.source.events, runs)
        for run_id, rows in by_run.items():
            if rows and not _decodes(rows[0][0]):
                # The key itself is damaged: these events belong to a run no one can tell.
                self.report.add(
                    f"{len(rows)} event(s) are stored under a damaged run id {run_id}: some "
                    "run's log lacks them"
                )
                continue
            if rows:
                try:
                    self.run_events(run_id, rows)
                except Exception as exc:  # a value of the wrong type in a damaged row
                    self.report.add(f"its event rows do not decode ({_reason(exc)})", run_id)

    def run_events(self, run_id: str, rows: list[tuple[Any, ...]]) -> None:
        self.report.count("events", len(rows))
        positions = [int(r[1]) for r in rows]
        # A damaged page can end a read early without an error: the index's
        # last offset tells whether the tail is there.
        last = self.read("its last event offset", lambda: self.source.last_event(run_id), run_id)
        expected = max(positions[-1], last or 0)
        if positions != list(range(1, expected + 1)):
            missing = _missing(positions, expected)
            self.report.add(f"events {missing} are missing or unreadable", run_id)
        for _, position, type_, step, operation, attempt, payload, created in rows:
            try:
                data = json.loads(text(payload))
                Event(
                    run_id=run_id,
                    offset=int(position),
                    type=text(type_),
                    step_index=step,
                    operation_id=None if operation is None else text(operation),
                    attempt_id=None if attempt is None else text(attempt),
                    payload=data,
                    created_at=created,
                )
            except (ValueError, TypeError, StoreCorruptionError) as exc:
                self.report.add(f"event {position} does not decode ({_reason(exc)})", run_id)

    # -- the runtime's records ---------------------------------------------------------

    def rows(self, table: str) -> list[tuple[Any, ...]]:
        return list(self.source.runtime_rows(table))

    def runtime(self) -> None:
        from ..durable._stored import validate_stored
        from ..models._base import ModelResponse
        from ..runs import RuntimeRun, ToolIntent

        models: dict[str, Callable[[str], Any]] = {
            "rt_runs": functools.partial(validate_stored, RuntimeRun),
            "rt_intents": functools.partial(validate_stored, ToolIntent),
            "rt_journal": ModelResponse.model_validate_json,
        }
        labels = {
            "rt_runs": "run record",
            "rt_intents": "tool intent",
            "rt_journal": "model response",
        }
        for table, validate in models.items():
            rows = self.read(f"the {table} table", functools.partial(self.rows, table))
            for run_key, key, raw in rows or []:
                self.report.count(f"{labels[table]}s")
                self.runs.add(_name(run_key))
                try:
                    validate(text(raw))
                except Exception as exc:
                    which = "" if key is None else f" {_name(key)}"
                    self.report.add(
                        f"its {labels[table]}{which} does not decode ({_reason(exc)})",
                        _name(run_key),
                    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ValidationError):
        errors = exc.errors()
        first = errors[0]["msg"] if errors else str(exc)
        return f"{exc.error_count()} error(s), first: {first}"
    if isinstance(exc, UnicodeDecodeError):
        return "not valid UTF-8"
    return " ".join(str(exc).split()) or type(exc).__name__


def _missing(found: list[int], top: int) -> str:
    """The numbers of 1..``top`` not in ``found``, as ranges.

    A damaged number can be huge: past a million more than were found, the
    range is only named, never built.
    """
    if top > len(found) + 1_000_000:
        return f"up to {top} (a damaged number: {len(found)} were found)"
    return _ranges(sorted(set(range(1, top + 1)) - set(found)))


def _ranges(numbers: list[int]) -> str:
    parts: list[str] = []
    for _, group in itertools.groupby(enumerate(numbers), key=lambda p: p[1] - p[0]):
        items = [n for _, n in group]
        parts.append(str(items[0]) if len(items) == 1 else f"{items[0]}-{items[-1]}")
    return ", ".join(parts) if parts else "?"


def iter_batches(cursor: Any, size: int = 1000) -> Iterator[tuple[Any, ...]]:
    """Rows of a DB-API cursor, fetched ``size`` at a time."""
    while True:
        rows = cursor.fetchmany(size)
        if not rows:
            return
        yield from rows
