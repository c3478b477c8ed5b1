"""An immutable message history that shares its prefix with the history it grew from.

A run's history only grows by appends, one step at a time. As a tuple, every
step copied the whole history (and the garbage collector traversed each new
copy), so a step cost more the longer the run. A :class:`History` is a view of
the first ``len`` messages of an append-only backing list: appending to the
newest view of a list appends in place and returns a longer view of the same
list; appending to an older view (a fork, an edit) copies. No view ever
changes: the backing list only grows past the lengths of the views it has.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Sequence
from itertools import islice
from typing import Any, overload

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from .messages import Message

__all__ = ["History"]

_REPR_LIMIT = 4


class _Backing:
    """The append-only list views share, and the lock that makes appends atomic."""

    __slots__ = ("items", "lock")

    def __init__(self, items: list[Message]) -> None:
        self.items = items
        self.lock = threading.Lock()


class History(Sequence[Message]):
    """An immutable sequence of messages that shares its prefix (a run's history).

    It is what ``messages`` holds in results, checkpoints, model requests and
    step contexts, and behaves like the tuple of its messages: ``len``,
    indexing (negative too), iteration, ``in``, ``==`` and ``hash`` (a history
    equals the tuple of the same messages, and hashes like it; like a tuple it
    is not equal to a list), ``+`` with a tuple or another history, and pickling.
    Slicing returns a tuple. :meth:`appended` is the cheap way to grow it:
    appending to the newest history built on a shared list costs only the
    new messages.

    Pydantic fields typed ``History`` accept a tuple or a list of messages (or
    their dicts, or JSON) and serialize it exactly as a tuple of messages.

    Args:
        messages: The messages, in order (each a :class:`~nbdurable.Message`).

    Raises:
        TypeError: An item is not a Message.
    """

    __slots__ = ("_backing", "_hash", "_len")

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        items = list(messages)
        _check(items)
        self._backing = _Backing(items)
        self._len = len(items)
        self._hash: int | None = None

    @classmethod
    def of(cls, messages: Iterable[Message]) -> History:
        """``messages`` as a History: the same object when it already is one."""
        if isinstance(messages, History):
            return messages
        return cls(messages)

    @classmethod
    def _view(cls, backing: _Backing, length: int) -> History:
        view = cls.__new__(cls)
        view._backing = backing
        view._len = length
        view._hash = None
        return view

    # -- growing ---------------------------------------------------------------

    def appended(self, *messages: Message) -> History:
        """A history of these messages then ``messages`` (this one is unchanged).

        Amortized O(len(messages)) when this is the longest history on its
        backing list; otherwise the messages are copied into a new list (a fork).

        Raises:
            TypeError: A message is not a Message.
        """
        _check(messages)
        return self._grown(messages)

    def _grown(self, messages: Sequence[Message]) -> History:
        backing = self._backing
        with backing.lock:
            if len(backing.items) == self._len:
                backing.items.extend(messages)
                return History._view(backing, self._len + len(messages))
        items = self._backing.items[: self._len]
        items.extend(messages)
        return History._view(_Backing(items), len(items))

    def extends(self, other: Sequence[Message]) -> bool:
        """Whether this history begins with the very messages of ``other``, known without a scan.

        True when ``other`` is a History on the same backing list and no longer
        than this one (the histories a run appends to); False says nothing.
        """
        return (
            isinstance(other, History)
            and other._backing is self._backing
            and other._len <= self._len
        )

    # -- the sequence ----------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> Message: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[Message, ...]: ...

    def __getitem__(self, index: int | slice) -> Message | tuple[Message, ...]:
        if isinstance(index, slice):
            start, stop, step = index.indices(self._len)
            if step == 1:
                return tuple(self._backing.items[start:stop])
            items = self._backing.items
            return tuple(items[i] for i in range(start, stop, step))
        n = self._len
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("history index out of range")
        return self._backing.items[index]

    def __iter__(self) -> Iterator[Message]:
        return islice(self._backing.items, self._len)

    def __reversed__(self) -> Iterator[Message]:
        items = self._backing.items
        return (items[i] for i in range(self._len - 1, -1, -1))

    def __contains__(self, value: object) -> bool:
        return any(m is value or m == value for m in self)

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """The first index of ``value`` (between ``start`` and ``stop``), like ``tuple.index``."""
        return self.as_tuple().index(value, start, self._len if stop is None else stop)

    def count(self, value: Any) -> int:
        """How many messages equal ``value``."""
        return sum(1 for m in self if m is value or m == value)

    def as_tuple(self) -> tuple[Message, ...]:
        """The messages as a tuple (a copy)."""
        whole = tuple(self._backing.items)  # another thread may append meanwhile
        return whole if len(whole) == self._len else whole[: self._len]

    # -- what a tuple does -----------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, History):
            if other._len != self._len:
                return False
            if other._backing is self._backing:
                return True
            return all(a is b or a == b for a, b in zip(self, other, strict=True))
        if isinstance(other, tuple):
            return len(other) == self._len and all(
                a is b or a == b for a, b in zip(self, other, strict=True)
            )
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(self.as_tuple())  # what the equal tuple hashes to
        return self._hash

    def __add__(self, other: object) -> History:
        if isinstance(other, (tuple, History)):
            added = tuple(other)
            _check(added)
            return self._grown(added)
        return NotImplemented

    def __radd__(self, other: object) -> History:
        if isinstance(other, tuple):
            return History((*other, *self))
        return NotImplemented

    def __mul__(self, count: int) -> tuple[Message, ...]:
        return self.as_tuple() * count

    def __bool__(self) -> bool:
        return self._len > 0

    def __repr__(self) -> str:
        # Cheap at any length: a long history shows its size and its last messages.
        if self._len <= _REPR_LIMIT:
            return f"History({self.as_tuple()!r})"
        last = ", ".join(repr(m) for m in self._backing.items[self._len - 2 : self._len])
        return f"History(<{self._len:,} messages>, ..., {last})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (History, (self.as_tuple(),))

    def __copy__(self) -> History:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> History:
        import copy

        return History(copy.deepcopy(self.as_tuple(), memo))

    # -- pydantic --------------------------------------------------------------

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: Any, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        items = handler.generate_schema(tuple[Message, ...])
        from_items = core_schema.no_info_after_validator_function(cls._of_validated, items)
        return core_schema.json_or_python_schema(
            json_schema=from_items,
            # A History holds Messages only (checked when built): taken as is, no copy.
            python_schema=core_schema.union_schema(
                [core_schema.is_instance_schema(cls), from_items]
            ),
            # Serialized as the tuple it replaces: the same dicts and the same JSON bytes.
            serialization=core_schema.plain_serializer_function_ser_schema(
                _as_tuple, return_schema=items
            ),
        )

    @classmethod
    def _of_validated(cls, messages: tuple[Message, ...]) -> History:
        return cls._view(_Backing(list(messages)), len(messages))


def _as_tuple(messages: Iterable[Message]) -> tuple[Message, ...]:
    if isinstance(messages, History):
        return messages.as_tuple()
    return tuple(messages)


def _check(items: Sequence[Any]) -> None:
    for item in items:
        if not isinstance(item, Message):
            raise TypeError(f"a History holds Messages, not {type(item).__name__}")
