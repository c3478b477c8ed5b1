"""Tool calls forming in a run widget: their arguments as the model streams them.

A step's ``forming_calls`` lists the calls its current model attempt is writing,
``{"tool_call_id", "tool_name", "args_text"}`` with the JSON arguments so far;
the view draws each beside the step's text until the attempt completes and the
complete call takes its place. Every step carries the key (empty when nothing
forms), so a step delta that empties it reaches the view.
"""

from __future__ import annotations

from typing import Any

from ...events._fold import RunView

__all__ = ["add_forming_calls"]


def add_forming_calls(steps: list[dict[str, Any]], view: RunView) -> None:
    """Give each step dict of ``view``'s synced state its ``forming_calls``."""
    for step in steps:
        found = view.steps.get(step["index"])
        forming = found.forming_calls.values() if found is not None else ()
        step["forming_calls"] = [dict(call) for call in forming]
