"""Lease holders name their process (boot id, PID namespace, pid, start time): only a
process that provably no longer exists on this host counts as gone."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from nbdurable.runs import (
    describe_holder,
    holder_process,
    lease_holder,
    process_gone,
    this_process,
)

pytestmark = pytest.mark.skipif(this_process() is None, reason="needs Linux /proc")


def _start_time(pid: int) -> str:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rfind(")") + 2 :].split()[19]


def _holder_of(pid: int, start: str, *, boot: str | None = None, ns: str | None = None) -> str:
    me = this_process()
    assert me is not None
    return f"worker-1@{me.host}:{pid}#{boot or me.boot_id}/{ns or me.pid_ns}/{start}"


def test_a_holder_names_the_runtime_and_this_process() -> None:
    holder = lease_holder("runtime-abc")
    parsed = holder_process(holder)
    assert parsed is not None
    owner_id, process = parsed
    assert owner_id == "runtime-abc" and process.pid == os.getpid()
    assert process.boot_id == Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    assert describe_holder(holder) == f"runtime-abc (pid {os.getpid()} on {process.host})"
    assert not process_gone(holder)


def test_an_owner_id_with_separators_still_parses() -> None:
    holder = lease_holder("team@lab#1:worker")
    parsed = holder_process(holder)
    assert parsed is not None and parsed[0] == "team@lab#1:worker"


def test_a_live_process_is_not_gone_a_killed_one_is_zombie_or_reaped() -> None:
    child = subprocess.Popen(["sleep", "30"])
    try:
        holder = _holder_of(child.pid, _start_time(child.pid))
        assert not process_gone(holder)
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 10
        while not process_gone(holder):  # a zombie until reaped: gone already
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert os.path.exists(f"/proc/{child.pid}")  # still a zombie
    finally:
        child.kill()
        child.wait()
    assert process_gone(holder)  # reaped


def test_a_reused_pid_is_recognised_by_its_start_time() -> None:
    pid = os.getpid()  # alive, but "started" at another time: the pid was reused
    assert process_gone(_holder_of(pid, str(int(_start_time(pid)) + 1)))
    assert process_gone(_holder_of(1, "999999999999"))


def test_anything_uncertain_is_left_to_the_lease() -> None:
    pid, start = os.getpid(), _start_time(os.getpid())
    dead = 2**22 + 17  # above pid_max: no such process
    assert not process_gone(_holder_of(dead, start, boot="another-boot"))  # another host
    assert not process_gone(_holder_of(dead, start, ns="4026531999"))  # another container
    for holder in (None, "", "worker-7", "temporal:wf-1", "a@b:c#d/e/f", f"x@h:{dead}#b/1"):
        assert not process_gone(holder)
    assert process_gone(_holder_of(dead, start))
    assert not process_gone(_holder_of(pid, start))
