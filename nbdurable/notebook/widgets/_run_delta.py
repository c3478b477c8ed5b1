"""What changed in a run view's steps since the front-end last heard: the run widget's deltas.

The kernel sends a view appended text and changed steps only, as custom messages
numbered in sequence (:class:`~._messages.StepsDelta`); a view that renders
(late, again, or a second view of the same widget) asks for a complete snapshot
and is answered with one. A run's text grows by appends, so a long stream costs
about its own size once, not once per update.
"""

from __future__ import annotations

from typing import Any

from ._messages import StepsDelta, StepsState

__all__ = ["StepDeltas", "step_patch"]


def step_patch(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """The fields of step ``new`` that differ from ``old`` (text that grew as ``append``)."""
    patch: dict[str, Any] = {"index": new["index"]}
    for key, value in new.items():
        if key == "index" or old.get(key) == value:
            continue
        before = old.get("text")
        if key == "text" and isinstance(before, str) and value.startswith(before):
            patch["append"] = value[len(before) :]
        else:
            patch[key] = value
    return patch


class StepDeltas:
    """The steps the front-end has, and the sequence number of the last message it got.

    Attributes:
        seq: The number of the last delta sent (0 before any).
        steps: The steps as of that delta, by index.
    """

    def __init__(self) -> None:
        self.seq = 0
        self.steps: dict[int, dict[str, Any]] = {}

    def delta(self, steps: list[dict[str, Any]]) -> StepsDelta | None:
        """The message that takes the front-end to ``steps``, or None when nothing changed."""
        current = {step["index"]: step for step in steps}
        changed = []
        for index, step in current.items():
            old = self.steps.get(index)
            if old is None:
                changed.append(step)
            elif old != step:
                changed.append(step_patch(old, step))
        removed = [index for index in self.steps if index not in current]
        self.steps = current
        if not changed and not removed:
            return None
        self.seq += 1
        message = StepsDelta(type="steps", seq=self.seq, changed=changed)
        if removed:
            message["removed"] = removed
        return message

    def snapshot(self) -> StepsState:
        """Every step as of the last delta, with its sequence number."""
        return StepsState(seq=self.seq, steps=[self.steps[i] for i in sorted(self.steps)])
