"""The JSONL store's on-disk format: file names, the line model, reading a run file.

A directory holds ``nbdurable-jsonl.json`` (the format version) and one
``<encoded run id>.jsonl`` file per run. Each line is one checkpoint: the
checkpoint's JSON, except that ``messages`` holds only the messages new since
the previous line, plus::

    "message_count": total messages of this checkpoint
    "full": true when "messages" is the whole history (the first line, and any
            save whose history does not extend the previous line's: a fork or
            an edit)
    "written_at": wall clock of the write, epoch nanoseconds
    "events": (optional) the run's events committed with this checkpoint

Format 2 adds the event log to the same file, so a checkpoint and its events
are one write: event-only lines ``{"run_id": ..., "events": [...], "written_at": ...}``
hold events appended between checkpoints; each event carries its ``offset``.
A format-1 directory is upgraded on open (its files are valid format 2).

A newer format is refused unless the marker's optional ``readable_by`` says an
nbdurable of this format still reads it (docs/stores.md, "Rolling upgrades").
"""

from __future__ import annotations

import hashlib
import json
import string
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ..._errors import CheckpointVersionError, StoreCorruptionError
from ..._version import __version__
from ...durable._checkpoint import CHECKPOINT_VERSION, AgentCheckpoint, CheckpointInfo
from ...durable._stored import validate_stored
from ...history import History
from ...messages import Message

__all__ = [
    "FORMAT_FILE",
    "FORMAT_VERSION",
    "Entry",
    "Line",
    "RunFile",
    "check_format",
    "extends",
    "run_file_name",
]

FORMAT_FILE = "nbdurable-jsonl.json"
FORMAT_VERSION = 2
"""Version of the directory layout and line format; a newer one is refused."""

# Only lower-case letters stay as they are: on a case-insensitive file system
# "Run" and "run" would otherwise share a file. Escapes use upper-case hex, so
# encoded names differ even when compared without case.
_SAFE = frozenset(string.ascii_lowercase + string.digits + "-_.")
_MAX_NAME = 200


def run_file_name(run_id: str) -> str:
    """The file name of a run: its id percent-encoded (``::`` and ``#`` included).

    Very long ids are cut and suffixed with a hash of the whole id; the id
    itself is read back from the file's lines, never from its name.
    """
    encoded = "".join(
        ch if ch in _SAFE and not (i == 0 and ch == ".") else _escape(ch)
        for i, ch in enumerate(run_id)
    )
    if not encoded or len(encoded) > _MAX_NAME:
        # "~" is always escaped above, so a hashed name never equals a plain one.
        encoded = encoded[:150] + "~" + hashlib.sha256(run_id.encode()).hexdigest()[:32]
    return encoded + ".jsonl"


def _escape(ch: str) -> str:
    return "".join(f"%{byte:02X}" for byte in ch.encode())


def check_format(directory: Path) -> None:
    """Create the directory's format marker, or refuse a newer format.

    Raises:
        CheckpointVersionError: The directory was written by a newer nbdurable.
        StoreCorruptionError: The marker is not ours.
    """
    marker = directory / FORMAT_FILE
    try:
        raw: Any = json.loads(marker.read_text())
    except FileNotFoundError:
        _write_marker(marker)
        return
    except ValueError as exc:
        raise StoreCorruptionError(f"{marker} is not valid JSON: {exc}") from exc
    version = raw.get("version") if isinstance(raw, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        raise StoreCorruptionError(f"{marker} has no format version")
    readable_by = raw.get("readable_by", version)
    if version > FORMAT_VERSION and not (
        isinstance(readable_by, int)
        and not isinstance(readable_by, bool)
        and readable_by <= FORMAT_VERSION
    ):
        raise CheckpointVersionError(
            version,
            FORMAT_VERSION,
            message=(
                f"The JSONL store {str(directory)!r} has format version {version}: a newer "
                f"nbdurable wrote it, and this nbdurable ({__version__}) reads format versions "
                f"up to {FORMAT_VERSION}; upgrade nbdurable to a release that reads format "
                f"version {version} to open it (docs/stores.md, 'Rolling upgrades')."
            ),
        )
    if version < FORMAT_VERSION:
        _write_marker(marker)  # older files are valid as they are; new lines need the new reader


def _write_marker(marker: Path) -> None:
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"format": "nbdurable-jsonl", "version": FORMAT_VERSION}) + "\n")
    tmp.replace(marker)


class Line(AgentCheckpoint):
    """One line of a run file: a checkpoint whose ``messages`` are only the new ones."""

    message_count: int
    """Messages of the whole checkpoint."""
    full: bool
    """Whether ``messages`` is the whole history rather than an append."""
    written_at: int
    """Wall clock of the write, epoch nanoseconds (orders runs by creation)."""
    events: list[dict[str, Any]] | None = None
    """Events committed with this checkpoint (their JSON, offsets included)."""

    def checkpoint(self, messages: tuple[Message, ...]) -> AgentCheckpoint:
        """The full checkpoint this line stands for, given its whole history."""
        fields = {name: getattr(self, name) for name in AgentCheckpoint.model_fields}
        fields["messages"] = messages
        return AgentCheckpoint.model_validate(fields)


_INFO_FIELDS = frozenset(CheckpointInfo.model_fields)


@dataclass(frozen=True)
class Entry:
    """A valid line of a run file, decoded as plain JSON (no message objects)."""

    raw: bytes
    meta: dict[str, Any]

    @property
    def step_index(self) -> int:
        """The line's step index."""
        return int(self.meta["step_index"])


