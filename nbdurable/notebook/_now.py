"""Finish a coroutine inside a synchronous magic, on the kernel's running loop.

A magic is a plain function called from the kernel's event loop, so it can
neither ``await`` nor start the loop again (``asyncio.run`` fails in a kernel).
The runtime's steering calls (``submit``, ``get_run``, ``fork``, the ``Run``
verdicts) are coroutines that never suspend on the bundled stores, whose methods
are synchronous: :func:`finish_now` runs such a coroutine to its end at once.
"""

from __future__ import annotations

from collections.abc import Coroutine
from typing import Any, TypeVar

from .._errors import NbdurableError

__all__ = ["finish_now"]

T = TypeVar("T")


def finish_now(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` to its end without an event loop turn; return its value.

    Raises:
        NbdurableError: The coroutine waited for something (a store with async
            methods): it is closed, and the magic says to use ``await`` in Python.
    """
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise NbdurableError(
        "this store answers asynchronously, which a magic cannot wait for: use the "
        "Python API with await (nbdurable.notebook.session().runtime)"
    )
