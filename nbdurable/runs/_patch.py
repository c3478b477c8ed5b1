"""A typed change of a run record: :class:`RunPatch`, the fields to set, the rest unset.

Every write that changes a run record names its fields here, as keyword
arguments, so a misspelt field is a type error (mypy) and a ``TypeError`` when
the patch is built, never a silent no-op. Stores apply a patch with
:meth:`RunPatch.apply` inside the transaction that writes it
(:meth:`~nbdurable.durable.store.RunStore.rt_update`); the pure rules
of this package build their changed records with it too.
"""

from __future__ import annotations

import dataclasses
import enum
import operator
from typing import Any, Final, Literal

from .._text import valid_data
from ..messages import ToolApprovalResponse
from ._record import Decision, DependencyPolicy, LateResult, RunKind, RuntimeRun
from ._states import RunState

__all__ = ["UNSET", "RunPatch"]


class _Unset(enum.Enum):
    UNSET = "unset"

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> Literal[False]:
        # falsy, so ``patch.reason or None`` reads an unset field as None (mypy narrows it)
        return False


UNSET: Final = _Unset.UNSET
"""A :class:`RunPatch` field left as it is (``None`` is a value a field may be set to)."""


@dataclasses.dataclass(frozen=True, kw_only=True, slots=True)
class RunPatch:
    """The fields of a :class:`~nbdurable.runs.RuntimeRun` a write sets; :data:`UNSET` ones stay.

    Every field of the record but ``run_id`` (a record never changes its
    identity), typed as on the record. ``RunPatch(state="failed", reason="x")``
    sets two fields; ``RunPatch(reason=None)`` clears one.
    """

    agent_id: str | _Unset = UNSET
    agent_version: str | _Unset = UNSET
    session_id: str | _Unset = UNSET
    request_id: str | _Unset | None = UNSET
    prompt: str | _Unset = UNSET
    state: RunState | _Unset = UNSET
    reason: str | _Unset | None = UNSET
    error: str | _Unset | None = UNSET
    seq: int | _Unset = UNSET
    created_at: int | _Unset = UNSET
    updated_at: int | _Unset = UNSET
    next_attempt_at: int | _Unset | None = UNSET
    deadline_at: int | _Unset | None = UNSET
    model_attempts: int | _Unset = UNSET
    retry_policy: dict[str, int] | _Unset | None = UNSET
    stream: bool | _Unset = UNSET
    max_steps: int | _Unset = UNSET
    operations: int | _Unset = UNSET
    lease_owner: str | _Unset | None = UNSET
    lease_expires_at: int | _Unset | None = UNSET
    fence: int | _Unset = UNSET
    verdicts: dict[str, ToolApprovalResponse] | _Unset = UNSET
    result_text: str | _Unset | None = UNSET
    rerun_tool_calls: list[str] | _Unset = UNSET
    kind: RunKind | _Unset = UNSET
    graph_id: str | _Unset | None = UNSET
    node_id: str | _Unset | None = UNSET
    depends_on: list[str] | _Unset = UNSET
    on_dependency_failure: DependencyPolicy | _Unset = UNSET
    owner_run_id: str | _Unset | None = UNSET
    phase: int | _Unset = UNSET
    fingerprint: str | _Unset | None = UNSET
    waiting_reason: str | _Unset | None = UNSET
    decided: dict[str, Decision] | _Unset = UNSET
    retried: bool | _Unset = UNSET
    previous_owner: str | _Unset | None = UNSET
    engine: str | _Unset | None = UNSET
    trace_context: dict[str, str] | _Unset | None = UNSET
    notified: list[str] | _Unset = UNSET
    submitted_by: str | _Unset | None = UNSET
    approvers: dict[str, list[str]] | _Unset | None = UNSET
    submitter_may_approve: bool | _Unset = UNSET
    grants: dict[str, list[str]] | _Unset | None = UNSET
    settled_by: str | _Unset | None = UNSET
    late_results: list[LateResult] | _Unset = UNSET
    agent_origin: str | _Unset | None = UNSET

    @property
    def fields_set(self) -> frozenset[str]:
        """The names of the fields this patch sets."""
        return frozenset(self.changes())

    def changes(self) -> dict[str, Any]:
        """The fields this patch sets, by name (what a store writes)."""
        # The names are listed once (_NAMES) and read in one C call (_VALUES): a
        # runtime step merges a dozen patches, and dataclasses.fields() or a getattr
        # per field on every call was a tenth of a loaded runtime's CPU (issue 42).
        return {
            name: value
            for name, value in zip(_NAMES, _VALUES(self), strict=True)
            if value is not UNSET
        }

    def __bool__(self) -> bool:
        # In C: count() meets UNSET by identity; any other value is not equal to it.
        return _VALUES(self).count(UNSET) != len(_NAMES)

    def __or__(self, later: RunPatch) -> RunPatch:
        """The fields of both patches; where both set one, ``later``'s value."""
        # Patches are immutable: an empty side gives the other one back as it is.
        if not later:
            return self
        if not self:
            return later
        return RunPatch(**(self.changes() | later.changes()))

    def without(self, written: RunPatch) -> RunPatch:
        """The fields ``written`` did not set to the same values: what is left to write."""
        # The usual cases without building a patch: all of it written, or none.
        if written is self:
            return _EMPTY
        if not written:
            return self
        done = written.changes()
        left = {n: v for n, v in self.changes().items() if done.get(n, UNSET) != v}
        return RunPatch(**left)

    def apply(self, run: RuntimeRun) -> RuntimeRun:
        """``run`` with this patch's fields set (the text policy applied, as stores store it)."""
        # model_copy skips validation: strings quoting an exception may hold lone
        # surrogates, so they get U+FFFD here, as the stores' serialized form does.
        return run.model_copy(update=valid_data(self.changes()))


_NAMES: Final = tuple(field.name for field in dataclasses.fields(RunPatch))
"""The fields of a :class:`RunPatch`, in order."""

_VALUES: Final = operator.attrgetter(*_NAMES)
"""A patch's values of :data:`_NAMES`, in order, as one tuple."""

_EMPTY: Final = RunPatch()
"""The patch that sets nothing (patches are immutable: one serves)."""
