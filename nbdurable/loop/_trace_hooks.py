"""What a trace says about a leg: the driver's tracing hooks (see :mod:`nbdurable.tracing`)."""

from __future__ import annotations

from typing import Any

from ._options import LoopOptions

__all__ = ["TraceHooks"]


class TraceHooks:
    """The attributes and parent a driver gives its leg's spans.

    :class:`~nbdurable.loop._driver.Driver` inherits these defaults; a durable
    driver (the runtime's, Temporal's) overrides them to name the run, its
    step and attempt, and to join the trace stored with the run.
    """

    options: LoopOptions

    def trace_agent_name(self) -> str | None:
        """The agent's name on the leg's ``invoke_agent`` span."""
        return self.options.agent_path[-1] if self.options.agent_path else None

    def trace_attributes(self) -> dict[str, Any]:
        """Extra attributes of the leg's span."""
        return {}

    def trace_model_attributes(self) -> dict[str, Any]:
        """Extra attributes of a ``chat`` span."""
        return {}

    def trace_tool_attributes(self, tool_name: str) -> dict[str, Any]:
        """Extra attributes of an ``execute_tool`` span."""
        return {}

    def trace_parent(self) -> dict[str, str] | None:
        """The stored W3C trace context the leg joins (None: the caller's current span)."""
        return None

    def trace_leg_started(self, traceparent: str) -> None:
        """The leg's span started (a durable owner stores it for the next leg's link)."""
