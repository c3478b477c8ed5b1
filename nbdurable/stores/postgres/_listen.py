"""LISTEN for the PostgreSQL store's event notifications on a dedicated connection.

A :class:`Listener` owns one connection (not a pool's: it stays in ``LISTEN``
for as long as the store lives) and a daemon thread that waits on the socket
and on a wake-up pipe, so :meth:`Listener.stop` ends it at once. A lost
connection is opened again with a growing delay; nothing is missed for good,
because subscribers also read again after their polling interval, and
``on_ready`` runs after every (re)connect so the store can wake everyone who
waits (an event committed while nobody listened sent its notification to no one).
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ._schema import quote_ident

if TYPE_CHECKING:
    from psycopg import Connection

__all__ = ["Listener"]

_log = logging.getLogger(__name__)

_FIRST_DELAY = 0.1
_MAX_DELAY = 5.0


class Listener:
    """``LISTEN channel`` in a background thread (started at once), a callback per notification.

    Args:
        conninfo: Where to connect (the store's DSN).
        channel: The channel to listen on.
        on_notify: Called on the listener thread with each notification's payload.
        on_ready: Called on the listener thread each time ``LISTEN`` is in place.
        name: The thread's name.
        more: Further channels on the same connection, each with its own callback.
    """

    def __init__(
        self,
        conninfo: str,
        channel: str,
        on_notify: Callable[[str], None],
        on_ready: Callable[[], None],
        *,
        name: str = "nbdurable-listen",
        more: Mapping[str, Callable[[str], None]] | None = None,
    ) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._callbacks: dict[str, Callable[[str], None]] = {channel: on_notify, **(more or {})}
        self._on_ready = on_ready
        self._stopping = threading.Event()
        self._ready = threading.Event()
        self._lock = threading.Lock()
        self._wake_r, wake_w = os.pipe()
        self._wake_w: int | None = wake_w
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        try:
            self._thread.start()
        except BaseException:
            os.close(self._wake_r)
            os.close(wake_w)
            raise

    @property
    def ready(self) -> bool:
        """Whether ``LISTEN`` is in place on a live connection."""
        return self._ready.is_set()

    def wait_ready(self, timeout: float) -> bool:
        """Block until ``LISTEN`` is in place; False after ``timeout`` seconds."""
        return self._ready.wait(timeout)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the thread and close its connection; waits up to ``timeout`` seconds.

        A thread still connecting when the time is up closes the connection
        itself when the attempt ends.
        """
        with self._lock:
            self._stopping.set()
            if self._wake_w is not None:  # None once the thread has closed the pipe
                os.write(self._wake_w, b"x")
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    # -- the thread ----------------------------------------------------------------

    def _run(self) -> None:
        delay = _FIRST_DELAY
        try:
            while not self._stopping.is_set():
                conn = self._connect()
                if conn is not None:
                    delay = _FIRST_DELAY
                    try:
                        with conn:  # closed on the way out, broken or not
                            self._listen(conn)
                    except Exception as exc:
                        _log.warning("nbdurable: LISTEN %s lost: %r", self._channel, exc)
                    finally:
                        self._ready.clear()
                if self._sleep(delay):
                    return
                delay = min(delay * 2, _MAX_DELAY)
        finally:
            with self._lock:
                os.close(self._wake_r)
                if self._wake_w is not None:
                    os.close(self._wake_w)
                    self._wake_w = None

    def _connect(self) -> Connection[Any] | None:
        import psycopg

        try:
            return psycopg.connect(self._conninfo, autocommit=True)
        except Exception as exc:
            _log.warning("nbdurable: cannot connect to LISTEN %s: %r", self._channel, exc)
            return None

    def _listen(self, conn: Connection[Any]) -> None:
        """Pump notifications until stopped (returns) or the connection fails (raises)."""
        for channel in self._callbacks:
            conn.execute(f"LISTEN {quote_ident(channel)}")
        self._ready.set()
        self._call(self._on_ready)
        self._drain(conn)  # notifications may arrive with any reply, LISTEN's too
        with selectors.DefaultSelector() as selector:
            selector.register(conn.fileno(), selectors.EVENT_READ, "server")
            selector.register(self._wake_r, selectors.EVENT_READ, "stop")
            while not self._stopping.is_set():
                events = selector.select()
                if any(key.data == "stop" for key, _ in events):
                    return
                if not self._drain(conn):
                    # Readable without a notification: a notice, or the server
                    # closing the connection. A query tells them apart (it raises).
                    conn.execute("SELECT 1")
                    self._drain(conn)

    def _drain(self, conn: Connection[Any]) -> int:
        """Hand on every notification received so far, without waiting; how many."""
        received = [(n.channel, n.payload) for n in conn.notifies(timeout=0)]
        for channel, payload in received:
            callback = self._callbacks.get(channel)
            if callback is not None:
                self._call(callback, payload)
        return len(received)

    def _sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` or until stopped; True when stopped."""
        if self._stopping.is_set():
            return True
        with selectors.DefaultSelector() as selector:
            selector.register(self._wake_r, selectors.EVENT_READ)
            selector.select(seconds)
        return self._stopping.is_set()

    def _call(self, callback: Callable[..., None], *args: str) -> None:
        try:
            callback(*args)
        except Exception:  # a callback's bug must not end the listener
            _log.exception("nbdurable: event notification callback failed")
