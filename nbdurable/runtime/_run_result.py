"""What a finished run gives back: its result, or the error of a run that did not complete."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._errors import NbdurableError
from ..history import History
from ..loop._options import text_head, usage_line
from ..messages import Usage
from ..runs import RuntimeRun

__all__ = ["RunFailedError", "RunResult"]


class RunFailedError(NbdurableError):
    """The run ended failed or cancelled.

    Attributes:
        run_id: The run.
        state: ``failed`` or ``cancelled``.
        reason: Why (``timeout``, ``model_retries_exhausted``, ``limit_exceeded``, ...).
        error: The last error, when there was one.
    """

    def __init__(self, record: RuntimeRun) -> None:
        self.run_id = record.run_id
        self.state = record.state
        self.reason = record.reason
        self.error = record.error
        detail = f" ({record.error})" if record.error else ""
        super().__init__(f"run {record.run_id!r} {record.state}: {record.reason}{detail}")


@dataclass(frozen=True, repr=False)
class RunResult:
    """A completed run's outcome.

    Attributes:
        run_id: The run.
        text: The final text.
        messages: The final history.
        usage: The whole run's cumulative usage.
        output: With the agent's ``output_type``, the final answer validated into
            it (None without one, or when this process has no registration of the
            run's agent version).
    """

    run_id: str
    text: str
    messages: History
    usage: Usage
    output: Any = None

    def __repr__(self) -> str:
        # short whatever the run's length: asyncio's runner reprs a finished task's result
        return (
            f"RunResult(run_id={self.run_id!r}, text={text_head(self.text)}, "
            f"messages={len(self.messages)}, usage={usage_line(self.usage)})"
        )
