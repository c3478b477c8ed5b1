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
from typing import Any, Generic, Self, TypeVar, overload

from pydantic import GetCoreSchemaHandler
from pydantic_core import core_schema

from .messages import Message

__all__ = ["History", "SharedSequence"]

T = TypeVar("T")

_REPR_LIMIT = 4


class _Backing(Generic[T]):
    """The append-only list views share, and the lock that makes appends atomic."""

    __slots__ = ("items", "lock")

    def __init__(self, items: list[T]) -> None:
        self.items = items
        self.lock = threading.Lock()


class SharedSequence(Sequence[T]):
    """An immutable sequence that shares its items with the sequences it grew from.

    A view of the first ``len`` items of an append-only list. It behaves like
    the tuple of its items: ``len``, indexing (negative too), iteration, ``in``,
    ``==`` and ``hash`` (equal to the tuple of the same items and hashed like
    it; like a tuple, not equal to a list), ``+`` with a tuple or another
    shared sequence, and pickling. Slicing returns a tuple. :meth:`appended`
    grows it: appending to the newest view of a list appends in place (only
    the new items cost); appending to an older one copies (a fork). No view
    ever changes.

    Args:
        items: The items, in order.
    """

    __slots__ = ("_backing", "_hash", "_len")

    def __init__(self, items: Iterable[T] = ()) -> None:
        listed = list(items)
        self._check(listed)
        self._backing = _Backing(listed)
        self._len = len(listed)
        self._hash: int | None = None

    @classmethod
    def _view(cls, backing: _Backing[T], length: int) -> Self:
        view = cls.__new__(cls)
        view._backing = backing
        view._len = length
        view._hash = None
        return view

    @classmethod
    def _check(cls, items: Sequence[Any]) -> None:
        """Refuse items this kind of sequence does not hold (any item here)."""

    # -- growing ---------------------------------------------------------------

    def appended(self, *items: T) -> Self:
        """A sequence of these items then ``items`` (this one is unchanged).

        Amortized O(len(items)) when this is the longest view of its backing
        list; otherwise the items are copied into a new list (a fork).

        Raises:
            TypeError: An item this kind of sequence does not hold.
        """
        self._check(items)
        return self._grown(items)

    def _grown(self, items: Sequence[T]) -> Self:
        backing = self._backing
        with backing.lock:
            if len(backing.items) == self._len:
                backing.items.extend(items)
                return self._view(backing, self._len + len(items))
        copied = backing.items[: self._len]
        copied.extend(items)
        return self._view(_Backing(copied), len(copied))

    def extends(self, other: Sequence[T]) -> bool:
        """Whether this sequence begins with the very items of ``other``, known without a scan.

        True when ``other`` is a view of the same backing list and no longer
        than this one (what a run appends to); False says nothing.
        """
        return (
            isinstance(other, SharedSequence)
            and other._backing is self._backing
            and other._len <= self._len
        )

    # -- the sequence ----------------------------------------------------------

    def __len__(self) -> int:
        return self._len

    @overload
    def __getitem__(self, index: int) -> T: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[T, ...]: ...

    def __getitem__(self, index: int | slice) -> T | tuple[T, ...]:
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
            raise IndexError(f"{type(self).__name__} index out of range")
        return self._backing.items[index]

    def __iter__(self) -> Iterator[T]:
        return islice(self._backing.items, self._len)

    def __reversed__(self) -> Iterator[T]:
        items = self._backing.items
        return (items[i] for i in range(self._len - 1, -1, -1))

    def __contains__(self, value: object) -> bool:
        return any(m is value or m == value for m in self)

    def index(self, value: Any, start: int = 0, stop: int | None = None) -> int:
        """The first index of ``value`` (between ``start`` and ``stop``), like ``tuple.index``."""
        return self.as_tuple().index(value, start, self._len if stop is None else stop)

    def count(self, value: Any) -> int:
        """How many items equal ``value``."""
        return sum(1 for m in self if m is value or m == value)

    def as_tuple(self) -> tuple[T, ...]:
        """The items as a tuple (a copy)."""
        whole = tuple(self._backing.items)  # another thread may append meanwhile
        return whole if len(whole) == self._len else whole[: self._len]

    # -- what a tuple does -----------------------------------------------------

    def __eq__(self, other: object) -> bool:
        if isinstance(other, SharedSequence):
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

    def __add__(self, other: object) -> Self:
        if isinstance(other, (tuple, SharedSequence)):
            added = tuple(other)
            self._check(added)
            return self._grown(added)
        return NotImplemented

    def __radd__(self, other: object) -> Self:
        if isinstance(other, tuple):
            return type(self)((*other, *self))
        return NotImplemented

    def __mul__(self, count: int) -> tuple[T, ...]:
        return self.as_tuple() * count

    def __bool__(self) -> bool:
        return self._len > 0

    def __repr__(self) -> str:
        # Cheap at any length: a long sequence shows its size and its last items.
        name = type(self).__name__
        if self._len <= _REPR_LIMIT:
            return f"{name}({self.as_tuple()!r})"
        last = ", ".join(repr(m) for m in self._backing.items[self._len - 2 : self._len])
        return f"{name}(<{self._len:,} items>, ..., {last})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.as_tuple(),))

    def __copy__(self) -> Self:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Self:
        import copy

        return type(self)(copy.deepcopy(self.as_tuple(), memo))


class History(SharedSequence[Message]):
    """An immutable sequence of messages that shares its prefix (a run's history).

    It is what ``messages`` holds in results, checkpoints, model requests and
    step contexts, and behaves like the tuple of its messages: ``len``,
    indexing (negative too), iteration, ``in``, ``==`` and ``hash`` (a history
    equals the tuple of the same messages, and hashes like it; like a tuple it
    is not equal to a list), ``+`` with a tuple or another history, and pickling.
    Slicing returns a tuple. :meth:`appended` is the cheap way to grow it:
    appending to the newest history built on a shared list costs only the
    new messages; appending to an older one (a fork, an edit) copies.

    Pydantic fields typed ``History`` accept a tuple or a list of messages (or
    their dicts, or JSON) and serialize it exactly as a tuple of messages.

    Args:
        messages: The messages, in order (each a :class:`~nbdurable.Message`).

    Raises:
        TypeError: An item is not a Message.
    """

    __slots__ = ()

    def __init__(self, messages: Iterable[Message] = ()) -> None:
        super().__init__(messages)

    @classmethod
    def of(cls, messages: Iterable[Message]) -> History:
        """``messages`` as a History: the same object when it already is one."""
        if isinstance(messages, History):
            return messages
        return cls(messages)

    @classmethod
    def _check(cls, items: Sequence[Any]) -> None:
        for item in items:
            if not isinstance(item, Message):
                raise TypeError(f"a History holds Messages, not {type(item).__name__}")

    def __repr__(self) -> str:
        return super().__repr__().replace(" items>", " messages>", 1)

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
