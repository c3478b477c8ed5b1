"""Approve-vs-deny races between two processes on one store.

One process (the caller of :func:`race`) executes the runs: a gated
``drop_table`` tool (it allows edits) whose every execution appends the run id
and the table to a file. Two *racer* processes (this module run as a script)
answer the same pending approval at the same instant, one letting the tool run
(``approve``, or ``edit``: approve with edited arguments) and one not
(``deny``, or ``reply``: answer in place of the tool), each through its own
``DurableRuntime`` client on the store (``Run.approve`` / ``Run.deny`` /
``Run.respond``), or through ``submit_verdict`` with the request's signed token
(``--api submit``: the path of a widget card and of the HTTP bridge).

Used by tests/runtime/test_verdict_races.py (a fast version) and
benchmarks/verdict_race.py (the long one).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import nbdurable as nd
from nbdurable.runtime import Agent, DurableRuntime, Run

HERE = Path(__file__).resolve().parent
SCRIPT = str(Path(__file__).resolve())
LOG_ENV = "NBDURABLE_TEST_VERDICT_LOG"


EDITED_TABLE = "stg_edited"
"""The table an ``edit`` verdict names instead of the model's ``stg``."""
REPLY = "raced reply: keep the table"
"""What a ``reply`` verdict answers."""
WINNER = {"approve": "approved", "edit": "approved", "deny": "denied", "reply": "replied"}
"""The verdict each racer's verb records, as a loser is told it."""


@nd.tool(needs_approval=True, allow_edit=True)
def drop_table(name: str, ctx: nd.ToolContext) -> str:
    """Drop a warehouse table (the side effect a denial must prevent)."""
    fd = os.open(os.environ[LOG_ENV], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, f"{ctx.run_id} {name}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return f"dropped {name}"


gate = Agent(
    "gate",
    nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), "done"]),
    [drop_table],
    version="1",
)


# -- the racer process -------------------------------------------------------------------


async def _answer(
    runtime: DurableRuntime, verb: str, run_id: str, approval_id: str, api: str
) -> str:
    """One verdict; ``ok``, ``conflict <winner>``, or ``refused <Type>: <message>``."""
    from nbdurable.runtime._checked_verdicts import submit_verdict

    run = Run(runtime, run_id)
    edited = {"name": EDITED_TABLE} if verb == "edit" else None
    if api == "submit":
        token = None
        if verb in ("approve", "edit"):
            pending = await run.pending_approvals()
            token = next((r.token for r in pending if r.approval_id == approval_id), None)
        outcome = await submit_verdict(
            runtime,
            run_id,
            approval_id,
            approve=verb in ("approve", "edit"),
            token=token,
            arguments=edited,
            reply=REPLY if verb == "reply" else None,
        )
        if outcome.recorded:
            return "ok"
        winner = getattr(outcome, "winner", None)
        if outcome.state == "stale":
            return f"conflict {winner}"
        return f"refused {outcome.state}: {outcome.message}"
    try:
        if verb in ("approve", "edit"):
            await run.approve(approval_id, arguments=edited)
        elif verb == "reply":
            await run.respond(approval_id, REPLY)
        else:
            await run.deny(approval_id, reason="raced")
    except nd.DurableConflictError as exc:
        return f"conflict {getattr(exc, 'verdict', None)}"
    except nd.NbdurableError as exc:
        return f"refused {type(exc).__name__}: {exc}"
    return "ok"


async def _racer(url: str, api: str) -> None:
    store = nd.open_store(url)
    runtime = DurableRuntime(store=store)  # a client: it executes nothing
    loop = asyncio.get_running_loop()
    print("ready", flush=True)
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line or line.strip() == "quit":
            break
        verb, run_id, approval_id, at = line.split()
        delay = float(at) - time.time()
        if delay > 0:
            await asyncio.sleep(delay)
        try:
            answer = await _answer(runtime, verb, run_id, approval_id, api)
        except Exception as exc:  # reported, never hidden
            answer = f"error {type(exc).__name__}: {exc}"
        print(answer.replace("\n", " "), flush=True)
    store.close()


# -- the coordinator -----------------------------------------------------------------------


@dataclass
class RaceReport:
    """What a series of races found.

    Attributes:
        races: Races run.
        one_winner: Races in which exactly one verdict was recorded.
        both_recorded: Races in which both racers were told their verdict was recorded.
        none_recorded: Races in which neither was.
        approve_won: Races the approval won (alone).
        tool_ran: Races after which the gated tool executed.
        tool_ran_after_denial: Races whose denial was reported recorded, yet the tool ran.
        wrong: Races breaking "exactly one success, tool ran iff the approval won",
            with what each racer said.
        loser_named_winner: Races whose loser was told the winning verdict.
        losers: What the loser said, in races where it was not told the winner.
        seconds: Wall time.
    """

    races: int = 0
    one_winner: int = 0
    both_recorded: int = 0
    none_recorded: int = 0
    approve_won: int = 0
    tool_ran: int = 0
    tool_ran_after_denial: int = 0
    loser_named_winner: int = 0
    wrong: list[str] = field(default_factory=list)
    losers: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def lines(self) -> list[str]:
        """The report as printed lines."""
        return [
            f"races: {self.races}",
            f"exactly one verdict recorded: {self.one_winner}",
            f"both told 'recorded': {self.both_recorded}",
            f"neither recorded: {self.none_recorded}",
            f"approve won: {self.approve_won}",
            f"tool executed: {self.tool_ran}",
            f"tool executed although the denial was reported recorded: "
            f"{self.tool_ran_after_denial}",
            f"loser told the winning verdict: {self.loser_named_winner}",
            f"races breaking the rule: {len(self.wrong)}",
            f"seconds: {self.seconds:.1f}",
        ]


