"""Blocking twins of the loop's async entry points, for code that cannot ``await``."""

from __future__ import annotations

from .._sync import sync_of
from ._generate import generate_text

__all__ = ["generate_text_sync"]

generate_text_sync = sync_of(generate_text)
generate_text_sync.__name__ = generate_text_sync.__qualname__ = "generate_text_sync"
generate_text_sync.__doc__ = """Run the agent loop to its end or suspension, blocking.

Same arguments as :func:`~nbdurable.generate_text` and the same :class:`GenerateTextResult`.

Works in a script, in IPython without autoawait, in a notebook cell and in a
widget callback (see :func:`nbdurable.run_sync`). A run that suspends on an
approval returns at once with its pending approvals, as ``generate_text`` does.
"""
