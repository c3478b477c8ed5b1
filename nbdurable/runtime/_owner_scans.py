"""The embedded engine's upkeep scans: dead owners' leases, and runs of another engine.

Made from the scheduler on a store thread, each at most every few seconds: a
run left ``running`` by a process that is gone is taken over at once instead of
after its lease, and a waiting run that belongs to another engine is named once
in the log (this runtime never claims it).
"""

from __future__ import annotations

import contextlib
import time
from typing import TYPE_CHECKING

from .._errors import FencedOutError, RunNotFoundError
from ..runs import ACTIVE_STATES, CLAIMABLE_STATES, EMBEDDED, RunPatch, of_engine, process_gone
from ._foreign import ForeignRuns

if TYPE_CHECKING:
    from ._seam import RunServices

__all__ = ["DEAD_OWNER_SCAN_SECONDS", "FOREIGN_SCAN_SECONDS", "OwnerScans"]

DEAD_OWNER_SCAN_SECONDS = 1.0
"""How often a runtime looks for running runs whose owner's process is gone on this host."""
FOREIGN_SCAN_SECONDS = 10.0
"""How often a runtime looks for waiting runs of another engine, to say once that it leaves them."""


class OwnerScans:
    """The scans of one embedded engine, and when each is next due.

    Args:
        runtime: The runtime whose run records are scanned.
    """

    def __init__(self, runtime: RunServices) -> None:
        self.runtime = runtime
        self._foreign = ForeignRuns(EMBEDDED)
        self._next_dead_owner_scan = 0.0
        self._next_foreign_scan = 0.0

    def expire_dead_owners(self) -> None:
        """Expire the leases of running runs whose owner's process is gone on this host.

        A restarted kernel or a killed worker leaves its runs ``running`` under a
        lease nobody renews. When the holder's process provably no longer exists
        (:func:`~nbdurable.runs.process_gone`), its lease is ended now
        (a fenced write, so a run someone claimed meanwhile is left alone) and the
        next claim takes the run over at once instead of after the lease.
        Runs of another engine are left alone (claims never take them either).
        """
        moment = time.monotonic()
        if moment < self._next_dead_owner_scan:
            return
        self._next_dead_owner_scan = moment + DEAD_OWNER_SCAN_SECONDS
        store = self.runtime.runtime_store
        try:
            now = self.runtime.now()
            for record in store.rt_list(sorted(ACTIVE_STATES)):
                expires = record.lease_expires_at
                if not of_engine(record, EMBEDDED):
                    continue
                if expires is None or expires <= now or not process_gone(record.lease_owner):
                    continue
                with contextlib.suppress(FencedOutError, RunNotFoundError):
                    store.rt_update(
                        record.run_id, RunPatch(lease_expires_at=now), fence=record.fence
                    )
        except Exception as exc:  # only an early takeover is lost: the lease still lapses
            self.runtime.deps.logger.error("nbdurable: looking for dead owners failed: %r", exc)
        if moment >= self._next_foreign_scan:
            self._next_foreign_scan = moment + FOREIGN_SCAN_SECONDS
            self._note_foreign()

    def _note_foreign(self) -> None:
        """Say once per run, in the log, which waiting runs belong to another engine."""
        try:
            records = self.runtime.runtime_store.rt_list(sorted(CLAIMABLE_STATES))
        except Exception:  # only a log line is lost: the next scan says it
            return
        foreign = [r for r in records if not of_engine(r, EMBEDDED)]
        for record in foreign:
            self._foreign.leave(record, self.runtime.deps.logger)
        self._foreign.keep_only(r.run_id for r in foreign)
