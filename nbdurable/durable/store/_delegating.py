"""A run store composed from a part: every :class:`RunStore` method passed to it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Concatenate, ParamSpec, TypeVar

from ._runs import RunStore

__all__ = ["DelegatingRunStore"]

P = ParamSpec("P")
R = TypeVar("R")


def _passed_on(
    declared: Callable[Concatenate[RunStore, P], R],
) -> Callable[Concatenate[DelegatingRunStore, P], R]:
    """The method of :class:`DelegatingRunStore` that makes the ``declared`` call on its part."""
    name = declared.__name__

    def method(self: DelegatingRunStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        answer: R = getattr(self.run_records, name)(*args, **kwargs)
        return answer

    method.__name__ = name
    method.__qualname__ = f"DelegatingRunStore.{name}"
    method.__doc__ = f"See :meth:`RunStore.{name}`."
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

    rt_insert = _passed_on(RunStore.rt_insert)
    rt_insert_many = _passed_on(RunStore.rt_insert_many)
    rt_get = _passed_on(RunStore.rt_get)
    rt_graph = _passed_on(RunStore.rt_graph)
    rt_list = _passed_on(RunStore.rt_list)
    rt_session = _passed_on(RunStore.rt_session)
    rt_update = _passed_on(RunStore.rt_update)
    rt_change = _passed_on(RunStore.rt_change)
    rt_claim = _passed_on(RunStore.rt_claim)
    rt_claim_many = _passed_on(RunStore.rt_claim_many)
    rt_renew = _passed_on(RunStore.rt_renew)
    rt_intent = _passed_on(RunStore.rt_intent)
    rt_intents = _passed_on(RunStore.rt_intents)
    rt_journal = _passed_on(RunStore.rt_journal)
    rt_journaled = _passed_on(RunStore.rt_journaled)
    rt_commit = _passed_on(RunStore.rt_commit)
    ping = _passed_on(RunStore.ping)
