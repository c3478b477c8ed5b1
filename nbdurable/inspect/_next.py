"""What moves a run on, phrased for where the reader is: Python, a notebook, a terminal.

``explain`` names next steps; someone in a notebook after a kernel restart has no
``run`` variable but has ``%durable``, someone in a shell has ``nbdurable runs``.
"""

from __future__ import annotations

import sys
from typing import Any, Literal, get_args

from .._errors import ConfigurationError
from ..runs import RuntimeRun

__all__ = ["CONTEXTS", "Context", "NextSteps", "check_context", "here", "magics_loaded"]

Context = Literal["api", "notebook", "terminal"]
"""Where the reader is: ``api`` (Python code), ``notebook`` (magics), ``terminal`` (the CLI)."""

CONTEXTS: tuple[str, ...] = get_args(Context)


def check_context(context: str) -> Context:
    """``context`` when it is one of :data:`CONTEXTS`.

    Raises:
        ConfigurationError: Another value.
    """
    if context not in CONTEXTS:
        raise ConfigurationError(
            f"context must be one of {', '.join(map(repr, CONTEXTS))}, not {context!r}"
        )
    return context  # type: ignore[return-value]


def _kernel_shell() -> Any:
    """The IPython shell of a Jupyter kernel this process is, or None.

    Looked up without importing IPython: a process that never imported it is
    no notebook.
    """
    ipython = sys.modules.get("IPython")
    shell = ipython.get_ipython() if ipython is not None else None
    # a kernel's shell (ipykernel's ZMQInteractiveShell), not a terminal IPython
    return shell if shell is not None and "IPKernelApp" in shell.config else None


def here() -> Context:
    """Where this process reads an explanation: ``notebook`` in a Jupyter kernel, else ``api``."""
    return "notebook" if _kernel_shell() is not None else "api"


def magics_loaded() -> bool:
    """Whether ``%durable`` exists in this kernel (``%load_ext nbdurable`` ran)."""
    shell = _kernel_shell()
    return shell is not None and "durable" in shell.magics_manager.magics.get("line", {})


class NextSteps:
    """The commands that move one run on, in the reader's context.

    Args:
        context: ``api``, ``notebook`` or ``terminal``.
        run_id: The run.
    """

    def __init__(self, context: Context, run_id: str) -> None:
        self.context = context
        self.run_id = run_id

    def _handle(self) -> list[str]:
        # in Python the handle comes first: after a restart no `run` variable exists
        return [f"run = await runtime.get_run({self.run_id!r})"] if self.context == "api" else []

    def answer_approvals(self) -> tuple[str, ...]:
        """Approve or deny the approvals the run waits for."""
        run = self.run_id
        if self.context == "notebook":
            return (
                f"%durable show {run}  (Approve / Deny on its card)",
                f"%durable approve {run} [APPROVAL_ID]",
                f'%durable approve {run} [APPROVAL_ID] --deny --reason "..."',
            )
        if self.context == "terminal":
            return (
                f"nbdurable runs approve {run} [APPROVAL_ID]",
                f'nbdurable runs deny {run} [APPROVAL_ID] --reason "..."',
            )
        return (
            *self._handle(),
            "await run.approve(approval_id)  or  await run.deny(approval_id, reason=...)",
        )

    def interrupted_tool(self, *, ran_late: bool = False, usable: bool = False) -> tuple[str, ...]:
        """Run an interrupted ``manual`` tool call again, or settle it as an error.

        ``ran_late``: the call already ran (or was still running) on an owner
        that had lost the run (see :mod:`nbdurable.runs`): the
        front ends then run it again only with ``--rerun``. ``usable``: one of
        those finished with a result, and settling the call with it comes first.
        """
        run = self.run_id
        again = "runs the interrupted tool again"
        if usable:
            again += ", a second time"
        elif ran_late:
            again += ", though it may have run already"
        rerun = " --rerun" if ran_late else ""
        if self.context == "notebook":
            use = f"%durable retry {run} --use-late-result  (settles it with the late result)"
            return (
                *((use,) if usable else ()),
                f"%durable retry {run}{rerun}  ({again})",
                f'%durable settle {run} --reason "..."  (settles it as an error the model sees)',
            )
        if self.context == "terminal":
            use = f"nbdurable runs retry {run} --use-late-result  (settles it with the late result)"
            return (
                *((use,) if usable else ()),
                f"nbdurable runs retry {run}{rerun} --agents module:attr  ({again}, here)",
                f'nbdurable runs deny {run} --reason "..."  (settles it as an error the '
                "model sees)",
            )
        use = "await run.use_late_result()  (settles it with the late result)"
        return (
            *self._handle(),
            *((use,) if usable else ()),
            f"await run.retry({'rerun=True' if ran_late else ''})  ({again})",
            "await run.deny(reason=...)  (settles it as an error the model sees)",
        )

    def retry(self, run_id: str | None = None, *, then: str = "") -> tuple[str, ...]:
        """Let a failed run (``run_id``, default this one) go on."""
        target = run_id or self.run_id
        after = f"  ({then})" if then else ""
        if self.context == "notebook":
            return (f"%durable retry {target}{after}",)
        if self.context == "terminal":
            return (f"nbdurable runs retry {target}{after}",)
        handle = [f"run = await runtime.get_run({target!r})"]
        return (*handle, f"await run.retry(){after}")

    def retries_by_itself(self) -> tuple[str, ...]:
        """A ``retry_wait`` run: nothing to do; how to stop it."""
        if self.context == "notebook":
            stop = f"%durable cancel {self.run_id} stops it"
        elif self.context == "terminal":
            stop = f"nbdurable runs cancel {self.run_id} stops it"
        else:
            stop = "await run.cancel() stops it"
        return (f"a runtime serving its agent retries it then; {stop}",)

    def cancel(self, then: str) -> str:
        """Cancel the run (``then``: what to do after, in words)."""
        if self.context == "notebook":
            return f"%durable cancel {self.run_id}  ({then})"
        if self.context == "terminal":
            return f"nbdurable runs cancel {self.run_id}  ({then})"
        return f"await run.cancel()  ({then})"

    def execute(self, record: RuntimeRun) -> tuple[str, ...]:
        """A run that needs a runtime serving its agent (pending, or its owner is gone)."""
        agent = f"agent {record.agent_id!r} version {record.agent_version!r}"
        if self.context == "notebook":
            return (f"run the cell defining {agent}, then %durable resume {self.run_id}",)
        if self.context == "terminal":
            return (
                f"nbdurable runs resume {self.run_id} --agents module:attr  (serving {agent})",
                f"nbdurable worker --store URL --agents module:attr  (serving {agent})",
            )
        return (
            f"open a DurableRuntime on this store with {agent}: it takes the run "
            f"(await runtime.get_run({self.run_id!r}) to follow it)",
        )
