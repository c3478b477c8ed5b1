"""``%%agent`` and ``%durable``: durable runs from notebook cells.

Every mistake (wrong arguments, an unknown run, any ``NbdurableError``) prints a
short message, never a traceback.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from IPython.core.magic import Magics, line_cell_magic, line_magic, magics_class

from .._errors import ConfigurationError, NbdurableError
from ..durable.store import RunStore
from ..runs import UNFINISHED_STATES
from ..runtime._run import Run
from . import _views
from ._agents import agent_named
from ._cell_runs import cell_key, cell_request_id, front_end_cell_id, unfinished_run_of
from ._commands import HANDLERS
from ._session import NotebookSession, session
from ._usage import AGENT_PARSER, DURABLE_PARSER, HelpShown, UsageError, parse

__all__ = ["DurableMagics"]


def _guarded(action: Callable[[], Any]) -> Any:
    """Run a magic's action; mistakes become one short message on stderr."""
    try:
        return action()
    except HelpShown:
        return None
    except UsageError as exc:
        print(exc, file=sys.stderr)
    except NbdurableError as exc:
        print(f"nbdurable: {exc}", file=sys.stderr)
    return None


@magics_class
class DurableMagics(Magics):
    """The magics ``%load_ext nbdurable`` adds."""

    def _namespace(self) -> dict[str, Any]:
        """The notebook's variables."""
        assert self.shell is not None  # registered magics always have their shell
        namespace: dict[str, Any] = self.shell.user_ns
        return namespace

    @line_cell_magic  # type: ignore[untyped-decorator,unused-ignore]  # untyped before IPython 9
    def agent(self, line: str, cell: str | None = None) -> None:
        """%%agent AGENT [--run-id ID] [--as VAR] [--session S] [--max-steps N] [--enqueue].

        The cell's text is the prompt of a run of AGENT (an ``nbdurable.Agent``
        variable), submitted to this kernel's runtime; the live run widget shows
        it and the cell returns at once. ``%agent --help`` says more.
        """
        _guarded(lambda: self._agent(line, cell))

    def _agent(self, line: str, cell: str | None) -> None:
        args = parse(AGENT_PARSER, line)
        if cell is None:
            raise UsageError(
                f"{AGENT_PARSER.format_usage().rstrip()}\n"
                "%%agent is a cell magic: the lines below it are the prompt"
            )
        prompt = cell.strip()
        if not prompt:
            raise ConfigurationError("the cell's text is the prompt, and it is empty")
        notebook = session()
        agent = agent_named(self._namespace(), args.agent)
        run = self._reattached(notebook, args) if not args.new else None
        if run is not None:
            notebook.register(agent)  # the run goes on in this kernel
        else:
            key = cell_key(
                agent.id,
                str(agent.version),
                prompt,
                args.session,
                front_end_cell_id(self.shell),
            )
            found = None if args.new or args.run_id else unfinished_run_of(notebook.store, key)
            if found is not None:
                notebook.register(agent)  # the run goes on in this kernel
                run = notebook.run(found.run_id)
                print(
                    f"re-attached to {found.run_id} ({found.state}), this cell's unfinished "
                    "run; %%agent ... --new starts a fresh one"
                )
            else:
                run = notebook.submit(
                    agent,
                    prompt,
                    run_id=args.run_id,
                    session_id=args.session,
                    max_steps=args.max_steps,
                    enqueue=args.enqueue,
                    request_id=cell_request_id(key),
                )
        if args.name is not None:
            self._namespace()[args.name] = run
        _views.show(_views.run_view(notebook.runtime, run.run_id))

    @staticmethod
    def _reattached(notebook: NotebookSession, args: Any) -> Run | None:
        """The unfinished run ``--run-id`` names, re-attached (None when there is none)."""
        store = notebook.store
        record = store.rt_get(args.run_id) if args.run_id and isinstance(store, RunStore) else None
        if record is None or record.state not in UNFINISHED_STATES:
            return None  # a new id, or a finished run: submitting says whether the id is taken
        print(
            f"re-attached to {args.run_id} ({record.state}), the unfinished run "
            "this cell names; %%agent ... --new starts a fresh one"
        )
        return notebook.run(args.run_id)

    @line_magic  # type: ignore[untyped-decorator,unused-ignore]  # untyped before IPython 9
    def durable(self, line: str) -> Any:
        """%durable COMMAND ...: inspect and steer durable runs (``%durable --help``)."""
        return _guarded(lambda: self._durable(line))

    def _durable(self, line: str) -> Any:
        args = parse(DURABLE_PARSER, line)
        if args.command is None:
            DURABLE_PARSER.print_help()
            return None
        return HANDLERS[args.command](session(), args, self._namespace())
