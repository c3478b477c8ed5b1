"""The size of a checkpoint's JSON, counted by what is new since the last one."""

from __future__ import annotations

import operator
import threading
from collections import deque
from collections.abc import Sequence

from ..history import History
from ..messages import Message
from ._checkpoint import AgentCheckpoint

__all__ = ["CheckpointSize", "note_loaded"]

# Histories a store just loaded, with their messages' JSON bytes (the stored
# texts' length): a runtime resuming a long run measures its first checkpoint
# without encoding 10,000 messages again (issue 42). A few, newest last.
_LOADED: deque[tuple[Sequence[Message], int]] = deque(maxlen=4)
_LOADED_LOCK = threading.Lock()


def note_loaded(messages: Sequence[Message], json_bytes: int) -> None:
    """Note that a store loaded ``messages`` from JSON of ``json_bytes`` UTF-8 bytes.

    The bytes of the messages' JSON as ``model_dump_json`` writes them, all
    together, commas excluded.
    """
    with _LOADED_LOCK:
        _LOADED.append((messages, json_bytes))


def _loaded_bytes(history: Sequence[Message]) -> int | None:
    """The noted bytes of a loaded history whose very messages ``history`` holds, once."""
    with _LOADED_LOCK:
        for i, (messages, json_bytes) in enumerate(_LOADED):
            if len(messages) == len(history) and all(map(operator.is_, messages, history)):
                del _LOADED[i]
                return json_bytes
    return None


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
        if last is None and extends is not None:
            # The first save of a leg that started from a loaded checkpoint.
            known = _loaded_bytes(extends)
            if known is not None:
                last, self._last_bytes = extends, known
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
