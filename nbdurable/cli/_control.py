"""``nbdurable runs approve|deny|respond|resume|cancel|retry|move``: steer runs from a shell.

Every action goes through :class:`~nbdurable.runtime._runtime.DurableRuntime` and
its :class:`~nbdurable.runtime._run.Run` handle, as a notebook would. With
``--agents``, the command also opens a runtime serving those agents and executes
the run in this process until it stops (it waits for a human, or finishes).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

from .._errors import (
    ApprovalExpiredError,
    ApprovalNotPendingError,
    ApproverNotAllowedError,
    ConfigurationError,
    LateResultUndecidedError,
    RunNotFoundError,
)
from ..durable.store import maybe_await
from ..messages import ToolApprovalRequest
from ..runs import (
    ACTIVE_STATES,
    BUSY_STATES,
    EMBEDDED,
    STOP_STATES,
    UNSUCCESSFUL_STATES,
    RunPatch,
    RuntimeRun,
    definition_matches,
    late_result_line,
    latest_verdict,
    mismatch_reason,
    of_engine,
)
from ..runtime._late_results import blind_retry_error
from ..runtime._run import Run, approval_expired
from ._agents import load_all
from ._follow import call_text, follow, last_offset
from ._store import opened_store

__all__ = ["approve", "cancel", "deny", "move", "resume", "retry"]


@asynccontextmanager
async def _runtime(store: Any, agent_specs: Sequence[str] | None) -> AsyncIterator[Any]:
    """A runtime on ``store``: executing the given agents, or a client when there are none."""
    from ..runtime._runtime import DurableRuntime

    agents = load_all(agent_specs)
    if not agents:
        yield DurableRuntime(store=store)
        return
    runtime = await DurableRuntime.open(store=store, agents=agents)
    try:
        yield runtime
    finally:
        await runtime.close()  # runs it was executing go back to pending, nothing lost


async def _handle(runtime: Any, store: Any, run_id: str) -> Run:
    """The run's handle; a run of the loop API (no runtime record) gets a clear error."""
    try:
        return await runtime.get_run(run_id)  # type: ignore[no-any-return]
    except RunNotFoundError:
        if await maybe_await(store.load(run_id)) is None:
            raise
        raise ConfigurationError(
            f"run {run_id!r} has checkpoints but no runtime record (it ran through "
            "generate_text/stream_chat, not DurableRuntime): resume it in Python with "
            f"nbdurable.resume_from_checkpoint(store, {run_id!r}, model=..., tools=..., "
            "approval_responses=[...])"
        ) from None


@asynccontextmanager
async def _steered(args: argparse.Namespace) -> AsyncIterator[tuple[Run, int]]:
    """``args.run``'s handle (executed here with ``--agents``) and its last event's offset."""
    with opened_store(args.store) as store:
        async with _runtime(store, args.agents) as runtime:
            run = await _handle(runtime, store, args.run)
            if args.agents:
                _served(runtime, run.record())
            yield run, await last_offset(store, run.run_id)


async def _ended(args: argparse.Namespace, run: Run, after: int) -> int:
    """Where the steered run stands (executed here until it stops, with ``--agents``)."""
    record = await _execute(run, after, args.timeout) if args.agents else run.record()
    return await _outcome(run, record)


def _served(runtime: Any, record: RuntimeRun) -> None:
    if not of_engine(record, EMBEDDED):
        raise ConfigurationError(
            f"run {record.run_id!r} was submitted to the {record.engine} engine: its workers "
            f"execute it (nbdurable runs move {record.run_id} --engine embedded hands it "
            "to this one)"
        )
    served: list[tuple[str, str]] = runtime.registry.keys()
    if (record.agent_id, record.agent_version) not in served:
        names = ", ".join(f"{a} v{v}" for a, v in served)
        raise ConfigurationError(
            f"run {record.run_id!r} runs agent {record.agent_id!r} version "
            f"{record.agent_version!r}, which --agents does not provide (it gives: {names})"
        )
    definitions = runtime.registry.definitions()
    if definition_matches(record, definitions) is False:
        raise ConfigurationError(
            f"run {record.run_id!r} {mismatch_reason(record, definitions)}: --agents defines "
            f"{record.agent_id!r} version {record.agent_version!r} differently"
        )


