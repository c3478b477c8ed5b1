"""Approve-vs-deny races between two processes, on SQLite and PostgreSQL.

    python benchmarks/verdict_race.py --races 200            # SQLite and PostgreSQL
    python benchmarks/verdict_race.py --races 200 --store sqlite --api submit

Each race: a run waits on a gated tool; two racer processes answer the same
approval at the same instant, one approving and one denying (``--api run``:
``Run.approve``/``Run.deny``, as the CLI and ``%durable approve`` do; ``--api
submit``: ``submit_verdict`` with the card's token, as a widget card and the HTTP
bridge do). Prints, per store, how many races had exactly one recorded verdict,
how many told both racers "recorded", and whether the tool executed exactly
when the approval won. The fast version runs in the test suite
(tests/runtime/test_verdict_races.py).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from support.verdict_race_harness import race


def _postgres_url() -> tuple[str, object]:
    from support.pgserver import start_server

    server = start_server()
    return server.dsn, server


async def _one(name: str, url: str, directory: Path, races: int, api: str) -> bool:
    report = await race(url, directory / f"{name}-tools.log", races=races, api=api)
    print(f"== {name} (--api {api})")
    for line in report.lines():
        print(f"  {line}")
    for wrong in report.wrong[:10]:
        print(f"  ! {wrong}")
    return not report.wrong


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--races", type=int, default=200)
    parser.add_argument("--store", choices=["sqlite", "postgres", "both"], default="both")
    parser.add_argument("--api", choices=["run", "submit"], default="run")
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="nbdurable-verdict-race-"))
    ok = True
    if args.store in ("sqlite", "both"):
        url = f"sqlite:///{directory / 'runs.db'}"
        ok &= asyncio.run(_one("sqlite", url, directory, args.races, args.api))
    if args.store in ("postgres", "both"):
        url, server = _postgres_url()
        try:
            ok &= asyncio.run(_one("postgres", url, directory, args.races, args.api))
        finally:
            server.stop()  # type: ignore[attr-defined]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
