"""The size of a checkpoint's JSON, counted by what is new since the last one."""

from __future__ import annotations

from collections.abc import Sequence

from ..history import History
from ..messages import Message
from ._checkpoint import AgentCheckpoint

__all__ = ["CheckpointSize"]


def _utf8_len(text: str) -> int:
    return len(text.encode("utf-8"))


class CheckpointSize:
    """UTF-8 bytes of ``checkpoint.model_dump_json()``, without encoding the whole history.

    A checkpoint's JSON is its fields around ``"messages":[...]``, whose items
    are each message's own JSON joined by commas. The messages' bytes of the
    last history measured are kept, so a history that extends it (``extends``
    is that very tuple, the loop's append-only promise) only encodes its tail.
    """

    def __init__(self) -> None:
        self._last: Sequence[Message] | None = None
        self._last_bytes = 0  # bytes of the last history's message JSON, commas excluded

    def measure(self, checkpoint: AgentCheckpoint, extends: Sequence[Message] | None = None) -> int:
        """The checkpoint's JSON size in UTF-8 bytes."""
        messages = checkpoint.messages
        last = self._last
        if last is not None and (
            (extends is not None and extends is last)
            or (isinstance(messages, History) and messages.extends(last))
        ):
            total = self._last_bytes + sum(
                _utf8_len(m.model_dump_json()) for m in messages[len(last) :]
            )
        else:
            total = sum(_utf8_len(m.model_dump_json()) for m in messages)
        self._last, self._last_bytes = messages, total
        head = _utf8_len(checkpoint.model_copy(update={"messages": ()}).model_dump_json())
        return head + total + max(len(messages) - 1, 0)
