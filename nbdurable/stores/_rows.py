"""A checkpoint's metadata as SQL column values and back, shared by the SQL stores.

The row holds every field of :class:`AgentCheckpoint` except the messages, which
live in the message chain. Fields a later version adds (optional by the
checkpoint contract) need no migration: they travel in the ``extra`` JSON column.
The SQLite store may pack ``usage`` and ``extra`` (a BLOB, see
:mod:`.packing`); a row reads either form.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model
from pydantic_core import from_json

from .._errors import CheckpointVersionError, StoreCorruptionError
from ..durable._checkpoint import CHECKPOINT_VERSION, AgentCheckpoint, CheckpointInfo, StepStats
from ..durable._records import RunRecord, latest_record
from ..messages import Message, ToolApprovalRequest, Usage
from ..runs import RuntimeRun
from ._history_columns import HistoryColumns
from ._packing import unpack_json, unpack_json_many
from ._trusted import built

__all__ = [
    "COLUMNS",
    "CheckpointRow",
    "checkpoint_row",
    "run_record",
    "runtime_row",
    "verified_columns",
    "verified_infos",
]

COLUMNS = (
    "version",
    "step_index",
    "status",
    "message_count",
    "usage",
    "pending_approvals",
    "agent_path",
    "created_at",
    "finish_reason",
    "extra",
)
"""Metadata columns of a checkpoint row, in the order :class:`CheckpointRow` holds them."""

# Fields with a column of their own (or derived: step_id, messages); any other
# field of AgentCheckpoint is an optional later addition and goes to ``extra``.
_OWN = frozenset(
    {
        "version",
        "run_id",
        "step_id",
        "step_index",
        "status",
        "messages",
        "usage",
        "pending_approvals",
        "agent_path",
        "created_at",
        "finish_reason",
    }
)
_EXTRA = frozenset(AgentCheckpoint.model_fields) - _OWN
_EXTRA_INCLUDE = set(_EXTRA)
_EXTRA_DEFAULTS = tuple((name, AgentCheckpoint.model_fields[name].default) for name in _EXTRA)
_INFO_FIELDS = frozenset(CheckpointInfo.model_fields)
_USAGE_FIELDS = frozenset(Usage.model_fields)
_STATS_FIELDS = frozenset(StepStats.model_fields)
_STATUSES = frozenset({"running", "suspended", "completed"})
_APPROVALS: TypeAdapter[tuple[ToolApprovalRequest, ...]] = TypeAdapter(
    tuple[ToolApprovalRequest, ...]
)
_PATH: TypeAdapter[tuple[str, ...]] = TypeAdapter(tuple[str, ...])


@dataclass(frozen=True)
class CheckpointRow:
    """One checkpoint's metadata as stored: scalars plus JSON columns (text, or packed)."""

    run_id: str
    version: int
    step_index: int
    status: str
    message_count: int
    usage: str | bytes
    pending_approvals: str
    agent_path: str
    created_at: int
    finish_reason: str | None
    extra: str | bytes | None

    @classmethod
    def from_values(cls, run_id: str, values: Any) -> CheckpointRow:
        """Build from a database row holding :data:`COLUMNS` in order."""
        return cls(run_id, *values)

    def values(self) -> tuple[Any, ...]:
        """The :data:`COLUMNS` values, in order."""
        return (
            self.version,
            self.step_index,
            self.status,
            self.message_count,
            self.usage,
            self.pending_approvals,
            self.agent_path,
            self.created_at,
            self.finish_reason,
            self.extra,
        )

    def fields(self) -> dict[str, Any]:
        """The checkpoint's fields except messages, validated.

        Raises:
            CheckpointVersionError: The row was written with a newer checkpoint version.
            StoreCorruptionError: A column does not decode (names the run and step).
        """
        version = self.version
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise self.corruption(f"its version {version!r} is not a version")
        if version != CHECKPOINT_VERSION:
            raise CheckpointVersionError(version, CHECKPOINT_VERSION)
        try:
            # "[]" is by far the most common value: skip the parser for it.
            approvals = self.pending_approvals
            path = self.agent_path
            fields: dict[str, Any] = {
                "run_id": self.run_id,
                "step_index": self.step_index,
                "status": self.status,
                "usage": Usage.model_validate_json(unpack_json(self.usage)),
                "pending_approvals": ()
                if approvals == "[]"
                else _APPROVALS.validate_json(approvals),
                "agent_path": () if path == "[]" else _PATH.validate_json(path),
                "created_at": self.created_at,
                "finish_reason": self.finish_reason,
            }
            if self.extra is not None:
                fields.update(_decode_extra(unpack_json(self.extra)))
        except (ValidationError, ValueError, TypeError, StoreCorruptionError) as exc:
            raise self.corruption(f"its metadata does not decode: {exc}") from exc
        return fields

    def info(self, *, verified: bool = False) -> CheckpointInfo:
        """The checkpoint's metadata without loading a message.

        ``verified``: the row's checksum was just checked, so its columns are
        what this store wrote from a validated checkpoint; the usual shapes are
        then built without validating them again (:meth:`_verified_info`).
        """
        if verified and (found := self._verified_info()) is not None:
            return found
        fields = {k: v for k, v in self.fields().items() if k in _INFO_FIELDS}
        try:
            return CheckpointInfo(
                step_id=f"{self.run_id}#{self.step_index}",
                message_count=self.message_count,
                **fields,
            )
        except ValidationError as exc:
            raise self.corruption(f"its metadata is invalid: {exc}") from exc

    def _verified_info(self) -> CheckpointInfo | None:
        """The info of a checksum-verified row in its usual shape, or None (then validated).

        Checks types and keys, not values, as :mod:`._trusted` does for messages:
        for a history listing (``nd.inspect.history``) validating 500 rows costs
        more than reading them. Pending approvals, agent paths and optional
        fields other than ``stats`` take the validating path.
        """
        if not self._usual_columns():
            return None
        try:
            usage = json.loads(unpack_json(self.usage))
            extra = None if self.extra is None else json.loads(unpack_json(self.extra))
        except (ValueError, StoreCorruptionError):
            return None
        return self._info_of(usage, extra)

    def _usual_columns(self) -> bool:
        return not (
            self.version != CHECKPOINT_VERSION
            or self.pending_approvals != "[]"
            or self.agent_path != "[]"
            or self.status not in _STATUSES
            or type(self.step_index) is not int
            or type(self.message_count) is not int
            or type(self.created_at) is not int
            or not (self.finish_reason is None or type(self.finish_reason) is str)
        )

    def _info_of(self, usage: Any, extra: Any) -> CheckpointInfo | None:
        """The info from this row's decoded usage and extra JSON, or None when unusual."""
        if not _usual_usage(usage):
            return None
        stats = None
        if extra is not None:
            if type(extra) is not dict or extra.keys() != {"stats"}:
                return None
            stats = _stats(extra["stats"])
            if stats is None:
                return None
        values = {
            "run_id": self.run_id,
            "step_id": f"{self.run_id}#{self.step_index}",
            "step_index": self.step_index,
            "status": self.status,
            "usage": built(Usage, usage),
            "message_count": self.message_count,
            "pending_approvals": (),
            "agent_path": (),
            "created_at": self.created_at,
            "finish_reason": self.finish_reason,
            "forked_from": None,
            "stats": stats,
        }
        given = _GIVEN if stats is None else _GIVEN_STATS
        return built(CheckpointInfo, values, given)

    def checkpoint(self, messages: tuple[Message, ...]) -> AgentCheckpoint:
        """The full checkpoint, given its messages."""
        try:
            return AgentCheckpoint(messages=messages, **self.fields())
        except ValidationError as exc:
            raise self.corruption(f"it is not a valid checkpoint: {exc}") from exc

    def corruption(self, what: str) -> StoreCorruptionError:
        """A corruption error naming this row's run and step."""
        return StoreCorruptionError(
            f"checkpoint of run {self.run_id!r} step {self.step_index} is corrupt: {what}",
            run_id=self.run_id,
            step_index=self.step_index,
        )


