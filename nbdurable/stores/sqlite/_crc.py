"""Row checksums of the SQLite store (schema version 7).

Every row of ``runs``, ``checkpoints``, ``event_batches``, ``rt_runs``,
``rt_intents`` and ``rt_journal`` written by schema version 7 or later carries
a ``crc`` column: the CRC-32 of the table's name and the row's values, its keys
(run id, sequence number, position, call id) included. A read recomputes it from
the values it got, with the keys it asked for, so a damaged value, a row of
another run or another table (a swapped page, a damaged index pointing at the
wrong row) is a :class:`~nbdurable.StoreCorruptionError` naming the run instead
of different data. Message nodes need none: their id is the sha256 of their
content (:mod:`..chain`).

Rows written before version 7 have no checksum (``crc`` is NULL) and are read
as they were. A checksum is not a signature: it catches damage, not a writer
who recomputes it.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any

from ..._errors import StoreCorruptionError
from .._rows import COLUMNS

__all__ = [
    "CHECKSUMMED",
    "latest_row",
    "pick_at_step",
    "row_crc",
    "verify_checkpoint",
    "verify_checkpoints",
    "verify_row",
    "verify_run",
]

_NULL = b"\x00"

CHECKSUMMED: dict[str, tuple[str, ...]] = {
    "runs": ("run_id", "created_at", "updated_at", "last_seq"),
    "checkpoints": ("run_id", "seq", "head", *COLUMNS),
    "event_batches": ("run_id", "position", "first", "events"),
    "rt_runs": (
        "run_id",
        "seq",
        "session_id",
        "state",
        "request_id",
        "fence",
        "kind",
        "graph_id",
        "record",
    ),
    "rt_intents": ("run_id", "tool_call_id", "intent"),
    "rt_journal": ("run_id", "step_index", "response"),
    "run_heads": ("run_id", "events", "intents", "journal", "record"),
}
"""Each checksummed table's columns in the order :func:`row_crc` takes them (keys first)."""


def row_crc(table: str, values: Sequence[object]) -> int:
    """The checksum of a row of ``table`` holding ``values`` (keys included), 0..2**32-1.

    Text and blobs are checksummed as their bytes (UTF-8 for text), each after
    its length, so ``("ab", "c")`` and ``("a", "bc")`` differ; integers as
    their decimal digits; NULL as a byte of its own.
    """
    parts = [table.encode()]
    add = parts.append
    for value in values:
        # Exact types first: this runs for every row every read verifies.
        if type(value) is str:
            value = value.encode("utf-8", "surrogatepass")
            add(b"\x01%d:" % len(value))
            add(value)
        elif type(value) is int:
            add(b"\x02%d;" % value)
        elif value is None:
            add(_NULL)
        elif type(value) is bytes:
            add(b"\x01%d:" % len(value))
            add(value)
        elif isinstance(value, str):
            value = value.encode("utf-8", "surrogatepass")
            add(b"\x01%d:" % len(value))
            add(value)
        elif isinstance(value, bytes):
            add(b"\x01%d:" % len(value))
            add(value)
        elif isinstance(value, int):
            add(b"\x02%d;" % value)
        else:  # a float: not written by the store, but read back as what it is
            add(b"\x03" + repr(value).encode())
    # One call over the joined bytes: a call per value costs more than the copy.
    return zlib.crc32(b"".join(parts))


def verify_row(
    table: str,
    values: Sequence[object],
    crc: object,
    run_id: str | None,
    what: str = "a row",
    legacy: bool = False,
    step_index: object = None,
) -> None:
    """Raise unless ``crc`` is the checksum of ``values``.

    With ``legacy`` (a file that held rows before version 7) a NULL ``crc`` is
    a row older than the checksums and passes; in a file created at version 7
    or later every row has one, and NULL is damage (a page of another table read
    as this one's gives NULL for the columns it lacks).

    Raises:
        StoreCorruptionError: The row was damaged, or is not the row asked for.
    """
    if crc is None and legacy:
        return
    if type(crc) is not int or crc != row_crc(table, values):
        of = "" if run_id is None else f" of run {run_id!r}"
        if type(step_index) is int:
            of += f" step {step_index}"
        raise StoreCorruptionError(
            f"{what}{of} in table {table} is damaged: its checksum does not match",
            run_id=run_id,
            step_index=step_index if type(step_index) is int else None,
        )


def verify_run(run_id: str, row: Sequence[object], legacy: bool) -> None:
    """Verify a ``runs`` row read for ``run_id``: ``(created_at, updated_at, last_seq, crc)``."""
    created_at, updated_at, last_seq, crc = row
    values = (run_id, created_at, updated_at, last_seq)
    verify_row("runs", values, crc, run_id, "the run row", legacy)


