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


@dataclasses.dataclass(frozen=True, kw_only=True)
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
        return frozenset(vars(self))

    def changes(self) -> dict[str, Any]:
        """The fields this patch sets, by name (what a store writes)."""
        # An instance holds only the fields it sets (see _init): a runtime step
        # builds, merges and reads a dozen patches, and reading all 46 fields
        # each time was a tenth of a loaded runtime's CPU (issue 42).
        return dict(vars(self))

    def __bool__(self) -> bool:
        return bool(vars(self))

    def __or__(self, later: RunPatch) -> RunPatch:
        """The fields of both patches; where both set one, ``later``'s value."""
        # Patches are immutable: an empty side gives the other one back as it is.
        if not vars(later):
            return self
        if not vars(self):
            return later
        return _built(vars(self) | vars(later))

    def without(self, written: RunPatch) -> RunPatch:
        """The fields ``written`` did not set to the same values: what is left to write."""
        # The usual cases without building a patch: all of it written, or none.
        if written is self:
            return _EMPTY
        done = vars(written)
        if not done:
            return self
        return _built({n: v for n, v in vars(self).items() if done.get(n, UNSET) != v})

    def apply(self, run: RuntimeRun) -> RuntimeRun:
        """``run`` with this patch's fields set (the text policy applied, as stores store it)."""
        # model_copy skips validation: strings quoting an exception may hold lone
        # surrogates, so they get U+FFFD here, as the stores' serialized form does.
        return run.model_copy(update=valid_data(self.changes()))


_NAMES: Final = frozenset(field.name for field in dataclasses.fields(RunPatch))
"""The fields of a :class:`RunPatch`."""


def _init(self: RunPatch, **changes: Any) -> None:
    """``RunPatch(**changes)``: the fields set kept in the instance, the rest read ``UNSET``.

    Replaces the dataclass's ``__init__``, which set all 46 fields of a frozen
    instance one ``object.__setattr__`` at a time; the class attributes are the
    defaults (``UNSET``), so an unset field reads as before. Typed callers are
    checked against the dataclass's signature (mypy); any caller's misspelt
    name is a ``TypeError`` here.
    """
    unknown = changes.keys() - _NAMES
    if unknown:
        names = ", ".join(map(repr, sorted(unknown)))
        raise TypeError(f"RunPatch.__init__() got an unexpected keyword argument {names}")
    kept = vars(self)
    for name, value in changes.items():
        if value is not UNSET:
            kept[name] = value


def _built(changes: dict[str, Any]) -> RunPatch:
    """A patch of ``changes`` (names known to be fields, values set), built directly."""
    patch = object.__new__(RunPatch)
    vars(patch).update(changes)
    return patch


RunPatch.__init__ = _init  # type: ignore[method-assign]

_EMPTY: Final = RunPatch()
"""The patch that sets nothing (patches are immutable: one serves)."""