# The fields a validated CheckpointInfo of info() counts as set (those it was given).
_GIVEN = frozenset(_INFO_FIELDS - {"forked_from", "stats"})
_GIVEN_STATS = _GIVEN | {"stats"}


def _usual_usage(data: Any) -> bool:
    """Whether stored usage JSON has exactly Usage's fields, of the types validation keeps."""
    return (
        type(data) is dict
        and data.keys() == _USAGE_FIELDS
        and type(data["input_tokens"]) is int
        and type(data["output_tokens"]) is int
        and type(data["total_tokens"]) is int
        and (data["cached_input_tokens"] is None or type(data["cached_input_tokens"]) is int)
        and (data["cost"] is None or type(data["cost"]) is float)
    )


def _stats(data: Any) -> StepStats | None:
    """StepStats from stored JSON (defaults left out when written), or None when unusual."""
    if type(data) is not dict or not data.keys() <= _STATS_FIELDS or "started_at" not in data:
        return None
    values = {  # in field order, as validation leaves them
        "started_at": data["started_at"],
        "model_ms": data.get("model_ms", 0),
        "tool_ms": data.get("tool_ms", 0),
        "tool_calls": data.get("tool_calls", ()),
    }
    calls = values["tool_calls"]
    if type(calls) is list:
        if not all(type(name) is str for name in calls):
            return None
        values["tool_calls"] = tuple(calls)
    elif calls != ():
        return None
    if not all(type(values[name]) is int for name in ("started_at", "model_ms", "tool_ms")):
        return None
    return built(StepStats, values, frozenset(data))