def verify_checkpoint(run_id: str, row: Sequence[object], legacy: bool) -> None:
    """Verify a ``checkpoints`` row read as ``(seq, head, *metadata columns, crc)``."""
    seq, step = row[0], row[3]
    what = f"the checkpoint (save {seq})"
    verify_row("checkpoints", (run_id, *row[:-1]), row[-1], run_id, what, legacy, step)


_CHECKPOINT_ROW = 3 + len(COLUMNS)  # seq, head, the metadata columns, crc


def _text(value: str | bytes) -> bytes:
    """A text or blob value as :func:`row_crc` checksums it."""
    raw = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
    return b"\x01%d:%s" % (len(raw), raw)


def verify_checkpoints(run_id: str, rows: Sequence[Sequence[Any]], legacy: bool) -> None:
    """:func:`verify_checkpoint` for each of a run's ``checkpoints`` rows, at a third of the cost.

    A history listing verifies every row of the run (500 for a 500-step run):
    rows of the shape this store writes are checksummed with one format
    operation each, the bytes :func:`row_crc` would join; any other row, and
    any mismatch, goes through :func:`verify_checkpoint` itself.
    """
    prefix = b"checkpoints" + _text(run_id)
    text = _text
    for row in rows:
        if len(row) != _CHECKPOINT_ROW:
            verify_checkpoint(run_id, row, legacy)
            continue
        seq, head, version, step, status, count, usage, approvals, path, created, finish = row[:11]
        extra, crc = row[11], row[12]
        if (
            type(crc) is not int
            or type(seq) is not int
            or type(head) is not bytes
            or type(version) is not int
            or type(step) is not int
            or type(status) is not str
            or type(count) is not int
            or type(usage) is not bytes
            or type(approvals) is not str
            or type(path) is not str
            or type(created) is not int
            or not (finish is None or type(finish) is str)
            or not (extra is None or type(extra) is bytes or type(extra) is str)
        ):
            verify_checkpoint(run_id, row, legacy)
            continue
        utf8 = "utf-8"
        status_, approvals_, path_ = (
            status.encode(utf8, "surrogatepass"),
            approvals.encode(utf8, "surrogatepass"),
            path.encode(utf8, "surrogatepass"),
        )
        data = (
            b"%s\x02%d;\x01%d:%s\x02%d;\x02%d;\x01%d:%s\x02%d;\x01%d:%s\x01%d:%s\x01%d:%s\x02%d;%s%s"
            % (
                prefix,
                seq,
                len(head),
                head,
                version,
                step,
                len(status_),
                status_,
                count,
                len(usage),
                usage,
                len(approvals_),
                approvals_,
                len(path_),
                path_,
                created,
                _NULL if finish is None else _text(finish),
                _NULL if extra is None else text(extra),
            )
        )
        if zlib.crc32(data) != crc:
            verify_checkpoint(run_id, row, legacy)  # raises, naming the row


def latest_row(run_id: str, row: Sequence[Any], legacy: bool) -> Sequence[Any]:
    """Verify a row of the store's latest-checkpoint query and return it.

    ``row`` is ``(seq, head, *metadata, crc, created_at, updated_at, last_seq,
    run crc)``: a checkpoint row left-joined to its run's row. A run row whose
    checkpoint is missing (``seq`` NULL) is damage.
    """
    verify_run(run_id, row[-4:], legacy)
    # The seq asked for, not the one read: a damaged index can lead to another row.
    if row[0] is None or row[0] != row[-2]:
        raise StoreCorruptionError(
            f"the latest checkpoint of run {run_id!r} cannot be read", run_id=run_id
        )
    verify_checkpoint(run_id, row[:-4], legacy)
    return row


def pick_at_step(
    run_id: str,
    rows: Sequence[Sequence[Any]],
    indexed: Sequence[object],
    step_index: int,
    legacy: bool,
) -> Sequence[Any] | None:
    """The latest of a run's checkpoint ``rows`` (save order, unverified) saved at ``step_index``.

    ``indexed`` is the saves the step index lists for that step: a second witness.
    A damaged row is an error only when it may be the answer, that is when its
    own step or the index says ``step_index`` and no later save does; a damaged
    later checkpoint does not stop loading an earlier step.
    """
    candidates = {int(seq) for seq in indexed if type(seq) is int}
    candidates |= {int(row[0]) for row in rows if row[3] == step_index and type(row[0]) is int}
    if not candidates:
        return None
    latest = max(candidates)
    if not 1 <= latest <= len(rows):
        raise StoreCorruptionError(
            f"checkpoints of run {run_id!r} are missing or unreadable", run_id=run_id
        )
    row = rows[latest - 1]
    verify_checkpoint(run_id, row, legacy)
    if row[3] != step_index:
        raise StoreCorruptionError(
            f"the step index of run {run_id!r} lists save {latest} at step {step_index}, "
            f"but that checkpoint is at step {row[3]}",
            run_id=run_id,
            step_index=step_index,
        )
    return row
