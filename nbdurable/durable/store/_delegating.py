"""A run store composed from a part: every :class:`RunStore` method passed to it."""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any, Concatenate, ParamSpec, TypeVar

from ._runs import RunStore

__all__ = ["DelegatingRunStore", "passed_on"]

P = ParamSpec("P")
R = TypeVar("R")


def passed_on(
    declared: Callable[Concatenate[Any, P], R], part: str
) -> Callable[Concatenate[Any, P], R]:
    """A method that makes the ``declared`` call (a base class's method) on the ``part`` attribute.

    For a store composed from parts: ``rt_get = passed_on(RunStore.rt_get, "run_records")``
    is typed, named and documented as the method it passes on.
    """
    name = declared.__name__
    bound = operator.attrgetter(f"{part}.{name}")

    def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> R:
        answer: R = bound(self)(*args, **kwargs)
        return answer

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"See :meth:`{declared.__qualname__}`."
    return method


class DelegatingRunStore(RunStore):
    """A :class:`RunStore` whose run records another object keeps: :attr:`run_records`.

    The bundled SQL stores are compositions: their run-record part is a complete
    :class:`RunStore` of its own, sharing the store's connection, and the store
    passes every run-record call to it here (an object standing in front of a
    store may do the same). Override a method to do more than pass it on.
    """

    run_records: RunStore
    """The part that keeps the run records (set by the subclass's ``__init__``)."""

    rt_insert = passed_on(RunStore.rt_insert, "run_records")
    rt_insert_many = passed_on(RunStore.rt_insert_many, "run_records")
    rt_get = passed_on(RunStore.rt_get, "run_records")
    rt_graph = passed_on(RunStore.rt_graph, "run_records")
    rt_list = passed_on(RunStore.rt_list, "run_records")
    rt_session = passed_on(RunStore.rt_session, "run_records")
    rt_update = passed_on(RunStore.rt_update, "run_records")
    rt_change = passed_on(RunStore.rt_change, "run_records")
    rt_claim = passed_on(RunStore.rt_claim, "run_records")
    rt_claim_many = passed_on(RunStore.rt_claim_many, "run_records")
    rt_renew = passed_on(RunStore.rt_renew, "run_records")
    rt_intent = passed_on(RunStore.rt_intent, "run_records")
    rt_intents = passed_on(RunStore.rt_intents, "run_records")
    rt_journal = passed_on(RunStore.rt_journal, "run_records")
    rt_journaled = passed_on(RunStore.rt_journaled, "run_records")
    rt_commit = passed_on(RunStore.rt_commit, "run_records")
    ping = passed_on(RunStore.ping, "run_records")
