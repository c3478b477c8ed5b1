"""An in-memory mirror of the run records, so synchronous reads never wait on a remote store.

``Run.status``, ``Run.record()``, ``DurableRuntime.list_runs()``,
``Graph.records()``, ``Graph.status``, ``TaskRun.state()`` and
``TaskRun.children()`` are synchronous: a notebook user calls them without
``await``, on the kernel's event loop. Over a store whose reads cross a network
(the ``remote`` capability: PostgreSQL) each would block the loop for a round
trip, so :class:`DurableRuntime` keeps a :class:`RecordMirror` and those calls,
made on a thread that runs an event loop, read it instead. Anywhere else (a
store thread, which is where every awaited read runs, or a script without a
loop) they read the store as before, so awaited reads are always current.

The mirror is loaded on a store thread when the runtime opens, and kept
current by

- every record this process writes or reads through the runtime
  (:class:`MirroredRuntimeStore` sees each call's result), and
- other processes' changes: every run-state change appends a ``run_state``
  event, and the store notifies each append (PostgreSQL's ``LISTEN/NOTIFY``,
  delivered to :func:`~nbdurable.durable.store.watch`). A background thread reads
  each notified run's record again (one query per run, however many events
  arrived meanwhile), a run it has not seen before included. A lost ``LISTEN``
  connection, once back, has the whole mirror read again, and every
  ``RESYNC_SECONDS`` the unfinished runs are read again (a change that sent
  no notification: a worker of an older release finishing a run).

A synchronous read may therefore lag another process's write by the
notification's latency; ``await run.wait()`` and the other awaited forms read
the store.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..durable._offload import offload
from ..durable.store import REMOTE, EventLog, RunStore, RuntimeStore, supports, watch
from ..runs import UNFINISHED_STATES, RuntimeRun

__all__ = ["MirroredRuntimeStore", "RecordMirror", "mirror_for", "read_graph", "read_list"]

_log = logging.getLogger(__name__)

_BATCH_DELAY = 0.05
"""Seconds the refresher waits after a notification, so a burst of events costs one read."""

RESYNC_SECONDS = 30.0
"""How often the unfinished runs are read again, for changes no notification announced."""


class RecordMirror:
    """The run records of one store, in memory, kept current in the background.

    Args:
        store: The store the runtime was opened on (its notifications are watched).
        records: Its run records, read on the refresher's thread and at
            :meth:`start` (not retried: a failed read is made again later).
    """

    def __init__(self, store: object, records: RuntimeStore) -> None:
        self._store = store
        self._records = records
        self._lock = threading.Lock()
        self._runs: dict[str, RuntimeRun] = {}
        self._task_states: dict[str, tuple[int, str]] = {}  # run id -> (phase index, state)
        self._generation = 0  # grows with every change, so a reload spares later news
        self._touched: dict[str, int] = {}  # run id -> generation of its last change
        self._dirty: set[str] = set()
        self._reload = False
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._loaded = False
        self._unwatch: Callable[[], None] | None = None
        self._thread: threading.Thread | None = None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        """Load the mirror on a store thread and start following the store's notifications."""
        if self._loaded or self._stopping.is_set():
            return
        await offload(self._load)

    def _load(self) -> None:
        if isinstance(self._store, EventLog):  # notifications in place before the snapshot:
            self._store.listen(10.0)  # no change falls between
        self._unwatch = watch(self._store, self._notified)
        try:
            self._read_all()
            self._loaded = True
        except Exception as exc:  # the store is away: sync reads use it until a reload works
            _log.warning("nbdurable: the run record mirror could not be loaded yet: %r", exc)
            self._reload = True
            self._wake.set()
        self._thread = threading.Thread(
            target=self._refresh_forever, name="nbdurable-record-mirror", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Stop following the store (the mirror is not read any more)."""
        self._stopping.set()
        self._loaded = False
        if self._unwatch is not None:
            self._unwatch()
            self._unwatch = None
        self._wake.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            # Not longer: a read may wait for a connection while the store is away,
            # and the thread (a daemon) ends by itself once that read returns.
            thread.join(timeout=1.0)

    def active(self) -> bool:
        """Whether reads on this thread use the mirror: loaded, and an event loop runs here.

        A thread running a loop (the runtime's, or a notebook kernel's while the
        runtime runs on another) must not wait for the network; a store thread,
        where awaited reads run, reads the store and is current.
        """
        if not self._loaded:
            return False
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return False
        return True

    # -- reads -----------------------------------------------------------------------

    def get(self, run_id: str) -> RuntimeRun | None:
        """A run's record as last seen, or None when the mirror has not seen it."""
        with self._lock:
            return self._runs.get(run_id)

    def runs(self, states: Sequence[str] | None = None) -> list[RuntimeRun]:
        """Records in submission order, optionally only those in ``states``."""
        with self._lock:
            runs = list(self._runs.values())
        wanted = None if states is None else set(states)
        return sorted((r for r in runs if wanted is None or r.state in wanted), key=lambda r: r.seq)

    def graph(self, graph_id: str) -> list[RuntimeRun]:
        """A graph's records in submission order (empty when the mirror knows no such graph)."""
        return [r for r in self.runs() if r.graph_id == graph_id]

    def task_state(self, run_id: str) -> str | None:
        """A task run's last checkpointed state as seen (JSON text), or None."""
        with self._lock:
            saved = self._task_states.get(run_id)
        return None if saved is None else saved[1]

    # -- updates ---------------------------------------------------------------------

    def put(self, record: RuntimeRun, *, read_since: int | None = None) -> None:
        """Take a record a store call returned.

        A record older than the one held (by ``updated_at``) may come from a
        read that raced a write: it is not taken, and the run is read again.
        ``read_since``: the generation when a refresher's read began (a read
        after the latest notification): taken as it is (another process's clock
        may lag ours), unless this process changed the run meanwhile, whose
        record is then kept and the run read again.
        """
        with self._lock:
            held = self._runs.get(record.run_id)
            if held is None:
                stale = False
            elif read_since is not None:
                stale = self._touched.get(record.run_id, 0) > read_since
            else:
                stale = record.updated_at < held.updated_at
            if not stale:
                self._generation += 1
                self._runs[record.run_id] = record
                self._touched[record.run_id] = self._generation
            elif record != held:  # which is newer is not known: read the run again
                self._dirty.add(record.run_id)
                self._wake.set()

    def put_task_state(self, run_id: str, index: int, state: str) -> None:
        """Take a task phase's checkpointed state (the newest phase wins)."""
        with self._lock:
            held = self._task_states.get(run_id)
            if held is None or held[0] <= index:
                self._task_states[run_id] = (index, state)

    def is_task(self, run_id: str) -> bool:
        """Whether the mirror knows ``run_id`` as a task run."""
        record = self.get(run_id)
        return record is not None and record.kind == "task"

    def _forget(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)
            self._task_states.pop(run_id, None)
            self._touched.pop(run_id, None)

    # -- the refresher ---------------------------------------------------------------

    def _notified(self, run_id: str | None) -> None:
        # On the notifying thread (the listener's, a store thread, the loop): no I/O here.
        with self._lock:
            if run_id is None:
                self._reload = True
            else:
                self._dirty.add(run_id)
        self._wake.set()

    def _refresh_forever(self) -> None:
        last_resync = time.monotonic()
        while not self._stopping.is_set():
            self._wake.wait(max(0.0, last_resync + RESYNC_SECONDS - time.monotonic()))
            if self._stopping.is_set():
                return
            resync = time.monotonic() - last_resync >= RESYNC_SECONDS
            if resync:
                last_resync = time.monotonic()
            self._stopping.wait(_BATCH_DELAY)  # gather a burst of notifications
            self._wake.clear()
            with self._lock:
                dirty, self._dirty = self._dirty, set()
                reload, self._reload = self._reload, False
            try:
                if reload:
                    self._read_all()
                    self._loaded = not self._stopping.is_set()
                elif resync:
                    dirty |= self._unfinished_changed()
                for run_id in sorted(dirty):
                    if self._stopping.is_set():
                        return
                    self._read_one(run_id)
            except Exception as exc:
                # The store is away: the runtime's own calls report the outage; the
                # mirror reads again on the next notification, reconnect or resync.
                if self._stopping.is_set():
                    return
                _log.debug("nbdurable: the run record mirror could not read the store: %r", exc)
                with self._lock:
                    self._dirty |= dirty
                    self._reload = self._reload or reload

    def _read_all(self) -> None:
        with self._lock:
            began = self._generation
        records = self._records.rt_list()
        for record in records:
            self.put(record)  # older than one held: read again, on its own
            if record.kind == "task":
                self._read_task_state(record)
        present = {r.run_id for r in records}
        with self._lock:
            gone = [
                run_id
                for run_id, touched in self._touched.items()
                if run_id not in present and touched <= began
            ]
        for run_id in gone:  # deleted (pruned) meanwhile
            self._forget(run_id)

    def _unfinished_changed(self) -> set[str]:
        """Read the unfinished runs; the ids of held unfinished runs not among them."""
        unfinished = self._records.rt_list(sorted(UNFINISHED_STATES))
        for record in unfinished:
            self.put(record)
        present = {r.run_id for r in unfinished}
        with self._lock:
            return {
                run_id
                for run_id, held in self._runs.items()
                if held.state in UNFINISHED_STATES and run_id not in present
            }

    def _read_one(self, run_id: str) -> None:
        with self._lock:
            began = self._generation
        record = self._records.rt_get(run_id)
        if record is None:  # a session's events without a run record, or a pruned run
            self._forget(run_id)
            return
        self.put(record, read_since=began)
        if record.kind == "task":
            self._read_task_state(record)

    def _read_task_state(self, record: RuntimeRun) -> None:
        with self._lock:
            held = self._task_states.get(record.run_id)
        known = -1 if held is None else held[0]
        for index in reversed(range(known + 1, record.phase)):
            saved = self._records.rt_journaled(record.run_id, index)
            if saved is not None:
                self.put_task_state(record.run_id, index, saved)
                return


def mirror_for(store: object, records: RuntimeStore) -> RecordMirror | None:
    """A mirror for a store whose reads are remote (``remote`` capability); None otherwise."""
    return RecordMirror(store, records) if supports(store, REMOTE) else None


def with_mirror(records: RuntimeStore, mirror: RecordMirror | None) -> RuntimeStore:
    """``records`` with every record it returns kept in ``mirror`` (unchanged without one)."""
    return records if mirror is None else MirroredRuntimeStore(records, mirror)


class _Reader(Protocol):
    """What the read helpers need of a runtime."""

    mirror: RecordMirror | None
    runtime_store: RuntimeStore


def _mirror(runtime: _Reader) -> RecordMirror | None:
    mirror = runtime.mirror
    return mirror if mirror is not None and mirror.active() else None


def read_record(runtime: _Reader, run_id: str) -> RuntimeRun | None:
    """A run's record: from the mirror on an event loop's thread, else from the store.

    A run the mirror has not seen yet is read from the store.
    """
    mirror = _mirror(runtime)
    found = mirror.get(run_id) if mirror is not None else None
    return found if found is not None else runtime.runtime_store.rt_get(run_id)


def read_list(runtime: _Reader, states: Sequence[str] | None = None) -> list[RuntimeRun]:
    """Run records in submission order: from the mirror on a loop's thread, else the store."""
    mirror = _mirror(runtime)
    return mirror.runs(states) if mirror is not None else runtime.runtime_store.rt_list(states)


def read_graph(runtime: _Reader, graph_id: str) -> list[RuntimeRun]:
    """A graph's records: from the mirror on a loop's thread, else (or unseen) the store."""
    mirror = _mirror(runtime)
    found = mirror.graph(graph_id) if mirror is not None else []
    return found or runtime.runtime_store.rt_graph(graph_id)


def read_task_state(runtime: _Reader, record: RuntimeRun) -> str | None:
    """A task run's last checkpointed state (JSON text), or None before its first phase."""
    mirror = _mirror(runtime)
    if mirror is not None and record.phase > 0:
        saved = mirror.task_state(record.run_id)
        if saved is not None:
            return saved
    for index in reversed(range(record.phase)):
        text = runtime.runtime_store.rt_journaled(record.run_id, index)
        if text is not None:
            return text
    return None


def _mirrored(name: str) -> Any:
    """The :class:`RunStore` method ``name``, the records its result holds given to the mirror."""

    def call(self: MirroredRuntimeStore, *args: Any, **kwargs: Any) -> Any:
        result = getattr(self.inner, name)(*args, **kwargs)
        # a record, a list of them, or (record, fresh) from an insertion or a verdict
        found = result[:1] if isinstance(result, tuple) else result
        for record in found if isinstance(found, list | tuple) else [found]:
            if isinstance(record, RuntimeRun):
                self.mirror.put(record)
        return result

    call.__name__ = call.__qualname__ = name
    call.__doc__ = getattr(RunStore, name).__doc__
    return call


class MirroredRuntimeStore(RunStore):
    """The runtime's run records, every record a call returns also given to the mirror.

    Args:
        inner: The runtime's (retrying) view of its store's run records.
        mirror: The mirror to keep current.
    """

    def __init__(self, inner: RuntimeStore, mirror: RecordMirror) -> None:
        self.inner = inner
        self.mirror = mirror

    def rt_journal(self, run_id: str, step_index: int, response: str, *, fence: int) -> None:
        """Record a step's model response (or a task phase's state), fenced."""
        self.inner.rt_journal(run_id, step_index, response, fence=fence)
        if self.mirror.is_task(run_id):
            self.mirror.put_task_state(run_id, step_index, response)

    rt_insert = _mirrored("rt_insert")
    rt_insert_many = _mirrored("rt_insert_many")
    rt_get = _mirrored("rt_get")
    rt_graph = _mirrored("rt_graph")
    rt_list = _mirrored("rt_list")
    rt_session = _mirrored("rt_session")
    rt_update = _mirrored("rt_update")
    rt_claim = _mirrored("rt_claim")
    rt_claim_many = _mirrored("rt_claim_many")
    rt_verdict = _mirrored("rt_verdict")
    rt_grants = _mirrored("rt_grants")
    rt_late_result = _mirrored("rt_late_result")
    # calls that return no record pass through
    rt_renew = _mirrored("rt_renew")
    rt_intent = _mirrored("rt_intent")
    rt_intents = _mirrored("rt_intents")
    rt_journaled = _mirrored("rt_journaled")
    rt_claim_notices = _mirrored("rt_claim_notices")