def _requests_text(requests: Sequence[ToolApprovalRequest]) -> str:
    return "; ".join(f"{r.approval_id} {call_text(r.tool_name, r.input)}" for r in requests)


_SHORTEST_PREFIX = 12
"""The fewest characters of an approval id that name it (a unique prefix)."""


async def _pick(run: Run, approval_id: str | None) -> ToolApprovalRequest | None:
    """The approval to answer: the named one, or the only one still open.

    None when the named approval no longer waits (the runtime then says which
    verdict won).
    """
    record = run.record()
    if record.state != "waiting_approval":
        if approval_id is not None:
            return None
        answered = latest_verdict(record)
        if answered is not None:  # answered meanwhile: say which verdict won
            raise answered
        raise ConfigurationError(f"run {run.run_id!r} waits for no approval (it is {record.state})")
    pending = await run.pending_approvals()
    record = run.record()  # read after: a verdict that emptied ``pending`` shows here
    open_ = [r for r in pending if r.approval_id not in record.verdicts]
    if approval_id is not None:
        for request in pending:
            if request.approval_id == approval_id:
                return request
        # `runs approvals` in a narrow terminal shows unique prefixes of the ids
        starting = [r for r in open_ if r.approval_id.startswith(approval_id)]
        if len(starting) == 1 and len(approval_id) >= _SHORTEST_PREFIX:
            return starting[0]
        if approval_id in record.decided or record.state != "waiting_approval":
            return None
        raise ConfigurationError(
            f"run {run.run_id!r} has no approval {approval_id!r}; "
            f"it waits for: {_requests_text(open_)}"
        )
    if len(open_) != 1:
        answered = latest_verdict(record) if not open_ else None
        if answered is not None:
            raise answered
        raise ConfigurationError(
            f"run {run.run_id!r} waits for {len(open_)} approvals; name one of: "
            f"{_requests_text(open_)}"
        )
    return open_[0]


async def _outcome(run: Run, record: RuntimeRun) -> int:
    """Print where the run stands; the exit status (1 when it failed or was cancelled)."""
    print(f"{record.run_id}: {record.state}" + (f" ({record.reason})" if record.reason else ""))
    if record.state == "completed":
        print(record.result_text or "")
    elif record.state == "waiting_approval":
        done = record.verdicts
        for request in await run.pending_approvals():
            if request.approval_id not in done:
                print(f"  waits for {call_text(request.tool_name, request.input)}")
                print(f"    nbdurable runs approve {record.run_id} {request.approval_id}")
    elif record.state == "needs_attention":
        print(f"  an interrupted tool call waits: nbdurable runs retry|deny {record.run_id}")
    elif record.state == "failed":
        if record.error:
            print(f"  {record.error}")
        print(f"  let it go on with: nbdurable runs retry {record.run_id}")
    elif record.state in BUSY_STATES:
        print("  a runtime serving its agent executes it (nbdurable worker, or runs resume)")
    return 1 if record.state in UNSUCCESSFUL_STATES else 0


async def _execute(run: Run, after: int, timeout: float | None) -> RuntimeRun:
    """Let this process's runtime execute the run until it stops (showing its events).

    Events after ``after`` are replayed first, so a run that went on and stopped
    again before this call is shown in full.
    """
    record = run.record()
    if (
        record.state in STOP_STATES
        and await last_offset(run.runtime.event_store, run.run_id) <= after
    ):
        return record  # stopped already, nothing new to show
    try:
        return await asyncio.wait_for(follow(run, after), timeout)
    except TimeoutError:
        print(f"  still {run.status} after {timeout:g} s; the run goes on where it is served")
        return run.record()


EXIT_NOT_PENDING = 3
"""Exit status of a verdict on an approval that no longer waits (another verdict won)."""
EXIT_EXPIRED = 4
"""Exit status of an approval whose token is past the maximum age (nothing recorded)."""
EXIT_NOT_ALLOWED = 5
"""Exit status of a verdict from a name the agent does not allow to decide (nothing recorded)."""


