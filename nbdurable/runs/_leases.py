"""Who holds a lease: a runtime's name plus the identity of the process it runs in.

A lease names its holder as ``{owner_id}@{host}:{pid}#{boot_id}/{pid_ns}/{start}``:
the kernel's boot id (``/proc/sys/kernel/random/boot_id``, new at every boot), the
process's PID namespace and the process's start time in clock ticks since boot
(``/proc/PID/stat`` field 22). Together they name one process for good: a pid that
the kernel hands to a new process later has another start time, and a pid seen from
another container (another PID namespace) or another machine (another boot id) is
never judged. So a runtime on the same host can tell for sure that the process
holding a lease is gone (a restarted kernel, a killed worker) and take its runs over
at once instead of waiting for the lease to lapse.

Where ``/proc`` is missing (not Linux) a holder is the bare ``owner_id`` and leases
are only taken over once they lapse.
"""

from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass

__all__ = [
    "describe_holder",
    "holder_process",
    "lease_holder",
    "process_gone",
    "this_process",
]

_PROC = "/proc"
_UNSAFE = re.compile(r"[@#:/\s]")


@dataclass(frozen=True)
class ProcessIdentity:
    """One process, for as long as the machine stays up.

    Attributes:
        host: The host name (shown to people; not used to judge).
        boot_id: The kernel's boot id.
        pid_ns: The inode number of the process's PID namespace.
        pid: The process id.
        start: The process's start time in clock ticks since boot.
    """

    host: str
    boot_id: str
    pid_ns: str
    pid: int
    start: str

    @property
    def token(self) -> str:
        """The identity as a lease holder carries it (after the ``#``)."""
        return f"{self.boot_id}/{self.pid_ns}/{self.start}"


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _stat(pid: int) -> tuple[str, str] | None:
    """``(state, start time)`` of a process from ``/proc/PID/stat``; None when it has none."""
    text = _read(f"{_PROC}/{pid}/stat")
    if text is None:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split
    # after the last ')'; the fields from there on start at field 3 (state).
    fields = text[text.rfind(")") + 2 :].split()
    if len(fields) < 20:
        return None
    return fields[0], fields[19]


def _pid_namespace() -> str | None:
    try:
        link = os.readlink(f"{_PROC}/self/ns/pid")  # "pid:[4026531836]"
    except OSError:
        return None
    found = re.search(r"\[(\d+)\]", link)
    return found.group(1) if found else None


_cache: dict[int, ProcessIdentity | None] = {}


def this_process() -> ProcessIdentity | None:
    """The identity of the calling process (computed once per pid: a forked child gets its own)."""
    pid = os.getpid()
    if pid not in _cache:
        boot = _read(f"{_PROC}/sys/kernel/random/boot_id")
        stat = _stat(pid)
        ns = _pid_namespace()
        if boot is None or stat is None or ns is None:
            _cache[pid] = None
        else:
            host = _UNSAFE.sub("-", socket.gethostname()) or "host"
            _cache[pid] = ProcessIdentity(host, boot.strip(), ns, pid, stat[1])
    return _cache[pid]


def lease_holder(owner_id: str) -> str:
    """The name ``owner_id`` holds leases under from this process."""
    me = this_process()
    if me is None:
        return owner_id
    return f"{owner_id}@{me.host}:{me.pid}#{me.token}"


def holder_process(holder: str | None) -> tuple[str, ProcessIdentity] | None:
    """``(owner_id, process)`` of a lease holder, or None when it names no process."""
    if not holder:
        return None
    named, sep, token = holder.rpartition("#")
    owner_id, at, where = named.rpartition("@")
    host, colon, pid = where.rpartition(":")
    parts = token.split("/")
    if not (sep and at and colon and owner_id and pid.isdigit()) or len(parts) != 3:
        return None
    boot_id, pid_ns, start = parts
    if not (boot_id and pid_ns.isdigit() and start.isdigit()):
        return None
    return owner_id, ProcessIdentity(host, boot_id, pid_ns, int(pid), start)


def describe_holder(holder: str | None) -> str:
    """A lease holder as people read it: ``runtime-1a2b (pid 4242 on host)``."""
    if not holder:
        return "no owner"
    parsed = holder_process(holder)
    if parsed is None:
        return holder
    owner_id, process = parsed
    return f"{owner_id} (pid {process.pid} on {process.host})"


def process_gone(holder: str | None) -> bool:
    """Whether the process holding a lease is known to be gone.

    True only when the holder ran on this machine since its last boot, in this
    PID namespace, and its pid now names no process, a zombie (killed, not yet
    reaped) or a newer process (another start time). Anything uncertain (another
    host or container, an unreadable ``/proc``, a holder without an identity) is
    False: its lease is left to lapse.
    """
    parsed = holder_process(holder)
    me = this_process()
    if parsed is None or me is None:
        return False
    process = parsed[1]
    if process.boot_id != me.boot_id or process.pid_ns != me.pid_ns:
        return False
    if process.pid == me.pid:
        return process.start != me.start
    try:
        os.kill(process.pid, 0)  # signal 0: is there a process with this pid at all?
    except ProcessLookupError:
        return True
    except OSError:
        pass  # it exists and belongs to another user
    stat = _stat(process.pid)
    if stat is None:  # exited while we looked, or hidden from us (/proc mounted hidepid)
        return _no_such_process(process.pid)
    state, start = stat
    return state in ("Z", "X", "x") or start != process.start


def _no_such_process(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False
    return False