def verified_infos(rows: Sequence[CheckpointRow]) -> list[CheckpointInfo]:
    """``row.info(verified=True)`` of each checksum-verified row, their JSON parsed at once.

    A history listing of 500 checkpoints parses 1,000 small JSON values (usage
    and the optional fields): one parser call for all of them costs a fraction of
    a call each. Rows of an unusual shape are validated one by one, as
    :meth:`CheckpointRow.info` does.
    """
    texts: list[str] = []
    try:
        for row in rows:
            if not row._usual_columns():
                raise ValueError("an unusual row")
            texts.append(unpack_json(row.usage))
            texts.append("null" if row.extra is None else unpack_json(row.extra))
        parsed = json.loads("[" + ",".join(texts) + "]")
    except (ValueError, StoreCorruptionError):
        return [row.info(verified=True) for row in rows]
    if type(parsed) is not list or len(parsed) != 2 * len(rows):  # a text held more than one
        return [row.info(verified=True) for row in rows]
    found = []
    for i, row in enumerate(rows):
        info = row._info_of(parsed[2 * i], parsed[2 * i + 1])
        found.append(info if info is not None else row.info())
    return found


def verified_columns(run_id: str, rows: Sequence[Sequence[Any]], start: int) -> HistoryColumns:
    """The columns of a run's checksum-verified checkpoint rows (:data:`COLUMNS` from ``start``).

    What :func:`verified_infos` lists, without an object per row: the usual
    shapes (checked as :meth:`CheckpointRow._verified_info` checks them) go
    straight into the columns, their JSON inflated and parsed in one call each;
    any other row is read through :meth:`CheckpointRow.info`, which validates
    it (and raises what ``history`` raises for it).
    """
    end = start + len(COLUMNS)
    packed: list[object] = []  # usage and extra of each row, None for an unusual row's
    usual: list[bool] = []
    for values in rows:
        version, step, status, count, usage, approvals, path, created, finish, extra = values[
            start:end
        ]
        ok = not (
            type(version) is not int
            or version != CHECKPOINT_VERSION
            or approvals != "[]"
            or path != "[]"
            or status not in _STATUSES
            or type(step) is not int
            or type(count) is not int
            or type(created) is not int
            or not (finish is None or type(finish) is str)
        )
        usual.append(ok)
        packed += (usage, extra) if ok else (None, None)
    try:
        # pydantic-core's parser (what validation parses with), faster than json's here.
        parsed = from_json("[" + ",".join(unpack_json_many(packed)) + "]")
    except (ValueError, StoreCorruptionError):
        parsed = None
    if type(parsed) is not list or len(parsed) != len(packed):  # a text held more than one
        usual = [False] * len(rows)
        parsed = [None] * len(packed)
    found: list[tuple[Any, ...]] = []
    add, stats_of = found.append, _stats_values
    pairs = iter(parsed)
    for ok, values, usage, extra in zip(usual, rows, pairs, pairs, strict=False):
        stats: tuple[Any, ...] | None = _NO_STATS
        if (
            not ok
            or type(usage) is not dict
            or usage.keys() != _USAGE_FIELDS
            or type(inputs := usage["input_tokens"]) is not int
            or type(outputs := usage["output_tokens"]) is not int
            or type(totals := usage["total_tokens"]) is not int
            or not ((cached := usage["cached_input_tokens"]) is None or type(cached) is int)
            or not ((cost := usage["cost"]) is None or type(cost) is float)
            or (extra is not None and (stats := stats_of(extra)) is None)
        ):
            info = CheckpointRow.from_values(run_id, values[start:end]).info(verified=True)
            add(HistoryColumns.values_of(info))
            continue
        # In the order of HistoryColumns' fields after run_id.
        add(
            (
                values[start + 1],
                values[start + 2],
                values[start + 8],
                values[start + 3],
                values[start + 7],
                inputs,
                outputs,
                totals,
                cost,
                *stats,  # type: ignore[misc]  # not None here: checked above
                (),
                None,
            )
        )
    return HistoryColumns.from_values(run_id, found)