_EXITS: tuple[tuple[type[Exception], int], ...] = (
    (ApprovalNotPendingError, EXIT_NOT_PENDING),
    (ApprovalExpiredError, EXIT_EXPIRED),
    (ApproverNotAllowedError, EXIT_NOT_ALLOWED),
)


async def _verdict(args: argparse.Namespace, approved: bool) -> int:
    try:
        return await _record_verdict(args, approved)
    except tuple(kind for kind, _ in _EXITS) as exc:
        print(f"nbdurable: {exc}", file=sys.stderr)
        return next(code for kind, code in _EXITS if isinstance(exc, kind))


async def _approve(
    run: Run,
    request: ToolApprovalRequest,
    fresh: bool,
    by: str | None,
    edited: dict[str, Any] | None = None,
) -> None:
    """Approve ``request`` (with ``edited`` arguments), echoing its token, or a fresh one."""
    if not fresh:
        try:
            await run.approve(request.approval_id, arguments=edited, by=by, via="cli")
        except ApprovalExpiredError as exc:
            age, max_age = exc.age_ms or 0, exc.max_age_ms or 0
            call = call_text(request.tool_name, request.input)
            raise approval_expired(
                run.run_id,
                request.approval_id,
                age,
                max_age,
                f"it asks to run {call}; to approve it now: "
                f"nbdurable runs approve {run.run_id} {request.approval_id} --fresh",
            ) from None
        return
    current = {r.approval_id: r for r in await run.pending_approvals()}
    shown = current.get(request.approval_id, request)
    await run.approve(request.approval_id, arguments=edited, token=shown.token, by=by, via="cli")