class _Racer:
    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    @classmethod
    async def start(cls, url: str, api: str) -> _Racer:
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            SCRIPT,
            "racer",
            url,
            api,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            env=env,
        )
        racer = cls(process)
        assert await racer.line() == "ready"
        return racer

    async def line(self) -> str:
        assert self.process.stdout is not None
        raw = await asyncio.wait_for(self.process.stdout.readline(), 60)
        if not raw:
            raise RuntimeError(f"racer exited with {await self.process.wait()}")
        return raw.decode().strip()

    def send(self, text: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(f"{text}\n".encode())

    async def stop(self) -> None:
        if self.process.returncode is None:
            self.send("quit")
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                self.process.kill()
                await self.process.wait()


def ran_with(log: Path) -> dict[str, str]:
    """The runs whose gated tool executed, with the table it dropped."""
    if not log.exists():
        return {}
    return dict(line.split(" ", 1) for line in log.read_text().splitlines() if " " in line)


def _ran(log: Path) -> set[str]:
    return set(ran_with(log))


async def race(
    url: str,
    log: Path,
    *,
    races: int,
    api: str = "run",
    runtime: DurableRuntime | None = None,
    agent: str = "gate",
    ran: Callable[[str], bool] | None = None,
    verbs: tuple[str, str] = ("approve", "deny"),
) -> RaceReport:
    """Run ``races`` approve-vs-deny races on the store at ``url``; what they found.

    ``verbs``: what the two racers say, the first one a verdict that runs the
    tool (``approve``, ``edit``), the second one that does not (``deny``,
    ``reply``); they swap racers every other race.

    By default this process executes the runs (the ``gate`` agent, its tool
    logging to ``log``). ``runtime``: an open runtime whose engine executes
    them instead (a Temporal client), with ``agent`` its gated agent and
    ``ran(run_id)`` telling whether the gated tool executed.
    """
    previous = os.environ.get(LOG_ENV)
    os.environ[LOG_ENV] = str(log)  # the gated tool of this process writes there
    report = RaceReport()
    started = time.monotonic()
    racers = [await _Racer.start(url, api), await _Racer.start(url, api)]
    store = None
    try:
        if runtime is None:
            store = nd.open_store(url)
            async with await DurableRuntime.open(
                store=store, agents=[gate], poll_interval=0.01, flush_interval=0.01
            ) as own:
                await _races(own, racers, report, races, "gate", lambda r: r in _ran(log), verbs)
        else:
            assert ran is not None
            await _races(runtime, racers, report, races, agent, ran, verbs)
    finally:
        for racer in racers:
            await racer.stop()
        if store is not None:
            store.close()
        if previous is None:
            os.environ.pop(LOG_ENV, None)
        else:
            os.environ[LOG_ENV] = previous
    report.seconds = time.monotonic() - started
    return report


async def _races(
    runtime: DurableRuntime,
    racers: list[_Racer],
    report: RaceReport,
    races: int,
    agent: str,
    ran: Callable[[str], bool],
    pair: tuple[str, str] = ("approve", "deny"),
) -> None:
    for i in range(races):
        run = await runtime.submit(agent, f"drop staging table {i}")
        await asyncio.wait_for(run.wait("waiting_approval"), 60)
        approval_id = (await run.pending_approvals())[0].approval_id
        verbs = pair if i % 2 == 0 else pair[::-1]
        at = time.time() + 0.03
        for racer, verb in zip(racers, verbs, strict=True):
            racer.send(f"{verb} {run.run_id} {approval_id} {at}")
        said = dict(zip(verbs, [await r.line() for r in racers], strict=True))
        await asyncio.wait_for(run.wait(), 60)
        # the scoring speaks of the verdict that runs the tool and the one that does not
        said = {"approve": said[pair[0]], "deny": said[pair[1]]}
        _score(report, run.run_id, said, ran(run.run_id), (WINNER[pair[0]], WINNER[pair[1]]))


def _score(
    report: RaceReport,
    run_id: str,
    said: dict[str, str],
    ran: bool,
    names: tuple[str, str] = ("approved", "denied"),
) -> None:
    report.races += 1
    approved, denied = said["approve"] == "ok", said["deny"] == "ok"
    report.tool_ran += ran
    report.tool_ran_after_denial += ran and denied
    if approved and denied:
        report.both_recorded += 1
    elif not approved and not denied:
        report.none_recorded += 1
    else:
        report.one_winner += 1
        report.approve_won += approved
        winner, loser = (names[0], "deny") if approved else (names[1], "approve")
        if said[loser] == f"conflict {winner}":
            report.loser_named_winner += 1
        else:
            report.losers.append(f"{run_id}: {loser} -> {said[loser]!r}")
    if approved == denied or ran != approved:
        report.wrong.append(
            f"{run_id}: approve -> {said['approve']!r}, deny -> {said['deny']!r}, tool ran: {ran}"
        )


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "racer":
    asyncio.run(_racer(sys.argv[2], sys.argv[3]))
