"""The Run handle: a run owned by the runtime, watched and steered from anywhere."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Coroutine, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from .._errors import (
    ConfigurationError,
    OutputValidationError,
    RunEndedError,
    RunNotFoundError,
    WaitingForHumanError,
)
from .._sync import run_here, run_sync
from ..durable._offload import offload
from ..durable._signer import resign_if_expired
from ..durable.store import Armed
from ..events._model import Event
from ..events._subscribe import subscribe, wait_for_run
from ..history import History
from ..loop._output import OutputSpec
from ..messages import ToolApprovalRequest, Usage, VerdictSource
from ..runs import (
    ACTIVE_STATES,
    HUMAN_STATES,
    RETRYABLE_STATES,
    RUN_STATES,
    VIAS,
    Grant,
    LateResult,
    RunPatch,
    RuntimeRun,
    ToolIntent,
    approval_expired,
    claimed_source,
    undecided_late_results,
)
from ._edits import check_reply
from ._in_flight import landed
from ._late_results import blind_retry_error, completed, use_late_result
from ._record_mirror import read_record
from ._run_result import RunFailedError, RunResult
from ._verdict_write import write_verdict
from ._waiting import Deadline, local_end, wanted_states

if TYPE_CHECKING:
    from ._seam import RunControl

__all__ = [
    "HUMAN_STATES",
    "VIAS",
    "Run",
    "RunFailedError",
    "RunResult",
    "approval_expired",
    "claimed_source",
]

T = TypeVar("T")


class Run:
    """A handle on a runtime run. Cheap: it holds only the runtime and the run id.

    Watching (``result()``, ``stream()``) never affects the run: cancelling a task
    that awaits them drops only that watcher. ``cancel()`` cancels the run.
    """

    def __init__(self, runtime: RunControl, run_id: str) -> None:
        self.runtime = runtime
        self.run_id = run_id

    def __repr__(self) -> str:
        return f"Run({self.run_id!r})"

    def record(self) -> RuntimeRun:
        """The run's current record.

        Raises:
            RunNotFoundError: The run was deleted.
        """
        record = read_record(self.runtime, self.run_id)
        if record is None:
            raise RunNotFoundError(self.run_id)
        return record

    async def _fetch(self) -> RuntimeRun:
        """:meth:`record`, read from the store (never the mirror) without blocking the loop."""
        record = await offload(self.runtime.runtime_store.rt_get, self.run_id)
        if record is None:
            raise RunNotFoundError(self.run_id)
        return record

    @property
    def status(self) -> str:
        """The current run state (see :meth:`record`)."""
        return self.record().state

    async def wait(self, *states: str, timeout: float | None = None) -> RuntimeRun:
        """Wait until the run is in one of ``states``; return its record.

        Args:
            *states: Run states to return on; none means any final state
                (``completed``, ``failed``, ``cancelled``).
            timeout: Seconds to wait at most (None: as long as it takes).

        Raises:
            RunEndedError: The run is final in a state not among ``states``
                (it can no longer reach them by itself); carries the state and reason.
            TimeoutError: ``timeout`` passed first.
            ConfigurationError: A name that is not a run state.
            RunNotFoundError: The run was deleted.
        """
        wanted = wanted_states(states, RUN_STATES)
        deadline = Deadline(timeout, poll_interval=self.runtime.poll_interval)
        while True:
            # armed before the read: a change written meanwhile on a store thread wakes it
            armed = Armed(self.runtime.store, self.run_id)
            try:
                await local_end(self, None, wanted, deadline)  # executed here: its end first
                record = await self._fetch()
                if record.state in wanted:
                    return record
                if record.finished:
                    raise RunEndedError(
                        self.run_id, record.state, reason=record.reason, wanted=tuple(states)
                    )
                if await local_end(self, record.state, wanted, deadline):
                    continue  # executed here: waited for its end
                pause = deadline.polling(f"run {self.run_id!r}", record.state)
                await wait_for_run(self.runtime.event_store, self.run_id, pause, armed=armed)
            finally:
                armed.disarm()

    async def result(self) -> RunResult:
        """Wait for the run to finish; its result when completed.

        Raises:
            RunFailedError: The run failed or was cancelled.
        """
        return await self._result_of(await self.wait())

    def wait_sync(self, *states: str, timeout: float | None = None) -> RuntimeRun:
        """Block until the run is in one of ``states``; its record (see :meth:`wait`).

        Works in a script, in IPython without autoawait, in a notebook cell and
        in a widget callback (see :func:`nbdurable.run_sync`): the runtime's
        tasks on this thread's loop go on while it blocks.

        From another thread it waits on that thread, reading the store: its
        ``timeout`` holds while the runtime's loop is busy, and a loop's thread
        that joins it does not wait for ever (a run that the busy loop executes
        does not move meanwhile, though).

        A kernel handles one message at a time, so while a cell blocks a click
        on an approval card is not delivered. Hence, unless asked for, the wait
        stops as soon as the run waits for a human (``waiting_approval``,
        ``needs_attention``) and raises :class:`WaitingForHumanError`: decide,
        then wait again. (To block through approvals made in another process,
        ``nd.run_sync(run.wait())``.)

        Raises:
            WaitingForHumanError: The run waits for a human, and its state was not asked for.
            RunEndedError: The run is final in a state not among ``states``.
            TimeoutError: ``timeout`` passed first.
        """
        return self._blocking(self._wait_unless_human(states, timeout))

    def result_sync(self, *, timeout: float | None = None) -> RunResult:
        """Block until the run finishes; its result (see :meth:`result` and :meth:`wait_sync`).

        Raises:
            WaitingForHumanError: The run waits for an approval or for attention:
                decide, then call ``result_sync()`` again.
            RunFailedError: The run failed or was cancelled.
            TimeoutError: ``timeout`` passed first.
        """

        async def result() -> RunResult:
            return await self._result_of(await self._wait_unless_human((), timeout))

        return self._blocking(result())

    def _blocking(self, awaitable: Coroutine[Any, Any, T]) -> T:
        """Run a blocking wait: on the runtime's loop, unless another thread runs it.

        A runtime opened on a loop that is not running (a script's) moves only
        while that loop runs, so the wait drives it; a loop running in this
        thread is nested (see :func:`run_sync`). A loop running in another
        thread (a kernel's, while the caller is a thread of its own) is left
        alone: the wait reads the store on this thread. Handed to that loop, it
        would start only once the loop is free, so its timeout would not hold
        while a cell or a long synchronous step keeps the loop busy, and a
        loop's thread that joins this one would wait for ever.
        """
        home = self.runtime.engine.home_loop()
        if home is not None and not home.is_closed() and home.is_running():
            return run_here(awaitable)
        return run_sync(awaitable, loop=home)

    async def _wait_unless_human(
        self, states: tuple[str, ...], timeout: float | None
    ) -> RuntimeRun:
        """Like :meth:`wait`, but stops on a human-wait state not among ``states``."""
        wanted = wanted_states(states, RUN_STATES)
        while True:
            try:
                record = await self.wait(*(wanted | HUMAN_STATES), timeout=timeout)
            except RunEndedError as exc:
                raise RunEndedError(
                    self.run_id, exc.state, reason=exc.reason, wanted=tuple(states)
                ) from None
            if record.state in wanted:
                return record
            # a card click delivered before this wait began is still being recorded
            if not await landed(self.run_id):
                break
        pending = await self._stored_approvals()
        raise WaitingForHumanError(
            self.run_id,
            record.state,
            reason=record.reason,
            approval_ids=tuple(
                r.approval_id for r in pending if r.approval_id not in record.verdicts
            ),
        )

    async def _result_of(self, record: RuntimeRun) -> RunResult:
        """The result of a run whose final record is ``record``."""
        if record.state != "completed":
            raise RunFailedError(record)
        checkpoint = await offload(self.runtime.store.load, self.run_id)
        messages = checkpoint.messages if checkpoint is not None else History()
        usage = checkpoint.usage if checkpoint is not None else Usage()
        text = record.result_text or ""
        agent = self.runtime.registry.get(record.agent_id, record.agent_version)
        spec = OutputSpec.of(agent.output_type) if agent is not None else None
        output = None
        if spec is not None:
            # a run that ended on max_steps has no final answer to validate
            with contextlib.suppress(OutputValidationError):
                output = spec.parse(text)
        return RunResult(self.run_id, text, messages, usage, output)

    def stream(self, after: int = 0) -> AsyncIterator[Event]:
        """The run's event log after ``after``: replay, then live, until the run finishes."""
        return subscribe(
            self.runtime.event_store,
            self.run_id,
            after=after,
            wait=True,
            poll_interval=self.runtime.poll_interval,
        )

    async def pending_approvals(self) -> tuple[ToolApprovalRequest, ...]:
        """The approvals the run waits for (signed requests, tokens included).

        A request whose token is past the runtime's ``approval_max_age_ms`` comes
        with a fresh token (same request, same run binding, issued now): this
        process holds the secret, so a run parked longer than the maximum age is
        still decidable, and only by a token younger than it.
        """
        requests = await self._stored_approvals()
        max_age = self.runtime.approval_max_age_ms
        if max_age is None or not requests:
            return requests
        signer = self.runtime.signer
        return tuple(resign_if_expired(signer, request, max_age) for request in requests)

    async def approve(
        self,
        approval_id: str | None = None,
        *,
        arguments: Mapping[str, Any] | None = None,
        token: str | None = None,
        by: str | None = None,
        via: str = "api",
    ) -> None:
        """Approve a pending call (the only one when ``approval_id`` is None).

        The request's signed token is echoed by default; the token is verified
        before the approved tool runs, so a forged one is a denial. The verdict
        records who gave it: ``by`` (default: the name this process claims,
        ``NBDURABLE_USER`` or the OS user), recorded as claimed, not
        authenticated, and ``via`` (how: ``api``, ``magic``, ``widget``, ``cli``).

        With ``arguments`` the call runs with them instead of the model's (the
        tool must allow it: ``@tool(allow_edit=True)``); they are validated
        against the tool's schema first. The token still binds the call as
        the model made it; the record keeps both argument sets, and the
        model's history shows the call that ran, with a note that a human
        edited it.

        Raises:
            EditNotAllowedError: ``arguments`` for a tool that does not allow
                edits; nothing was recorded.
            InvalidEditError: ``arguments`` that do not fit the tool's schema;
                nothing was recorded.
            ApprovalNotPendingError: Another verdict on the approval won (its
                ``verdict`` names it), or the run no longer waits for it.
            ApprovalExpiredError: The token is older than the runtime's
                ``approval_max_age_ms``; the request still waits:
                :meth:`pending_approvals` gives it again with a fresh token.
            ApproverNotAllowedError: The agent does not allow ``by`` to decide
                this tool's calls (``Agent(approvers=...)``), or ``by`` submitted
                the run and the agent has ``submitter_may_approve=False``.
            ConfigurationError: The run has no such approval, or several are
                pending and none is named.
        """
        await self.record_verdict(
            approval_id,
            approved=True,
            token=token,
            reason=None,
            max_age_ms=self.runtime.approval_max_age_ms,
            source=claimed_source(by, via),
            arguments=arguments,
        )

    async def respond(
        self,
        approval_id: str | None,
        text: str,
        *,
        by: str | None = None,
        via: str = "api",
    ) -> None:
        """Answer a pending call in place of its tool: ``text`` is the call's result.

        The tool does not run; the call is settled with ``text`` as its result
        (not an error) and the model goes on. Recorded as a reply (kind
        ``replied``) with ``by`` and ``via`` as with :meth:`approve`; like a
        denial it needs no token. ``approval_id`` None answers the only open one.

        Raises:
            ApprovalNotPendingError: Another verdict on the approval won, or the
                run no longer waits for it.
            ApproverNotAllowedError: ``by`` may not decide this tool's calls.
            ConfigurationError: Blank ``text``, no such approval, or several
                pending and none named.
        """
        await self.record_verdict(
            approval_id,
            approved=False,
            token=None,
            reason=None,
            max_age_ms=None,
            source=claimed_source(by, via),
            reply=check_reply(text),
        )

    async def deny(
        self,
        approval_id: str | None = None,
        *,
        reason: str | None = None,
        by: str | None = None,
        via: str = "api",
    ) -> None:
        """Deny a pending call; the model sees an is_error result with ``reason``.

        For a run in ``needs_attention`` because a ``manual`` tool was
        interrupted, ``deny()`` settles that call as an is_error result instead.
        ``by`` and ``via`` are recorded as with :meth:`approve`.

        Raises:
            ApprovalNotPendingError: Another verdict on the approval won, or the
                run no longer waits for it.
            ApproverNotAllowedError: The agent does not allow ``by`` to decide
                this tool's calls.
        """
        record = await self._fetch()
        if record.state == "needs_attention":
            await self._settle_interrupted(record, reason or "Denied after an interruption.")
            return
        await self.record_verdict(
            approval_id,
            approved=False,
            token=None,
            reason=reason,
            max_age_ms=None,
            source=claimed_source(by, via),
        )

    async def grant(
        self,
        tool: str,
        *,
        minutes: float | None = None,
        seconds: float | None = None,
        match: Mapping[str, Any] | None = None,
        agent_path: Sequence[str] = (),
        by: str | None = None,
        via: str = "api",
    ) -> Grant:
        """Approve every call of ``tool`` in this run until the grant expires (a standing approval).

        Each gated call it covers runs with no card and no wait, and its
        ``approval_resolved`` event names the grant (``source.via == "grant"``).
        Calls the run waits on now, and that it covers, are approved at once.
        The grant is signed, bound to this run, the tool, the rule, the agent
        path and the expiry, recorded in the run record and announced by a
        ``grant_added`` event; it is verified again at every call.

        Args:
            tool: The tool whose calls it approves.
            minutes: How long it covers calls (fractions allowed); 30 by default.
            seconds: The duration in seconds instead.
            match: Argument rules every covered call must satisfy, e.g.
                ``{"name": "stg_*"}`` (a glob), ``{"name": {"prefix": "stg_"}}``,
                ``{"name": {"equals": "x"}}`` (see :mod:`nbdurable.runs`).
            agent_path: The sub-agent whose calls it covers (empty: the run's own
                agent's calls only; a sub-agent's only when named).
            by: Who grants it (default ``NBDURABLE_USER``, else the OS user);
                recorded, not authenticated.
            via: How it was given: ``api``, ``magic``, ``widget``, ``cli`` or ``http``.

        Returns:
            The grant (its ``grant_id`` revokes it).

        Raises:
            ConfigurationError: The run is finished, the agent has no such tool,
                or a duration, rule or path is invalid.
        """
        from ._grants import add_grant

        return await add_grant(
            self,
            tool,
            minutes=minutes,
            seconds=seconds,
            match=match,
            agent_path=agent_path,
            by=by,
            via=via,
        )

    async def revoke(self, grant_id: str, *, by: str | None = None, via: str = "api") -> None:
        """Revoke a standing approval: from the next gated call on, it covers nothing.

        Recorded in the run record and announced by a ``grant_revoked`` event.
        Revoking twice is a no-op.

        Raises:
            ConfigurationError: The run has no grant ``grant_id``.
        """
        from ._grants import revoke_grant

        await revoke_grant(self, grant_id, by=by, via=via)

    async def cancel(self) -> None:
        """Cancel the run: at once when it is not executing, else once its callbacks settle."""
        runtime = self.runtime
        record = await self._fetch()
        if record.finished:
            return
        if record.state in ACTIVE_STATES:
            await offload(runtime.set_state, self.run_id, RunPatch(state="cancelling"))
            runtime.cancel_local(self.run_id)
            return
        cancelled = RunPatch(state="cancelled", reason="cancelled")
        await offload(runtime.set_state, self.run_id, cancelled)

    async def retry(self, *, rerun: bool = False) -> list[LateResult]:
        """Let a failed or needs_attention run go on.

        The model gets a fresh attempt budget, and an interrupted ``manual``
        tool runs again (not blind: one with a late result, run on an owner that
        had lost the run, only with ``rerun=True``; or :meth:`use_late_result`).
        A graph node whose dependencies have not all completed goes back to
        ``queued`` and starts once they have. The new leg's ``run_started``
        event says ``retried: true``; it follows the failed run's terminal
        ``run_error`` in the log.

        Args:
            rerun: Run an interrupted call again even when it has a late result.

        Returns:
            The late results of the calls it runs again (``rerun=True``).

        Raises:
            ConfigurationError: The run is not failed or needs_attention.
            LateResultUndecidedError: A late result is left to decide and
                ``rerun`` is False.
        """
        record = await self._fetch()
        if record.state not in RETRYABLE_STATES:
            raise ConfigurationError(
                f"only failed or needs_attention runs retry, not {record.state}"
            )
        interrupted = await offload(self._interrupted)
        late = undecided_late_results(record, interrupted)
        if late and not rerun:
            use, again = "await run.use_late_result()", "await run.retry(rerun=True)"
            raise blind_retry_error(self.run_id, late, use=use, rerun=again)
        started = [i.tool_call_id for i in interrupted]
        ready = await offload(self._dependencies_completed, record)
        going_on = RunPatch(
            state="pending" if ready else "queued",
            reason=None,
            error=None if ready else record.error,
            model_attempts=0,
            next_attempt_at=None,
            rerun_tool_calls=started,
            retried=True,
        )
        await offload(self.runtime.set_state, self.run_id, going_on)
        if not ready and await offload(self._dependencies_completed, record):
            # the last dependency completed meanwhile (the store settled the graph
            # before this node was queued again): let it go on now
            current = await self._fetch()
            if current.state == "queued":
                pending = RunPatch(state="pending", error=None)
                await offload(self.runtime.set_state, self.run_id, pending, fence=current.fence)
        return late

    async def use_late_result(self, tool_call_id: str | None = None) -> LateResult:
        """Settle an interrupted call with its late result (:func:`.use_late_result`)."""
        return await use_late_result(self, tool_call_id)

    def _dependencies_completed(self, record: RuntimeRun) -> bool:
        """Whether every graph dependency of the run completed (True without any)."""
        store = self.runtime.runtime_store
        deps = [store.rt_get(run_id) for run_id in record.depends_on]
        return all(dep is not None and dep.state == "completed" for dep in deps)

    # -- internals -------------------------------------------------------------------

    def _interrupted(self) -> list[ToolIntent]:
        return [
            i for i in self.runtime.runtime_store.rt_intents(self.run_id) if i.state == "started"
        ]

    async def _stored_approvals(self) -> tuple[ToolApprovalRequest, ...]:
        """The pending requests as the checkpoint holds them (tokens as signed then)."""
        if (await self._fetch()).state != "waiting_approval":
            return ()
        checkpoint = await offload(self.runtime.store.load, self.run_id)
        return checkpoint.pending_approvals if checkpoint is not None else ()

    async def record_verdict(
        self,
        approval_id: str | None,
        *,
        approved: bool,
        token: str | None,
        reason: str | None,
        max_age_ms: int | None,
        source: VerdictSource | None = None,
        arguments: Mapping[str, Any] | None = None,
        reply: str | None = None,
    ) -> None:
        """Record one verdict through the store's conditional write (one verdict wins).

        The lower-level step behind ``approve``, ``respond`` and ``deny``; its
        arguments and errors are those of
        :func:`~nbdurable.runtime._verdict_write.write_verdict`.
        """
        pending = await self._stored_approvals()
        record = await self._fetch()  # read after: a verdict that emptied ``pending`` shows here
        await write_verdict(
            self.runtime,
            record,
            pending,
            approval_id,
            approved=approved,
            token=token,
            reason=reason,
            max_age_ms=max_age_ms,
            source=source,
            arguments=arguments,
            reply=reply,
        )

    async def _settle_interrupted(self, record: RuntimeRun, reason: str) -> None:
        from ..messages import ToolResultPart

        store = self.runtime.runtime_store
        for intent in await offload(self._interrupted):
            result = ToolResultPart(
                tool_call_id=intent.tool_call_id,
                tool_name=intent.tool_name,
                result=reason,
                is_error=True,
            )
            await offload(store.rt_intent, completed(intent, result), fence=record.fence)
        await offload(self.runtime.set_state, self.run_id, RunPatch(state="pending", reason=None))