def _edited_arguments(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--arguments`` as a JSON object (None without it).

    Raises:
        ConfigurationError: Not JSON, or not a JSON object (nothing was recorded).
    """
    text = getattr(args, "arguments", None)
    if text is None:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigurationError(f"--arguments is not JSON ({exc}); nothing was recorded") from None
    if not isinstance(value, dict):
        raise ConfigurationError("--arguments must be a JSON object ({...}); nothing was recorded")
    return value


async def _record_verdict(args: argparse.Namespace, approved: bool) -> int:
    reply = getattr(args, "reply", None)
    if reply is not None:
        return await _record_reply(args, reply)
    edited = _edited_arguments(args)
    async with _steered(args) as (run, after):
        record, by = run.record(), args.as_name
        if not approved and record.state == "needs_attention" and args.approval_id is None:
            await run.deny(reason=args.reason, by=by, via="cli")
            print(f"settled the interrupted tool call(s) of {run.run_id} as errors")
        else:
            request = await _pick(run, args.approval_id)
            if request is None:  # it no longer waits: the runtime names the winner
                assert args.approval_id is not None
                if approved:
                    await run.approve(args.approval_id, arguments=edited, by=by, via="cli")
                else:
                    await run.deny(args.approval_id, reason=args.reason, by=by, via="cli")
                print(f"{'approved' if approved else 'denied'} {args.approval_id} (again)")
            elif approved:
                await _approve(run, request, getattr(args, "fresh", False), by, edited)
                call = call_text(request.tool_name, request.input)
                if edited is None:
                    print(f"approved {call} ({request.approval_id})")
                else:
                    ran = call_text(request.tool_name, edited)
                    print(f"approved {call} edited to {ran} ({request.approval_id})")
            else:
                await run.deny(request.approval_id, reason=args.reason, by=by, via="cli")
                call = call_text(request.tool_name, request.input)
                print(f"denied {call} ({request.approval_id})")
        return await _ended(args, run, after)


async def _record_reply(args: argparse.Namespace, reply: str) -> int:
    """Answer a pending call in place of its tool (``runs respond``, ``--reply``)."""
    async with _steered(args) as (run, after):
        by = args.as_name
        request = await _pick(run, args.approval_id)
        if request is None:  # it no longer waits: the runtime names the winner
            assert args.approval_id is not None
            await run.respond(args.approval_id, reply, by=by, via="cli")
            print(f"replied to {args.approval_id} (again)")
        else:
            await run.respond(request.approval_id, reply, by=by, via="cli")
            call = call_text(request.tool_name, request.input)
            print(f"replied to {call} in place of the tool ({request.approval_id})")
        return await _ended(args, run, after)


async def respond(args: argparse.Namespace) -> int:
    """Answer a pending call in place of its tool: the reply is the call's result."""
    return await _verdict(args, approved=False)


async def approve(args: argparse.Namespace) -> int:
    """Approve a pending call (its signed token is echoed and verified before it runs)."""
    return await _verdict(args, approved=True)


async def deny(args: argparse.Namespace) -> int:
    """Deny a pending call (or settle an interrupted manual tool call as an error)."""
    return await _verdict(args, approved=False)


async def resume(args: argparse.Namespace) -> int:
    """Execute the run here with the given agents until it stops."""
    with opened_store(args.store) as store:
        after = await last_offset(store, args.run)  # before the runtime may claim the run
        async with _runtime(store, args.agents) as runtime:
            run = await _handle(runtime, store, args.run)
            _served(runtime, run.record())
            record = await _execute(run, after, args.timeout)
            return await _outcome(run, record)


async def cancel(args: argparse.Namespace) -> int:
    """Cancel the run (at once, or once its executing owner settles)."""
    with opened_store(args.store) as store:
        async with _runtime(store, None) as runtime:
            run = await _handle(runtime, store, args.run)
            await run.cancel()
            await _outcome(run, run.record())
            return 0


async def retry(args: argparse.Namespace) -> int:
    """Let a failed or needs_attention run go on (executed here with ``--agents``).

    When the interrupted call already ran on an owner that had lost the run (a
    late result), the retry is refused unless ``--use-late-result`` (settle the
    call with it) or ``--rerun`` (run the call again anyway) says what to do.
    """
    async with _steered(args) as (run, after):
        if args.use_late_result:
            used = await run.use_late_result()
            print(f"{run.run_id}: settled with its late result: {late_result_line(used)}")
        else:
            command = f"nbdurable runs retry {run.run_id}"
            try:
                late = await run.retry(rerun=args.rerun)
            except LateResultUndecidedError as refused:  # said in this front end's words
                use, rerun = f"{command} --use-late-result", f"{command} --rerun"
                raise blind_retry_error(run.run_id, refused.late, use=use, rerun=rerun) from None
            for entry in late:  # --rerun: said all the same
                print(f"{run.run_id}: running it again: {late_result_line(entry)}")
        return await _ended(args, run, after)


async def move(args: argparse.Namespace) -> int:
    """Hand runs to another engine on purpose: its runtimes and workers execute them from now.

    Only a run that no one executes right now moves (not finished, not
    running): its record names the new engine, and its checkpoints, events and
    verdicts stay as they are, so the new engine's next leg goes on from the
    latest checkpoint. A Temporal run moved away keeps its parked workflow,
    which never touches it again (terminate it with the ``temporal`` CLI).
    """
    with opened_store(args.store) as store:
        async with _runtime(store, None) as runtime:
            settled = 0
            for run_id in args.run:
                record = runtime.runtime_store.rt_get(run_id)
                if record is None:
                    raise RunNotFoundError(run_id)
                if record.finished or record.state in ACTIVE_STATES:
                    print(f"{run_id}: not moved, it is {record.state}", file=sys.stderr)
                    continue
                if record.engine == args.engine:
                    print(f"{run_id}: already on the {args.engine} engine")
                    settled += 1
                    continue
                runtime.runtime_store.rt_update(
                    run_id,
                    RunPatch(engine=args.engine, waiting_reason=None, updated_at=runtime.now()),
                    fence=record.fence,  # a claim that came first wins: nothing moves under it
                )
                settled += 1
                print(f"{run_id}: moved to the {args.engine} engine ({record.state})")
            return 0 if settled == len(args.run) else 1
