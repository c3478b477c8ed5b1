"""The engine conformance suite's fixture: ``engine``, one parameter per engine.

Every test here runs against each engine the package ships: the embedded engine
(``nbdurable worker`` processes claiming runs from the store), Temporal
(``nbdurable worker --engine temporal`` processes on the real dev server,
``temporal_server``) and Restate (``nbdurable worker --engine restate`` endpoints
registered with a real ``restate-server``, ``restate_server``). In both, the test's client runtime only writes and reads
records (submit, approve, retry, cancel, wait); worker processes execute, so a
test can SIGKILL or SIGTERM them. A new engine joins by one entry in
:data:`ENGINES` and one branch in :meth:`EngineCase.client` and :class:`Worker`.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from support import temporal_tasks
from support.restate_server import restate_server
from support.workers import Worker

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime, EmbeddedEngine, Engine

ENGINES = ["embedded", "temporal", "restate"]
"""The engines every test of the suite runs against."""
SERVERS = {"temporal": "temporal_server", "restate": "restate_server"}
"""The fixture that starts each engine's server."""
__all__ = ["ENGINES", "EngineCase", "restate_server"]


@dataclass
class EngineCase:
    """One engine under test, with a store, a task queue and a tool table of this test's own.

    Attributes:
        name: The engine (``embedded``, ``temporal``, ``restate``): what runs record as
            their ``engine``.
        address: The Temporal dev server (None for the other engines).
        queue: A task queue of this test's own.
        url: The store URL the workers and the client share (SQLite).
        store: The client's store.
        tools: The side table where workers record tool, model and phase executions.
    """

    name: str
    address: str | None
    queue: str
    url: str
    store: Any
    tools: Path
    workers: list[Worker] = field(default_factory=list)
    server: Any = None  # the RestateServer of the restate engine

    def worker(
        self,
        *,
        slow: float | None = None,
        args: Sequence[str] = (),
        tasks: bool = True,
        **env: str,
    ) -> Worker:
        """A worker process of this engine serving the test agents (and tasks).

        ``slow``: seconds the slow tools and phases take; ``args``: more options
        (``--agents`` adds agents); ``tasks``: serve the test tasks too; ``env``:
        more variables.
        """
        env = {"NBDURABLE_TEST_TOOLS": str(self.tools), **env}
        if slow is not None:
            env["NBDURABLE_TEST_SLOW"] = str(slow)
        restate = None if self.server is None else (self.server.ingress, self.server.admin)
        worker = Worker(
            self.address, self.queue, self.url, env, tasks=tasks, args=args, restate=restate
        )
        self.workers.append(worker)
        return worker

    def cannot(self, engine: str, reason: str) -> None:
        """Skip this test on ``engine``, saying why it does not apply there."""
        if self.name == engine:
            pytest.skip(f"not on {engine}: {reason}")

    def reader(self, agents: Sequence[Agent] | None = None) -> DurableRuntime:
        """A runtime on this store, never opened: it submits, decides and reads, executes nothing."""
        return DurableRuntime(
            store=self.store,
            agents=temporal_tasks.agents if agents is None else agents,
            tasks=temporal_tasks.tasks,
        )

    def other_engine(self) -> Engine:
        """An engine of another name, to submit runs this engine must leave alone."""
        if self.name != "embedded":
            return EmbeddedEngine()
        pytest.importorskip("temporalio", reason="the temporal extra is not installed")
        from nbdurable.temporal import TemporalEngine

        return TemporalEngine()  # never started: no server needed to submit

    @asynccontextmanager
    async def client(self, agents: Sequence[Agent] | None = None) -> AsyncIterator[DurableRuntime]:
        """The client runtime: submits, decides and waits; this engine's workers execute.

        Embedded: a runtime never opened (an opened one would execute runs in this
        process). Temporal: one whose engine dispatches records to this queue.
        ``agents``: what it submits (default: the test agents).
        """
        if self.server is not None:
            from nbdurable.restate import RestateEngine

            async with DurableRuntime(
                store=self.store,
                agents=temporal_tasks.agents if agents is None else agents,
                tasks=temporal_tasks.tasks,
                engine=RestateEngine(self.server.ingress, self.server.admin),
            ) as runtime:
                yield runtime
            return
        if self.address is None:
            runtime = self.reader(agents)
            try:
                yield runtime
            finally:
                await runtime.close()
            return
        from nbdurable.temporal import TemporalEngine

        engine = TemporalEngine(address=self.address, task_queue=self.queue, heartbeat_timeout=2)
        async with DurableRuntime(
            store=self.store,
            agents=temporal_tasks.agents if agents is None else agents,
            tasks=temporal_tasks.tasks,
            engine=engine,
        ) as runtime:
            yield runtime

    async def assert_execution_cancelled(self, runtime: DurableRuntime, run_id: str) -> None:
        """The engine's own execution of a cancelled run ended cancelled.

        Embedded: no worker holds the run any more. Temporal: the workflow itself
        ended cancelled. Restate: that, and no invocation of the run is left.
        """
        if self.server is not None:
            from nbdurable.restate._admin import unfinished_invocations
            from nbdurable.restate._engine import service_of

            record = self.store.rt_get(run_id)
            assert record.state == "cancelled" and record.lease_owner is None, record
            service = service_of(record)
            for _ in range(150):
                if not unfinished_invocations(self.server.admin, service, run_id):
                    return
                await asyncio.sleep(0.2)
            raise AssertionError(f"the invocation of {run_id} was not cancelled")
        if self.address is None:
            record = self.store.rt_get(run_id)
            assert record.state == "cancelled" and record.lease_owner is None, record
            return
        from temporalio.client import WorkflowFailureError
        from temporalio.exceptions import CancelledError

        engine: Any = runtime.engine
        handle = (await engine.client()).get_workflow_handle(run_id)
        with pytest.raises(WorkflowFailureError) as failure:
            await asyncio.wait_for(handle.result(), 30)
        assert isinstance(failure.value.cause, CancelledError)


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[EngineCase]:
    """Each engine in turn, on a SQLite store of this test's own; its workers stopped after."""
    server = request.getfixturevalue(SERVERS[request.param]) if request.param in SERVERS else None
    address = server if request.param == "temporal" else None
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    case = EngineCase(
        name=request.param,
        address=address,
        queue=f"q-{uuid.uuid4().hex[:8]}",
        url=url,
        store=nd.open_store(url),
        tools=tmp_path / "tools.db",
        server=server if request.param == "restate" else None,
    )
    yield case
    for worker in case.workers:
        worker.stop()
    case.store.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give this suite's Temporal and Restate cases their server's fixture by name.

    The ``engine`` fixture asks for a server only for those parameters; naming it
    on those items lets markers by fixture (tests/conftest.py) see it.
    """
    here = Path(__file__).parent
    for item in items:
        callspec = getattr(item, "callspec", None)
        server = SERVERS.get(callspec.params.get("engine")) if callspec is not None else None
        if server is None:
            continue
        if here in Path(str(item.path)).parents and server not in item.fixturenames:
            item.fixturenames.append(server)  # type: ignore[attr-defined]
