"""A process that stops itself (SIGSTOP) inside a PostgreSQL store's runtime transaction.

Run as ``python paused_in_transaction.py URL SECONDS``: it opens the store with
``idle_in_transaction_timeout=SECONDS``, locks every run record's row in a
transaction (what a claim or a renewal holds on its run), prints ``holding`` and
stops itself there, as a worker paused by SIGSTOP, a debugger or a suspended VM
would. Once continued it reports what its transaction came to, then makes one
more store call to show the store still works.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from nbdurable.durable._transient import is_transient
from nbdurable.stores.postgres import PostgresSessionStore


def start_paused(url: str, seconds: float) -> subprocess.Popen[str]:
    """Start this script on ``url``; return once it is stopped inside its transaction."""
    proc = subprocess.Popen(
        [sys.executable, __file__, url, str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "holding":
        proc.kill()
        _out, err = proc.communicate()
        raise RuntimeError(f"the paused process did not start: {line!r}\n{err}")
    stat = Path(f"/proc/{proc.pid}/stat")
    while stat.read_text().split()[2] != "T":  # T: stopped
        time.sleep(0.01)
    return proc


def main() -> None:
    store = PostgresSessionStore(sys.argv[1], idle_in_transaction_timeout=float(sys.argv[2]))

    def pause(conn: Any) -> None:
        conn.execute(f'SELECT run_id FROM "{store.schema}".rt_runs FOR UPDATE').fetchall()
        print("holding", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
        conn.execute("SELECT 1")  # the first statement after waking

    try:
        store.run_records.write(pause)
    except Exception as exc:
        print(f"woke to {type(exc).__name__} transient={is_transient(exc)}", flush=True)
    else:
        print("woke and committed", flush=True)
    print(f"store works: {len(store.rt_list())} run(s)", flush=True)
    store.close()


if __name__ == "__main__":
    main()
