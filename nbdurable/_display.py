"""Short text forms of run content for people (the CLI's lines, the notebook's output)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["call_text"]


def call_text(tool_name: str, args: Mapping[str, Any]) -> str:
    """A tool call as Python would write it: ``drop_table(name='stg_2024')``."""
    return f"{tool_name}({', '.join(f'{k}={v!r}' for k, v in args.items())})"
