"""The kernel session: one store and one runtime per kernel, on the kernel's own loop.

A magic is a plain function the kernel calls while its event loop runs: it can
neither ``await`` nor start another loop. What a magic must know before it
returns (the runtime it opened, a run's handle, whether a run has checkpoints)
comes from :func:`~nbdurable._sync.run_sync`, which runs the kernel's loop nested
until the coroutine is done: the runtime's scheduler and runs keep going, a store
that really awaits (network, locks) is awaited, and the loop is never blocked.
With no loop running in this thread it runs on the thread's own loop.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from .._errors import ConfigurationError, NbdurableError, RunNotFoundError
from .._sync import run_sync
from ..durable.store import HistoryStore, RunStore
from ..messages import Message
from ..runs import claimed_user, valid_name
from ..runtime._agent import Agent
from ..runtime._run import Run
from ..runtime._runtime import DurableRuntime
from ..stores._default import DEFAULT_STORE, default_store
from ._agents import register

__all__ = [
    "DEFAULT_STORE",
    "NotebookSession",
    "check_exists",
    "check_run",
    "current_url",
    "deciding_user",
    "running_loop",
    "session",
    "set_session",
]


def running_loop() -> asyncio.AbstractEventLoop:
    """The running event loop (the kernel's, in a notebook).

    Raises:
        NbdurableError: No loop runs (a plain script outside ``async`` code).
    """
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        raise NbdurableError(
            "the notebook runtime runs on the kernel's event loop, and none is running: "
            "use it in a Jupyter kernel or inside async code"
        ) from None


def _make_folder(url: str) -> None:
    """Create the folder of a SQLite store's file (``.nbdurable/`` by default)."""
    from ..stores import local_path

    scheme, _, rest = url.partition("://")
    if scheme.lower() == "sqlite":
        path = local_path(url, rest)
        if path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)


def _close_store(store: HistoryStore) -> None:
    store.close()