@dataclass(frozen=True)
class RunFile:
    """What a run file holds: its valid lines and where they end.

    Attributes:
        path: The file.
        entries: Valid checkpoint lines, in order.
        events: Every event of the run's log (JSON objects), in offset order.
        valid_size: Bytes up to the end of the last valid line.
        size: Bytes in the file (more than ``valid_size`` after a torn write).
    """

    path: Path
    entries: tuple[Entry, ...]
    valid_size: int
    size: int
    events: tuple[dict[str, Any], ...] = ()

    @property
    def run_id(self) -> str:
        """The run's id, as its lines record it."""
        return str(self.entries[0].meta["run_id"])

    @classmethod
    def read(cls, path: Path) -> RunFile | None:
        """Read a run file; a torn last line is ignored with a warning.

        Returns None when the file does not exist.

        Raises:
            StoreCorruptionError: A line before the last is damaged.
            CheckpointVersionError: A line has a newer checkpoint version.
        """
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        lines = data.split(b"\n")
        # After the last newline: b"" normally, or the start of an interrupted write.
        complete, tail = lines[:-1], lines[-1]
        entries: list[Entry] = []
        events: list[dict[str, Any]] = []
        offset = 0
        for number, raw in enumerate(complete, start=1):
            meta = _parse(raw)
            if meta is not None and "step_index" not in meta:  # an event-only line
                events.extend(meta["events"])
                offset += len(raw) + 1
                continue
            if meta is None:
                if number == len(complete) and not tail:
                    _warn_torn(path, data[offset:])
                    return cls(path, tuple(entries), offset, len(data), tuple(events))
                after = f" (after step {entries[-1].step_index})" if entries else ""
                raise StoreCorruptionError(
                    f"line {number} of {path}{after} is not a checkpoint line",
                    run_id=str(entries[0].meta["run_id"]) if entries else None,
                )
            entries.append(Entry(raw, meta))
            events.extend(meta.get("events") or ())
            offset += len(raw) + 1
        if tail:
            _warn_torn(path, tail)
        return cls(path, tuple(entries), offset, len(data), tuple(events))

    def info(self, entry: Entry) -> CheckpointInfo:
        """A line's checkpoint metadata, without decoding its messages."""
        meta = entry.meta
        try:
            return CheckpointInfo.model_validate(
                {k: v for k, v in meta.items() if k in _INFO_FIELDS}
            )
        except ValidationError as exc:
            raise _corrupt(meta, f"its metadata is invalid: {exc}", self.path) from exc

    def checkpoint(self, index: int) -> AgentCheckpoint:
        """The full checkpoint of ``entries[index]``: replays lines from the last full one.

        Raises:
            StoreCorruptionError: A line's messages do not decode or the counts
                do not add up (names the run and the requested step).
        """
        target = self.entries[index]
        start = index
        while start > 0 and not self.entries[start].meta.get("full"):
            start -= 1
        messages: tuple[Message, ...] = ()
        line: Line | None = None
        for entry in self.entries[start : index + 1]:
            try:
                line = validate_stored(Line, entry.raw)
            except ValidationError as exc:
                raise _corrupt(
                    target.meta,
                    f"the line of step {entry.meta.get('step_index')} does not decode: {exc}",
                    self.path,
                ) from exc
            messages = (*line.messages,) if line.full else (*messages, *line.messages)
            if len(messages) != line.message_count:
                raise _corrupt(
                    target.meta,
                    f"the line of step {line.step_index} says {line.message_count} messages, "
                    f"the replay gives {len(messages)}",
                    self.path,
                )
        assert line is not None
        return line.checkpoint(messages)

    def find(self, step_index: int | None) -> int | None:
        """Index of the latest line at ``step_index`` (the last line when None)."""
        if step_index is None:
            return len(self.entries) - 1 if self.entries else None
        for index in range(len(self.entries) - 1, -1, -1):
            if self.entries[index].step_index == step_index:
                return index
        return None


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        meta: Any = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(meta, dict) or not isinstance(meta.get("run_id"), str):
        return None
    events = meta.get("events")
    if events is not None and not (
        isinstance(events, list)
        and all(isinstance(e, dict) and type(e.get("offset")) is int for e in events)
    ):
        return None  # a line whose events are damaged is no line of ours
    if "step_index" not in meta and isinstance(meta.get("events"), list):
        return meta
    if not isinstance(meta.get("step_index"), int):
        return None
    version = meta.get("version")
    if version != CHECKPOINT_VERSION:
        raise CheckpointVersionError(version, CHECKPOINT_VERSION)
    return meta


def _corrupt(meta: dict[str, Any], what: str, path: Path) -> StoreCorruptionError:
    run_id, step_index = meta.get("run_id"), meta.get("step_index")
    return StoreCorruptionError(
        f"checkpoint of run {run_id!r} step {step_index} in {path} is corrupt: {what}. "
        f"Run `nbdurable store check jsonl:///{path.parent}` to see what else is damaged.",
        run_id=run_id if isinstance(run_id, str) else None,
        step_index=step_index if isinstance(step_index, int) else None,
        path=str(path),
    )


def _warn_torn(path: Path, tail: bytes) -> None:
    warnings.warn(
        f"ignored a torn last line ({len(tail)} bytes) in {path}: a save was interrupted "
        "before it completed; earlier checkpoints are intact",
        RuntimeWarning,
        stacklevel=4,
    )


def extends(previous: Sequence[Message], messages: Sequence[Message]) -> bool:
    """Whether ``messages`` starts with ``previous`` (same objects, or the same JSON)."""
    if isinstance(messages, History) and messages.extends(previous):
        return True  # grown from it by appends: no pass over the history
    if len(messages) < len(previous):
        return False
    pairs = zip(previous, messages[: len(previous)], strict=True)
    return all(a is b or a.model_dump_json() == b.model_dump_json() for a, b in pairs)
