"""Notebook fixtures: the magics in an IPython shell without a kernel, a real runtime.

``ip`` is IPython's global test shell (``IPython.testing.globalipapp``) with
``%load_ext nbdurable`` done; the tests are ``async def`` so an event loop runs
while a magic executes, as in a kernel. ``nb`` is a fresh kernel session on the
default store (``sqlite:///.nbdurable/runs.db``) in a temporary working directory.
``magic`` runs one magic and returns what it printed and displayed.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from support.waiting import eventually as eventually  # re-exported for the tests here

import nbdurable as nd

pytest.importorskip("IPython")
pytest.importorskip("pandas")

from IPython.testing import globalipapp
from IPython.utils.capture import capture_output

from nbdurable.notebook import NotebookSession, set_session


@nd.tool
def lookup(table: str) -> dict[str, Any]:
    """Look a table up."""
    return {"table": table, "rows": 0}


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


def janitor(version: str = "1", instructions: str | None = None, **kwargs: Any) -> nd.Agent:
    """A lookup, then a gated drop, then a final text."""
    model = nd.ScriptedModel(
        [
            nd.Turn.call("lookup", "Looking at stg_2023.", table="stg_2023"),
            nd.Turn.call("drop_table", "stg_2023 is empty.", name="stg_2023"),
            "Done: dropped stg_2023.",
        ]
    )
    return nd.Agent(
        "janitor",
        model,
        [lookup, drop_table],
        instructions,
        version=version,
        **kwargs,
    )


def greeter(text: str = "Hello!") -> nd.Agent:
    """Answers every prompt with ``text``, no tools."""
    return nd.Agent("greeter", nd.ScriptedModel([text] * 50, mode="sequential"), version="1")


@dataclass
class Output:
    """What a magic printed and displayed, and what it returned."""

    value: Any
    stdout: str
    stderr: str
    displayed: list[Any] = field(default_factory=list)

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


@pytest.fixture
def ip() -> Iterator[Any]:
    shell = globalipapp.get_ipython()  # the module attribute: the first call replaces it
    shell.extension_manager.load_extension("nbdurable")
    before = set(shell.user_ns)
    yield shell
    for name in set(shell.user_ns) - before:
        del shell.user_ns[name]


@pytest.fixture
async def nb(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[NotebookSession]:
    monkeypatch.chdir(tmp_path)
    session = NotebookSession(poll_interval=0.01)
    previous = set_session(session)
    yield session
    await session.close()
    set_session(previous)


@pytest.fixture
def magic(ip: Any, nb: NotebookSession) -> Callable[..., Output]:
    """``magic("durable", "runs")`` or ``magic("agent", "janitor", "prompt")``."""

    def run(name: str, line: str, cell: str | None = None) -> Output:
        with capture_output() as captured:
            if cell is None:
                value = ip.run_line_magic(name, line)
            else:
                value = ip.run_cell_magic(name, line, cell)
        return Output(value, captured.stdout, captured.stderr, list(captured.outputs))

    return run


def state(nb: NotebookSession, run_id: str) -> str:
    return nb.run(run_id).status


@dataclass
class Shown:
    """A widget a magic displayed: which kind, and for which run."""

    kind: str
    run_id: str | None


@pytest.fixture
def views(monkeypatch: pytest.MonkeyPatch) -> list[Shown]:
    """Record the widgets the magics display instead of building them."""
    from nbdurable.notebook import _views

    shown: list[Shown] = []

    def recorder(kind: str) -> Callable[..., Shown]:
        def make(runtime: Any, run_id: str | None = None) -> Shown:
            assert isinstance(runtime, nd.DurableRuntime)
            return Shown(kind, run_id)

        return make

    monkeypatch.setattr(_views, "run_view", recorder("run"))
    monkeypatch.setattr(_views, "history_view", recorder("history"))
    monkeypatch.setattr(_views, "dashboard_view", recorder("dashboard"))
    monkeypatch.setattr(_views, "show", shown.append)
    return shown
