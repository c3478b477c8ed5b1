"""``diff``: what changed between two checkpoints (of one run, or of a run and its fork)."""

from __future__ import annotations

import difflib
import html
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from ..durable._checkpoint import AgentCheckpoint
from ..durable._lookup import checkpoint_at
from ..messages import Message
from ._rows import preview
from ._source import StoreLike, opened

if TYPE_CHECKING:
    from ._frame import InspectFrame

__all__ = ["Change", "CheckpointDiff", "diff"]

ChangeKind = Literal["added", "removed", "edited", "changed"]


@dataclass(frozen=True)
class Change:
    """One difference between two checkpoints.

    Attributes:
        kind: ``added``/``removed``/``edited`` for messages, ``changed`` for a field.
        item: ``message`` or the field's name (``status``, ``total_tokens``, ``approvals``...).
        position_a: The message's index in the first history (None when added).
        position_b: Its index in the second history (None when removed).
        role: The message's role (the second's for an edit that changes it).
        before: A one-line preview of the old value.
        after: A one-line preview of the new value.
    """

    kind: ChangeKind
    item: str
    position_a: int | None = None
    position_b: int | None = None
    role: str | None = None
    before: str = ""
    after: str = ""


@dataclass(frozen=True)
class CheckpointDiff:
    """The differences between checkpoint ``a`` and checkpoint ``b``.

    ``str(diff)`` is a readable summary; :meth:`frame` the same as a DataFrame.
    It is falsy when the checkpoints hold the same history, status, usage and approvals.
    """

    a: str
    """``run_id@step_index`` of the first checkpoint."""
    b: str
    """``run_id@step_index`` of the second checkpoint."""
    common_prefix: int
    """How many leading messages the two histories share."""
    changes: tuple[Change, ...]

    def __bool__(self) -> bool:
        return bool(self.changes)

    def __str__(self) -> str:
        lines = [f"diff {self.a} -> {self.b}: {self.common_prefix} message(s) in common"]
        if not self.changes:
            lines.append("  no changes")
        marks = {"added": "+", "removed": "-", "edited": "~", "changed": "*"}
        for c in self.changes:
            if c.item == "message":
                where = c.position_b if c.position_b is not None else c.position_a
                head = f"  {marks[c.kind]} message {where} ({c.role})"
                if c.kind == "edited":
                    lines.append(f"{head}: {c.before!r}")
                    lines.append(f"      -> {c.after!r}")
                else:
                    lines.append(f"{head}: {(c.after or c.before)!r}")
            else:
                lines.append(f"  * {c.item}: {c.before} -> {c.after}")
        return "\n".join(lines)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # IPython's plain-text view (consoles, nbclient) shows the text

    def _repr_html_(self) -> str:
        return f"<pre>{html.escape(str(self))}</pre>"

    def frame(self) -> InspectFrame:
        """The changes as a DataFrame (columns as :class:`Change`'s fields)."""
        from ._views import frame_module

        module = frame_module()
        rows = [vars(c) for c in self.changes]
        return module.frame(  # type: ignore[no-any-return]
            [{"change": i, **row} for i, row in enumerate(rows)],
            columns=(
                "change",
                "kind",
                "item",
                "position_a",
                "position_b",
                "role",
                "before",
                "after",
            ),
            index="change",
            categories={"kind": ("added", "removed", "edited", "changed")},
            integers=("position_a", "position_b"),
        )


def diff(
    store: StoreLike,
    run_a: str,
    step_a: int | None = None,
    run_b: str | None = None,
    step_b: int | None = None,
) -> CheckpointDiff:
    """What changed from checkpoint ``(run_a, step_a)`` to ``(run_b, step_b)``.

    Messages are aligned (a longest-common-subsequence match, like ``difflib``):
    a message only in ``b`` is ``added``, only in ``a`` is ``removed``, and a
    replaced message at the same place is ``edited`` (also when its role or part
    types change). Status, finish reason, cumulative usage and pending
    approvals are compared as fields.

    Args:
        store: A store, or a store URL.
        run_a: The first run.
        step_a: Its step (default: its latest checkpoint).
        run_b: The second run (default: ``run_a``, to compare two steps of one run).
        step_b: Its step (default: its latest checkpoint).

    Raises:
        RunNotFoundError: A run is not in the store.
        CheckpointNotFoundError: A run has no checkpoint at the step given.
    """
    with opened(store) as source:
        a = checkpoint_at(source, run_a, step_a)
        b = checkpoint_at(source, run_b or run_a, step_b)
    return compare(a, b)


def compare(a: AgentCheckpoint, b: AgentCheckpoint) -> CheckpointDiff:
    """The diff of two checkpoints already loaded."""
    keys_a = [_key(m) for m in a.messages]
    keys_b = [_key(m) for m in b.messages]
    common = 0
    for x, y in zip(keys_a, keys_b, strict=False):
        if x != y:
            break
        common += 1
    changes: list[Change] = []
    matcher = difflib.SequenceMatcher(a=keys_a, b=keys_b, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        paired = min(i2 - i1, j2 - j1) if tag == "replace" else 0
        for k in range(paired):
            old, new = a.messages[i1 + k], b.messages[j1 + k]
            changes.append(
                Change("edited", "message", i1 + k, j1 + k, new.role, _show(old), _show(new))
            )
        for i in range(i1 + paired, i2):
            old = a.messages[i]
            changes.append(Change("removed", "message", i, None, old.role, before=_show(old)))
        for j in range(j1 + paired, j2):
            new = b.messages[j]
            changes.append(Change("added", "message", None, j, new.role, after=_show(new)))
    changes.extend(_field_changes(a, b))
    return CheckpointDiff(
        f"{a.run_id}@{a.step_index}", f"{b.run_id}@{b.step_index}", common, tuple(changes)
    )


def _key(message: Message) -> str:
    return message.model_dump_json()


def _show(message: Message) -> str:
    kinds = ", ".join(dict.fromkeys(p.type for p in message.content))
    calls = [f"{c.tool_name}({preview(c.args, 60)})" for c in message.tool_calls]
    results = [f"{r.tool_name} -> {preview(r.result, 60)}" for r in message.tool_results]
    body = " ".join([message.text, *calls, *results]).strip()
    return preview(f"[{kinds}] {body}" if body else f"[{kinds}]")


def _field_changes(a: AgentCheckpoint, b: AgentCheckpoint) -> list[Change]:
    changes: list[Change] = []
    fields: list[tuple[str, Any, Any]] = [
        ("status", a.status, b.status),
        ("finish_reason", a.finish_reason, b.finish_reason),
        ("step_index", a.step_index, b.step_index),
        ("input_tokens", a.usage.input_tokens, b.usage.input_tokens),
        ("output_tokens", a.usage.output_tokens, b.usage.output_tokens),
        ("total_tokens", a.usage.total_tokens, b.usage.total_tokens),
        ("cost", a.usage.cost, b.usage.cost),
    ]
    for name, old, new in fields:
        if old != new:
            changes.append(Change("changed", name, before=_plain(old), after=_plain(new)))
    pending_a = {r.approval_id: r for r in a.pending_approvals}
    pending_b = {r.approval_id: r for r in b.pending_approvals}
    if set(pending_a) != set(pending_b):
        changes.append(
            Change(
                "changed",
                "approvals",
                before=_approvals(pending_a.values()),
                after=_approvals(pending_b.values()),
            )
        )
    return changes


def _plain(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _approvals(requests: Any) -> str:
    shown = [f"{r.tool_name}({r.approval_id})" for r in requests]
    return ", ".join(shown) if shown else "none"