class NotebookSession:
    """One kernel's store and :class:`~nbdurable.DurableRuntime`, opened when first needed.

    The runtime is opened on the kernel's running event loop: its scheduler and
    the runs it executes are tasks on that loop, so a cell that submits a run
    returns at once and the kernel stays free. Agents defined in cells are
    registered when a magic names them; after a kernel restart, re-running an
    agent's cell lets its unfinished runs go on.

    Args:
        url: The store URL (default: ``NBDURABLE_STORE`` when set, else
            ``sqlite:///.nbdurable/runs.db``, whose folder is created).
        **runtime_options: Passed to :meth:`DurableRuntime.open` (``lease_ms``,
            ``poll_interval``, ``approval_signer``, ``max_concurrent_runs``...).
    """

    def __init__(self, url: str | None = None, **runtime_options: Any) -> None:
        self._url = url if url is not None else default_store()
        self._options = runtime_options
        self._store: HistoryStore | None = None
        self._runtime: DurableRuntime | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._user: str | None = None

    def __repr__(self) -> str:
        state = "open" if self._runtime is not None else "not started"
        return f"NotebookSession({self._url!r}, runtime {state})"

    @property
    def url(self) -> str:
        """The store URL."""
        return self._url

    @property
    def user(self) -> str | None:
        """Who decides here: the name set once, else ``NBDURABLE_USER``, else the OS user.

        Recorded with every verdict given here (a card click, ``%durable
        approve``) and on the runs submitted here, as claimed, not
        authenticated: ``Agent(approvers=...)`` accepts it only if listed.
        Set it once: ``nbdurable.notebook.session().user = "ana"``.

        Raises:
            ConfigurationError: (setting) A blank name, or another name once one is set.
        """
        return self._user if self._user is not None else claimed_user()

    @user.setter
    def user(self, name: str) -> None:
        name = valid_name(name, "session().user")
        if self._user is not None and self._user != name:
            raise ConfigurationError(
                f"this notebook's user is {self._user!r} already; it is set once per session"
            )
        self._user = name

    @property
    def store(self) -> HistoryStore:
        """The store, opened on first use."""
        if self._store is None:
            from ..stores import open_store

            _make_folder(self._url)
            self._store = open_store(self._url)
        return self._store

    @property
    def reading_store(self) -> HistoryStore:
        """The store, for a command that only reads: one that does not exist is not created.

        Raises:
            ConfigurationError: The store's file or directory does not exist (a
                mistyped ``%durable store`` URL, or nothing has run here yet).
        """
        if self._store is None:
            from ..stores import open_store

            self._store = open_store(self._url, create=False)
        return self._store

    @property
    def started(self) -> bool:
        """Whether the runtime is open (it executes runs of registered agents)."""
        return self._runtime is not None

    @property
    def runtime(self) -> DurableRuntime:
        """The runtime, opened on the running loop on first use.

        Raises:
            NbdurableError: No event loop runs, or the runtime runs on another live one.
            ConfigurationError: The store keeps no run records (e.g. ``jsonl:///``).
        """
        loop = running_loop()
        if self._runtime is not None and self._loop is not loop:
            assert self._loop is not None
            if not self._loop.is_closed():
                raise NbdurableError("this session's runtime runs on another event loop")
            self._runtime = None  # its loop is gone, and its tasks with it
        if self._runtime is None:
            self._runtime = run_sync(DurableRuntime.open(store=self.store, **self._options))
            self._loop = loop
        return self._runtime

    def use_store(self, url: str) -> None:
        """Switch to the store at ``url``; the previous runtime is closed in the background.

        Runs the previous runtime was executing go back to ``pending`` in their
        store, for the next runtime serving their agent.

        Raises:
            ConfigurationError: The URL cannot be opened (the session is unchanged).
        """
        from ..stores import missing_path, open_store

        # A new store is created by the first run submitted here (``store``), not
        # by naming it: a mistyped URL read by `%durable runs` must stay an error.
        store = open_store(url) if missing_path(url) is None else None
        old_store, old_runtime, old_loop = self._store, self._runtime, self._loop
        self._url, self._store, self._runtime, self._loop = url, store, None, None
        try:
            loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if old_runtime is not None and loop is not None and loop is old_loop:
            task = loop.create_task(self._retire(old_runtime, old_store))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)
        elif old_store is not None:  # no runtime, or its loop is gone with its tasks
            _close_store(old_store)

    @staticmethod
    async def _retire(runtime: DurableRuntime, store: Any) -> None:
        await runtime.close()
        _close_store(store)

    def register(self, agent: Agent) -> Agent:
        """Register an agent with the runtime (an unchanged definition reuses its registration).

        Raises:
            ConfigurationError: Not a valid agent.
            DurableConflictError: The agent changed but kept its version (bump ``version=``).
        """
        return register(self.runtime, agent)

    def submit(
        self,
        agent: Agent,
        prompt: str | Message,
        *,
        run_id: str | None = None,
        session_id: str | None = None,
        max_steps: int | None = None,
        enqueue: bool = False,
        request_id: str | None = None,
    ) -> Run:
        """Register ``agent`` and submit a run of it; returns the handle at once.

        The run executes as a task on the kernel's loop. Same errors as
        :meth:`DurableRuntime.submit`, and those of :meth:`register`.
        """
        runtime = self.runtime
        register(runtime, agent)
        return run_sync(
            runtime.submit(
                agent.id,
                prompt,
                run_id=run_id,
                session_id=session_id,
                max_steps=max_steps,
                enqueue=enqueue,
                submitted_by=self.user,
                request_id=request_id,
            )
        )

    def run(self, run_id: str) -> Run:
        """The handle of a runtime run of this store.

        Raises:
            RunNotFoundError: The store has no runtime record of ``run_id``.
        """
        run: Run = run_sync(self.runtime.get_run(run_id))
        return run

    def has_checkpoints(self, run_id: str) -> bool:
        """Whether the store has checkpoints of ``run_id`` (runs of the loop API have no record)."""
        return run_sync(_loaded(self.store, run_id)) is not None

    async def close(self) -> None:
        """Close the runtime (in-flight steps go back to ``pending``) and the store."""
        runtime, store = self._runtime, self._store
        self._runtime = self._store = self._loop = None
        if runtime is not None:
            await runtime.close()
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)
        if store is not None:
            _close_store(store)


async def _loaded(store: Any, run_id: str) -> Any:
    from ..durable.store import maybe_await

    return await maybe_await(store.load(run_id))


_current: NotebookSession | None = None


def session() -> NotebookSession:
    """The kernel's session (created on first call, on the default store)."""
    global _current
    if _current is None:
        _current = NotebookSession()
    return _current


def deciding_user() -> str | None:
    """The name a verdict given in this kernel records: the session's user, else the claimed one."""
    return _current.user if _current is not None else claimed_user()


def current_url() -> str | None:
    """The store URL of this kernel's session, if it has one (None before the first magic)."""
    return _current.url if _current is not None else None


def set_session(new: NotebookSession | None) -> NotebookSession | None:
    """Make ``new`` this kernel's session; returns the previous one (not closed)."""
    global _current
    previous, _current = _current, new
    return previous


def check_exists(notebook: NotebookSession, run_id: str) -> None:
    """Check that the store knows ``run_id`` (a runtime record, or checkpoints).

    Raises:
        RunNotFoundError: It does not.
    """
    records = notebook.reading_store
    if isinstance(records, RunStore) and records.rt_get(run_id) is not None:
        return
    if not notebook.has_checkpoints(run_id):
        raise RunNotFoundError(run_id)


def check_run(notebook: NotebookSession, run_id: str) -> Run:
    """The runtime handle of ``run_id``, with a clear error for loop-API runs.

    Raises:
        ConfigurationError: The run has checkpoints but no runtime record.
        RunNotFoundError: The store has no such run.
    """
    try:
        return notebook.run(run_id)
    except RunNotFoundError:
        if not notebook.has_checkpoints(run_id):
            raise
        raise ConfigurationError(
            f"run {run_id!r} ran through generate_text/stream_chat, not the runtime: "
            f"resume it in Python with nd.resume_from_checkpoint(store, {run_id!r}, ...)"
        ) from None
