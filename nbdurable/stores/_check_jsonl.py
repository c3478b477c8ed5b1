"""The check of a JSONL store: every line of every run file (see :mod:`.check`).

A JSONL line carries no checksum: a change that leaves valid JSON of the right
shape (a letter for another inside a text) is not found. What is found: lines
that do not parse or validate, message counts that do not add up, lines of
another run, event offsets with holes. A torn last line (a save interrupted by
a crash) is a note, not damage: the store ignores it and its next save cuts it off.
"""

from __future__ import annotations

import codecs
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._errors import ConfigurationError
from ..durable._checkpoint import CHECKPOINT_VERSION
from ..durable._stored import validate_stored
from ..events._model import Event
from ..messages import Message
from ._check import CheckReport
from .jsonl._format import FORMAT_FILE, FORMAT_VERSION, Line

__all__ = ["check_jsonl"]


def check_jsonl(url: str) -> CheckReport:
    """Check a JSONL store directory without writing to it.

    Raises:
        ConfigurationError: There is no directory at the URL's path.
    """
    from . import local_path

    directory = Path(local_path(url, url.partition("://")[2]))
    if not directory.is_dir():
        raise ConfigurationError(f"no JSONL store directory at {str(directory)!r}")
    report = CheckReport(url)
    _check_marker(directory / FORMAT_FILE, report)
    for path in sorted(directory.glob("*.jsonl")):
        _check_file(path, report)
    return report


def _check_marker(marker: Path, report: CheckReport) -> None:
    try:
        raw: Any = json.loads(marker.read_bytes())
    except FileNotFoundError:
        report.notes.append(f"{marker.name} is missing (the store writes it on open)")
        return
    except ValueError as exc:
        report.add(f"{marker.name} is not valid JSON ({exc})")
        return
    version = raw.get("version") if isinstance(raw, dict) else None
    if not isinstance(version, int) or isinstance(version, bool):
        report.add(f"{marker.name} has no format version")
    elif version > FORMAT_VERSION:
        report.notes.append(f"format {version} is newer than this nbdurable ({FORMAT_VERSION})")


def _check_file(path: Path, report: CheckReport) -> None:
    data = path.read_bytes()
    lines = data.split(b"\n")
    complete, tail = lines[:-1], lines[-1]
    run_id: str | None = None
    messages: tuple[Message, ...] = ()
    offsets: list[int] = []
    report.count("runs")
    for number, raw in enumerate(complete, start=1):
        meta = _parse(raw)
        if meta is None:
            if number == len(complete) and not tail:
                # A process crash cannot leave a whole line; a power loss can.
                report.add(
                    f"{path.name}: its last line is damaged, or was torn by a power loss; "
                    "the store ignores it and reads the save before it",
                    run_id or path.name,
                )
                break
            report.add(f"{path.name} line {number} is not valid JSON", run_id or path.name)
            continue
        found = meta.get("run_id")
        if not isinstance(found, str):
            report.add(f"{path.name} line {number} names no run", run_id or path.name)
            continue
        if run_id is None:
            run_id = found
        elif found != run_id:
            report.add(f"{path.name} line {number} belongs to run {found!r}", run_id)
            continue
        offsets.extend(_events(meta.get("events"), run_id, number, path, report))
        if "step_index" not in meta:
            continue
        messages = _checkpoint(raw, meta, messages, run_id, number, path, report)
    if tail and not _line_prefix(tail):
        # A crash leaves a prefix of a line: UTF-8 text without NUL that is no
        # whole object yet. Anything else is damage (or a power loss's tear).
        report.add(
            f"{path.name}: its last line is damaged, or was torn by a power loss; "
            "the store ignores it and reads the save before it",
            run_id or path.name,
        )
    elif tail:
        report.notes.append(f"{path.name}: a torn last line of {len(tail)} bytes (ignored)")
    if offsets != list(range(1, len(offsets) + 1)):
        report.add(f"{path.name}: event offsets are not 1..{len(offsets)} in order", run_id)


def _line_prefix(tail: bytes) -> bool:
    """Whether ``tail`` can be the start of a line a crash cut short."""
    try:
        # A multi-byte character cut at the end is fine; an invalid one is not.
        text = codecs.getincrementaldecoder("utf-8")().decode(tail, final=False)
    except UnicodeDecodeError:
        return False
    if "\x00" in text:
        return False
    try:
        json.JSONDecoder().raw_decode(text)
    except ValueError:
        return True
    return False  # a whole object: the line was written, its newline is what is damaged


def _parse(raw: bytes) -> dict[str, Any] | None:
    try:
        meta: Any = json.loads(raw)
    except ValueError:  # not JSON, or not UTF-8
        return None
    return meta if isinstance(meta, dict) else None


def _checkpoint(
    raw: bytes,
    meta: dict[str, Any],
    messages: tuple[Message, ...],
    run_id: str,
    number: int,
    path: Path,
    report: CheckReport,
) -> tuple[Message, ...]:
    report.count("checkpoints")
    step = meta.get("step_index")
    step_index = step if isinstance(step, int) else None
    if meta.get("version") != CHECKPOINT_VERSION:
        found = meta.get("version")
        report.add(f"{path.name} line {number}: version {found!r}", run_id, step_index)
        return messages
    try:
        line = validate_stored(Line, raw)
    except ValidationError as exc:
        first = exc.errors()[0]["msg"] if exc.errors() else str(exc)
        report.add(
            f"{path.name} line {number} does not decode ({exc.error_count()} error(s), "
            f"first: {first})",
            run_id,
            step_index,
        )
        return messages
    replayed = (*line.messages,) if line.full else (*messages, *line.messages)
    if len(replayed) != line.message_count:
        report.add(
            f"{path.name} line {number} says {line.message_count} messages, the replay "
            f"gives {len(replayed)} (a line before it is damaged or missing)",
            run_id,
            step_index,
        )
    return replayed


def _events(events: Any, run_id: str, number: int, path: Path, report: CheckReport) -> list[int]:
    if events is None:
        return []
    if not isinstance(events, list):
        report.add(f"{path.name} line {number}: its events are not a list", run_id)
        return []
    offsets = []
    for event in events:
        report.count("events")
        try:
            offsets.append(validate_stored(Event, {**event, "run_id": run_id}).offset)
        except (ValidationError, TypeError) as exc:
            report.add(f"{path.name} line {number}: an event does not decode ({exc})", run_id)
    return offsets
