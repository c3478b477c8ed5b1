"""The simple, greppable store: one append-only JSONL file per run.

Each save appends one line holding only the messages new since the previous
line (see :mod:`._format`), so the files grow linearly with the run. Meant
for one process: the store caches each run's latest checkpoint and file size,
and notices another writer only when a file's size changes under it.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from ..._errors import RunNotFoundError, StoreCorruptionError, StoreWriteError
from ...durable._checkpoint import AgentCheckpoint, CheckpointInfo
from ...durable._records import RunRecord
from ...durable._stored import validate_stored
from ...durable.store import Capability, EventLog, HistoryStore, refuse_fence
from ...events._model import Event, NewEvent, numbered
from ...messages import Message
from ._format import Line, RunFile, check_format, extends, run_file_name

__all__ = ["JsonlSessionStore"]

_PARSED_FILES = 8
"""How many parsed run files a store keeps in memory."""


@dataclass(frozen=True)
class _Tail:
    """What a save needs to know about a run file: its end, last checkpoint and last offset."""

    latest: AgentCheckpoint | None
    valid_size: int
    size: int
    last_offset: int = 0


class JsonlSessionStore(HistoryStore, EventLog):
    """Checkpoints as JSON lines, one file per run, in ``directory``.

    A line written by an interrupted save (a crash, a SIGKILL) is ignored with
    a ``RuntimeWarning`` and cut off by the run's next save; every line before
    it stays readable. One process at a time; threads are fine.

    Args:
        directory: Where the run files live (created when missing).
        fsync: Flush every save to the disk, so it survives a power loss too
            (a process crash never loses a completed save either way).

    Raises:
        CheckpointVersionError: The directory was written by a newer nbdurable.
    """

    capabilities: ClassVar[frozenset[Capability]] = frozenset(
        {
            Capability.HISTORY,
            Capability.PERSISTENT,
            Capability.INCREMENTAL,
            Capability.VERSIONED_SCHEMA,
            Capability.EVENTS,
        }
    )

    def __init__(self, directory: str | os.PathLike[str], *, fsync: bool = False) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        check_format(self.directory)
        self._fsync = fsync
        self._lock = threading.RLock()
        self._tails: dict[str, _Tail] = {}
        self._files: OrderedDict[Path, tuple[tuple[int, int], RunFile]] = OrderedDict()
        self._last_written_at = 0

    @property
    def location(self) -> Path:
        """The store's directory."""
        return self.directory

    def path_for(self, run_id: str) -> Path:
        """The file that holds a run's checkpoints."""
        return self.directory / run_file_name(run_id)

    @property
    def event_channel(self) -> str:
        """Identifies this directory's event logs for in-process subscribers."""
        return os.path.realpath(self.directory)

    def save(self, checkpoint: AgentCheckpoint) -> None:
        """Append one line: the messages new since the previous line, or all of them."""
        self._save(checkpoint, ())

    def save_with_events(
        self, checkpoint: AgentCheckpoint, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> builtins.list[Event]:
        """Append the checkpoint's line with the events in it: one write, both or neither.

        Raises:
            ConfigurationError: A ``fence`` (this store keeps no run records).
        """
        refuse_fence(fence)
        return self._save(checkpoint, events)

    def append_events(
        self, run_id: str, events: Sequence[NewEvent], *, fence: int | None = None
    ) -> builtins.list[Event]:
        """Append one event-only line; offsets continue from the run's last event.

        Raises:
            ConfigurationError: A ``fence`` (this store keeps no run records).
        """
        refuse_fence(fence)
        if not events:
            return []
        with self._lock:
            tail = self._tail(run_id)
            added = list(numbered(run_id, events, tail.last_offset))
            line = {
                "run_id": run_id,
                "events": [e.model_dump(mode="json", exclude={"run_id"}) for e in added],
                "written_at": self._written_at(),
            }
            data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
            self._tails.pop(run_id, None)
            self._append(self.path_for(run_id), data, tail)
            end = tail.valid_size + len(data)
            self._tails[run_id] = _Tail(tail.latest, end, end, added[-1].offset)
            return added

    def read_events(
        self, run_id: str, after: int = 0, limit: int | None = None
    ) -> builtins.list[Event]:
        """Events with offset > ``after``, in order.

        Raises:
            RunNotFoundError: The run has no file.
            StoreCorruptionError: An event does not decode.
        """
        with self._lock:
            run = self._read(self.path_for(run_id))
        if run is None:
            raise RunNotFoundError(run_id)
        selected = [e for e in run.events if int(e.get("offset", 0)) > after]
        if limit is not None:
            selected = selected[:limit]
        try:
            return [validate_stored(Event, {**e, "run_id": run_id}) for e in selected]
        except ValueError as exc:
            raise StoreCorruptionError(
                f"an event of run {run_id!r} is damaged: {exc}", run_id=run_id
            ) from exc

    def _save(
        self, checkpoint: AgentCheckpoint, events: Sequence[NewEvent]
    ) -> builtins.list[Event]:
        run_id = checkpoint.run_id
        with self._lock:
            tail = self._tail(run_id)
            added = list(numbered(run_id, events, tail.last_offset))
            previous = tail.latest.messages if tail.latest is not None else None
            new: Sequence[Message]
            if previous is not None and extends(previous, checkpoint.messages):
                new, full = checkpoint.messages[len(previous) :], False
            else:
                new, full = checkpoint.messages, True
            fields = {name: getattr(checkpoint, name) for name in AgentCheckpoint.model_fields}
            fields["messages"] = new
            line = Line.model_validate(
                {
                    **fields,
                    "message_count": len(checkpoint.messages),
                    "full": full,
                    "written_at": self._written_at(),
                    "events": [e.model_dump(mode="json", exclude={"run_id"}) for e in added]
                    if added
                    else None,
                }
            )
            data = (line.model_dump_json(exclude_none=not added) + "\n").encode()
            self._tails.pop(run_id, None)  # until the write is known to be complete
            self._append(self.path_for(run_id), data, tail)
            end = tail.valid_size + len(data)
            last = added[-1].offset if added else tail.last_offset
            self._tails[run_id] = _Tail(checkpoint, end, end, last)
            return added

    def load(self, run_id: str, step_index: int | None = None) -> AgentCheckpoint | None:
        """Return the latest checkpoint, or the latest one saved at ``step_index``.

        Raises:
            StoreCorruptionError: A line needed for it is damaged (names the run and step).
            CheckpointVersionError: A line has a newer checkpoint version.
        """
        with self._lock:
            path = self.path_for(run_id)
            cached = self._tails.get(run_id) if step_index is None else None
            if cached is not None and cached.latest is not None and _size(path) == cached.size:
                return cached.latest
            run = self._read(path)
            if run is None:
                return None
            index = run.find(step_index)
            if index is None:
                return None
            checkpoint = run.checkpoint(index)
            if index == len(run.entries) - 1:
                self._tails[run_id] = _Tail(checkpoint, run.valid_size, run.size, _last_offset(run))
            return checkpoint

    def history(self, run_id: str) -> builtins.list[CheckpointInfo]:
        """Metadata of every checkpoint of a run in save order; decodes no message."""
        with self._lock:
            run = self._read(self.path_for(run_id))
        return [] if run is None else [run.info(entry) for entry in run.entries]

    def list(self) -> builtins.list[str]:
        """Run ids, oldest run first (by the write time of each file's first line)."""
        return [run.run_id for run in self._runs()]

    def list_runs(self) -> builtins.list[RunRecord]:
        """One record per run, oldest run first."""
        records = []
        for run in self._runs():
            first, latest = run.info(run.entries[0]), run.info(run.entries[-1])
            records.append(RunRecord.from_infos(first, latest, len(run.entries)))
        return records

    def delete(self, run_id: str) -> None:
        """Delete a run's file; unknown run ids are a no-op."""
        with self._lock:
            self._tails.pop(run_id, None)
            self._files.pop(self.path_for(run_id), None)
            self.path_for(run_id).unlink(missing_ok=True)

    def close(self) -> None:
        """Forget cached state; files are opened per operation, so nothing else is held."""
        with self._lock:
            self._tails.clear()
            self._files.clear()

    def __enter__(self) -> JsonlSessionStore:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"JsonlSessionStore({str(self.directory)!r})"

    def _tail(self, run_id: str) -> _Tail:
        path = self.path_for(run_id)
        cached = self._tails.get(run_id)
        if cached is not None and _size(path) == cached.size:
            return cached
        run = self._read(path)
        if run is None:
            return _Tail(None, 0, 0)
        if not run.entries:  # events only, so far (the run's first step is under way)
            return _Tail(None, run.valid_size, run.size, _last_offset(run))
        latest = run.checkpoint(len(run.entries) - 1)
        tail = _Tail(latest, run.valid_size, run.size, _last_offset(run))
        self._tails[run_id] = tail
        return tail

    def _read(self, path: Path) -> RunFile | None:
        # Parsed files are kept while their size and mtime stay the same, so
        # reading many steps of one run parses its file once.
        try:
            stat = path.stat()
        except FileNotFoundError:
            self._files.pop(path, None)
            return None
        key = (stat.st_size, stat.st_mtime_ns)
        cached = self._files.get(path)
        if cached is not None and cached[0] == key:
            self._files.move_to_end(path)
            return cached[1]
        run = RunFile.read(path)
        if run is not None:
            self._files[path] = (key, run)
            while len(self._files) > _PARSED_FILES:
                self._files.popitem(last=False)
        return run

    def _append(self, path: Path, data: bytes, tail: _Tail) -> None:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                if tail.size > tail.valid_size:
                    # Cut the torn line an interrupted save left, so this line starts clean.
                    os.ftruncate(fd, tail.valid_size)
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
                if self._fsync:
                    os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            # A part of the line may be on disk: it reads as a torn last line,
            # which the next save cuts off; every line before it is intact.
            raise _write_error(exc, path) from exc

    def _runs(self) -> builtins.list[RunFile]:
        with self._lock:
            runs = []
            for entry in os.scandir(self.directory):
                if entry.name.endswith(".jsonl") and entry.is_file():
                    run = self._read(Path(entry.path))
                    if run is not None and run.entries:
                        runs.append(run)
        runs.sort(key=lambda run: (int(run.entries[0].meta.get("written_at", 0)), run.path.name))
        return runs

    def _written_at(self) -> int:
        # Strictly increasing within the process, so runs created back to back keep their order.
        self._last_written_at = max(time.time_ns(), self._last_written_at + 1)
        return self._last_written_at


def _last_offset(run: RunFile) -> int:
    return int(run.events[-1].get("offset", 0)) if run.events else 0


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})
_READONLY = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def _write_error(exc: OSError, path: Path) -> StoreWriteError:
    if exc.errno in _FULL:
        reason, what = "full", "the disk is full"
    elif exc.errno in _READONLY:
        reason, what = "readonly", "it is read-only"
    else:
        reason, what = "io", "an I/O error"
    return StoreWriteError(
        f"cannot write to the JSONL store file {path}: {what} ({exc.strerror or exc}). "
        "Nothing of this save was stored and earlier checkpoints are intact.",
        path=str(path),
        reason=reason,
    )
