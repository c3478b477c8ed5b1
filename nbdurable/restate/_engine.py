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
from ..runs import definition_matches, of_engine, unclaimable_by_definition
from ..runtime._dispatching import DispatchingEngine
from ..runtime._foreign import ForeignRuns
from . import _admin
from ._attach import await_end
from ._config import RESTATE, RestateConfig, run_service, task_service
from ._errors import RestateUnavailableError

if TYPE_CHECKING:
    from ..runs import RuntimeRun, Served
    from ..runs._scheduling import Definition

__all__ = ["RestateEngine"]

KINDS = ("agent", "task")
"""The record kinds Restate executes: agent runs (graph nodes among them) and custom tasks."""
CANCEL_SCAN_MS = 1000
"""How often (ms) a dispatcher looks for runs cancelled by another process."""


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
        self.adopt_after = adopt_after
        super().__init__()
        self._sent: set[tuple[str, int, str]] = set()
        self._cancel_scan = 0
        self._foreign = ForeignRuns(RESTATE)

    async def dispatch_once(self, woken: bool = True) -> None:
        """Send every newly pending run's leg; cancel every newly cancelled run's invocation."""
        store = self.runtime.runtime_store
        pending: set[tuple[str, int, str]] = set()
        for record in store.rt_list(["pending"]):
            key = (record.run_id, record.updated_at, "leg")
            pending.add(key)
            if record.kind not in KINDS or key in self._sent or not self._due(record):
                continue
            if not of_engine(record, RESTATE):
                self._foreign.leave(record, self.runtime.deps.logger)
                continue
            if self.adopt_after is not None and not self._serves(record):
                continue
            current = store.rt_get(record.run_id)
            if current is None or (current.state, current.updated_at) != ("pending", key[1]):
                continue
            if await self.send(current):
                self._sent.add(key)
        now = self.runtime.now()
        states = ["cancelling"]
        if (woken and self.adopt_after is None) or now - self._cancel_scan >= CANCEL_SCAN_MS:
            states.append("cancelled")
            self._cancel_scan = now
        for record in store.rt_list(states):
            key = (record.run_id, record.updated_at, "cancel")
            # A task's handler learns of its cancel from the store (restate/_tasks.py).
            if record.kind != "agent" or key in self._sent or not of_engine(record, RESTATE):
                continue
            if record.state == "cancelled" and record.updated_at < self._since:
                continue
            # A leg's invocation the server does not list yet (just sent, under load)
            # is looked for again at the next turn while the run is cancelling.
            if await self.cancel(record) or record.state == "cancelled":
                self._sent.add(key)
        self._sent = {k for k in self._sent if k[2] == "cancel" or k in pending}
        self._foreign.keep_only(k[0] for k in pending)

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
            Whether the server listed any (and each was asked to cancel).
        """
        service = service_of(record, self.runtime.registry.definitions())
        found = await asyncio.to_thread(
            _admin.unfinished_invocations, self.admin, service, record.run_id
        )
        for invocation in found:
            with contextlib.suppress(RestateUnavailableError):
                await asyncio.to_thread(_admin.cancel, self.admin, invocation)
        return bool(found)

    def _serves(self, record: RuntimeRun) -> bool:
        """Whether this endpoint serves the run's definition; if not, record its waiting reason."""
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

    def _due(self, record: RuntimeRun) -> bool:
        """Whether this engine dispatches the pending record now (an endpoint's wait)."""
        if self.adopt_after is None:
            return True
        return self.runtime.now() - record.updated_at >= self.adopt_after * 1000


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
