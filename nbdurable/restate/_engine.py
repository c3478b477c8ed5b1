"""RestateEngine: a runtime's runs execute as legs of Restate virtual objects (key = run id).

The client side of the engine seam, as Temporal's: the runtime keeps writing run
records (submit, approve, deny, retry, cancel) to the store; the engine sends
every record that became ``pending`` to Restate's ingress as an invocation of
the ``leg`` handler of its definition's virtual object (idempotent: one per
record change), and cancels the invocation of every cancelled run through the
admin API. Endpoints (``nbdurable worker --engine restate``) execute them.

Each endpoint runs an engine of its own too, with ``adopt_after``: it sends the
records that stayed pending that long (a graph node promoted while no client is
connected, a run retried from the CLI), and records the waiting reason of a
pending run whose definition it does not serve.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import asdict
from typing import TYPE_CHECKING

from ..durable import parts_of
from ..runs import definition_matches, unclaimable_by_definition
from ..runtime._dispatching import DispatchingEngine
from . import _admin
from ._attach import await_end
from ._config import RESTATE, RestateConfig, run_service, task_service
from ._errors import RestateUnavailableError

if TYPE_CHECKING:
    from ..runs import RuntimeRun, Served
    from ..runs._scheduling import Definition

__all__ = ["RestateEngine"]


class RestateEngine(DispatchingEngine):
    """Execute a runtime's agent runs on Restate.

    Args:
        ingress: The Restate ingress URL (invocations), ``http://host:8080``.
        admin: The Restate admin API URL (deployments, cancellations), ``http://host:9070``.
        tool_retries: Attempts of a ``safe``/``idempotent`` tool after an endpoint loss.
        adopt_after: For an endpoint's engine: leave pending runs to clients for this
            many seconds, then send those still pending. None (a client): at once.
    """

    name = RESTATE
    server = "Restate"
    kinds = ("agent", "task")
    # A task's handler learns of its cancel from the store (restate/_tasks.py).
    cancels = ("agent",)

    def __init__(
        self,
        ingress: str = "http://127.0.0.1:8080",
        admin: str = "http://127.0.0.1:9070",
        *,
        tool_retries: int = 5,
        adopt_after: float | None = None,
    ) -> None:
        self.ingress = ingress.rstrip("/")
        self.admin = admin.rstrip("/")
        self.config = RestateConfig(tool_retries=tool_retries)
        super().__init__(adopt_after)

    async def send(self, record: RuntimeRun) -> bool:
        """Invoke the next leg of a pending run; False when no endpoint serves its definition."""
        target = f"{service_of(record, self.runtime.registry.definitions())}/{record.run_id}/leg"
        idempotency = f"{record.run_id}:{record.fence}:{record.updated_at}"
        sent = await asyncio.to_thread(
            _admin.send, self.ingress, target, asdict(self.config), idempotency
        )
        if sent is None:
            return False
        # result() learns of the leg's end from Restate (nbdurable/restate/_attach.py)
        self.watch_end(sent, record.run_id, lambda: await_end(self.ingress, sent))
        return True

    async def cancel(self, record: RuntimeRun) -> bool:
        """Cancel the run's unfinished invocations (a leg in flight ends cancelled).

        Returns:
            Whether the server listed any (and each was asked to cancel). One it
            does not list yet (just sent, under load) is looked for again at the
            next turn while the run is cancelling.
        """
        service = service_of(record, self.runtime.registry.definitions())
        found = await asyncio.to_thread(
            _admin.unfinished_invocations, self.admin, service, record.run_id
        )
        for invocation in found:
            with contextlib.suppress(RestateUnavailableError):
                await asyncio.to_thread(_admin.cancel, self.admin, invocation)
        return bool(found)

    def takes(self, record: RuntimeRun) -> bool:
        """A client sends every run; an endpoint one whose definition it serves.

        A run it does not serve gets its waiting reason recorded.
        """
        if self.adopt_after is None:
            return True
        served: Served = self.runtime.registry.definitions()
        if record.kind == "task":
            served = self.runtime.task_keys()
        if definition_matches(record, served) is True:
            return True
        waiting = unclaimable_by_definition(
            record, self.runtime.now(), served, kind=record.kind, engine=RESTATE
        )
        if waiting is not None:
            from ..runs import RunPatch

            with contextlib.suppress(Exception):  # another process took it meanwhile: fine
                patch = RunPatch(waiting_reason=waiting.waiting_reason)
                self.runtime.runtime_store.rt_update(record.run_id, patch, fence=record.fence)
        return False


def service_of(
    record: RuntimeRun, definitions: Mapping[tuple[str, str], Definition] | None = None
) -> str:
    """The virtual object that runs the record's legs: its definition's (or its task's).

    A run recorded under the previous fingerprint scheme (one digest, no parts)
    names no object any endpoint registers: endpoints register their definitions
    under the current scheme. When ``definitions`` (the sender's registrations)
    holds a definition that accepts the run (the old scheme recomputed with the
    run's own settings), the run goes to that definition's object; else to the
    object its recorded fingerprint names, which no endpoint serves (it waits,
    and an endpoint whose definition accepts it sends it there itself).
    """
    if record.kind == "task":
        return task_service(record.agent_id, record.agent_version)
    fingerprint = record.fingerprint
    if fingerprint is not None and parts_of(fingerprint) is None and definitions:
        found = definitions.get((record.agent_id, record.agent_version))
        if found is not None and not isinstance(found, str) and found.accepts(record):
            fingerprint = found.fingerprint
    return run_service(record.agent_id, record.agent_version, fingerprint)
