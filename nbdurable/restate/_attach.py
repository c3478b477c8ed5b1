"""Learn at once that a leg's invocation ended: Restate's ``attach``, awaited on the loop.

A client waiting for a run (``Run.wait``, ``result()``) reads the store; on a
store that cannot tell it of another process's writes (SQLite) it polls, with a
backoff up to a second (issue 42), so the end of a run an endpoint executed was
noticed up to a second late: on a run of a few hundred milliseconds that was
most of the time ``result()`` took. The engine that sent a leg knows its
invocation: the ingress's ``/restate/invocation/{id}/attach`` answers when the
invocation ends, and the engine then wakes this process's waiters on the run,
which read the store again (the leg's last step wrote it before the invocation
ended). Only a wake-up: any failure here (a server away, an invocation it no
longer knows) leaves the waiters to their poll, as before.

An HTTP/1.1 request on an asyncio stream, not ``urllib`` on a thread: an attach
lasts as long as the leg, and a thread held per leg in flight would starve the
default executor that every other store and HTTP call of the process shares.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.parse

__all__ = ["attach_path", "await_end"]


def attach_path(ingress: str, invocation_id: str) -> str:
    """The path of the ingress's attach to ``invocation_id`` (under the ingress's own path)."""
    base = urllib.parse.urlsplit(ingress).path.rstrip("/")
    return f"{base}/restate/invocation/{urllib.parse.quote(invocation_id, safe='')}/attach"


async def await_end(ingress: str, invocation_id: str) -> int | None:
    """Wait until the invocation ends; the ingress's status (None: no answer).

    The ingress answers an attach only once the invocation has its result (any
    result: a failure too), so the status line is the end. 404: it knows no such
    invocation (its result's retention passed).
    """
    url = urllib.parse.urlsplit(ingress)
    secure = url.scheme == "https"
    port = url.port or (443 if secure else 80)
    try:
        reader, writer = await asyncio.open_connection(url.hostname, port, ssl=secure or None)
    except OSError:
        return None
    try:
        request = (
            f"GET {attach_path(ingress, invocation_id)} HTTP/1.1\r\n"
            f"Host: {url.netloc}\r\naccept: application/json\r\nConnection: close\r\n\r\n"
        )
        writer.write(request.encode())
        await writer.drain()
        line = await reader.readline()
    except OSError:
        return None
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    parts = line.split()
    if len(parts) < 2 or not parts[1].isdigit():
        return None
    return int(parts[1])