_NO_STATS = (None, None, None, None)


_STATS_ONLY = frozenset({"stats"})


def _stats_values(extra: Any) -> tuple[int, int, int, tuple[str, ...]] | None:
    """The step stats of a row's usual extra JSON (``{"stats": ...}``), or None when unusual.

    The checks of :func:`_stats`, giving the values instead of a :class:`StepStats`.
    """
    if type(extra) is not dict or extra.keys() != _STATS_ONLY:
        return None
    data = extra["stats"]
    if type(data) is not dict or not data.keys() <= _STATS_FIELDS:
        return None
    started, model, tool = data.get("started_at"), data.get("model_ms", 0), data.get("tool_ms", 0)
    if type(started) is not int or type(model) is not int or type(tool) is not int:
        return None
    calls = data.get("tool_calls", ())
    if type(calls) is list:
        for name in calls:
            if type(name) is not str:
                return None
        calls = tuple(calls)
    elif calls != ():
        return None
    return started, model, tool, calls


def checkpoint_row(checkpoint: AgentCheckpoint) -> CheckpointRow:
    """The row that stores ``checkpoint``'s metadata."""
    extra = None
    # All optional fields at their defaults (the usual case for most of them) dump as "{}".
    if any(getattr(checkpoint, name) != default for name, default in _EXTRA_DEFAULTS):
        dumped = checkpoint.model_dump_json(include=_EXTRA_INCLUDE, exclude_defaults=True)
        extra = None if dumped == "{}" else dumped
    approvals = checkpoint.pending_approvals
    path = checkpoint.agent_path
    return CheckpointRow(
        run_id=checkpoint.run_id,
        version=checkpoint.version,
        step_index=checkpoint.step_index,
        status=checkpoint.status,
        message_count=len(checkpoint.messages),
        usage=checkpoint.usage.model_dump_json(),
        # "[]" is by far the most common value of both (and what their encoders write).
        pending_approvals=_APPROVALS.dump_json(approvals).decode() if approvals else "[]",
        agent_path=json.dumps(list(path)) if path else "[]",
        created_at=checkpoint.created_at,
        finish_reason=checkpoint.finish_reason,
        extra=extra,
    )


def run_record(run_id: str, last_seq: int, created_at: int, values: Any) -> RunRecord:
    """A run record from a run row and its latest checkpoint's metadata columns.

    Both SQL stores' ``list_runs`` read rows of (run id, saves so far, creation
    time, metadata columns...).
    """
    latest = CheckpointRow.from_values(run_id, values).info()
    return latest_record(latest, step_count=last_seq, created_at=created_at)


# The optional fields as a model of their own: one JSON validation per row (in
# JSON mode, so bytes-valued fields come back as bytes, not as base64 text), and
# fields of a newer version this one does not know are ignored.
_ExtraFields: type[BaseModel] = create_model(  # type: ignore[call-overload]
    "_ExtraFields",
    __config__=ConfigDict(extra="ignore", val_json_bytes="base64"),
    **{name: (AgentCheckpoint.model_fields[name].annotation, None) for name in _EXTRA},
)


def _decode_extra(text: str) -> dict[str, Any]:
    parsed = _ExtraFields.model_validate_json(text)
    return {name: getattr(parsed, name) for name in parsed.model_fields_set}


def runtime_row(run: RuntimeRun) -> tuple[object, ...]:
    """A run record as a row of ``rt_runs``: the columns the scheduler queries, then the JSON."""
    return (
        run.run_id,
        run.seq,
        run.session_id,
        run.state,
        run.request_id,
        run.fence,
        run.kind,
        run.graph_id,
        run.model_dump_json(),
    )
