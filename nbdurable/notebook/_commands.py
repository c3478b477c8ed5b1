"""What each ``%durable`` subcommand does, given the kernel session and the user namespace.

The runtime's steering calls (verdicts, fork, cancel, retry) are coroutines; a
handler waits for each through :func:`~nbdurable._sync.run_sync` (the kernel's
loop runs nested meanwhile, see :mod:`._session`) because what it prints next
depends on the outcome.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from typing import Any

from .._display import call_text
from .._errors import (
    ApprovalExpiredError,
    ApprovalNotPendingError,
    ConfigurationError,
    DurableConflictError,
    LateResultUndecidedError,
)
from .._sync import run_sync
from ..messages import ToolApprovalRequest
from ..runs import (
    BUSY_STATES,
    UNFINISHED_STATES,
    AttentionAction,
    RuntimeRun,
    claimed_source,
    definition_matches,
    late_result_line,
    mismatch_reason,
    of_engine,
)
from ..runtime._attention import attention_token, decide_attention
from ..runtime._grants import DEFAULT_GRANT_MINUTES
from ..runtime._late_results import blind_retry_error
from ..runtime._run import Run, approval_expired
from . import _views
from ._agents import agents_in, register, run_agent
from ._lease import lease_wait
from ._next_step import next_step, serves_here
from ._session import NotebookSession, check_exists, check_run

__all__ = ["HANDLERS"]

Namespace = Mapping[str, Any]

"""Run states in which a runtime serving the run's agent executes it by itself."""


def _store(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    from ..stores import missing_path

    if args.url is not None:
        nb.use_store(args.url)
    new = missing_path(nb.url)
    print(f"store: {nb.url}" + (" (new: the first run submitted here creates it)" if new else ""))


def _runs(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> Any:
    from .. import inspect

    if args.all:
        from ..inspect._views import runs_every_column

        return runs_every_column(nb.reading_store, status=args.status, graph=args.graph)
    return inspect.runs(nb.reading_store, status=args.status, graph=args.graph, compact=True)


def _graphs(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> Any:
    from .. import inspect

    return inspect.graphs(nb.reading_store)


def _show(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    check_exists(nb, args.run)
    record = nb.runtime.runtime_store.rt_get(args.run)
    if record is not None and record.state in UNFINISHED_STATES:
        # the view's Approve / Deny must move the run on: after a kernel restart this
        # kernel serves the run's agent once its cell ran again
        try:
            if run_agent(nb.runtime, record, ns) is not None:
                nb.runtime.wake()
        except DurableConflictError as exc:
            print(f"nbdurable: {exc}", file=sys.stderr)
    _views.show(_views.run_view(nb.runtime, args.run))


def _history(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> Any:
    from .. import inspect

    frame = inspect.history(nb.reading_store, args.run)
    if not args.browse:
        return frame
    _views.show(_views.history_view(nb.runtime, args.run))
    return None


def _explain(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> Any:
    from .. import inspect

    return inspect.explain(nb.reading_store, args.run, context="notebook")


def _approvals(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> Any:
    from .. import inspect

    return inspect.approvals(
        nb.reading_store,
        run_id=args.run,
        status=None if args.all else ("pending", "expired"),
        max_age_ms=nb.runtime.approval_max_age_ms,
    )


def _requests(requests: list[ToolApprovalRequest]) -> str:
    return "; ".join(f"{r.approval_id} {call_text(r.tool_name, r.input)}" for r in requests)


def _pick(run: Run, approval_id: str | None) -> ToolApprovalRequest:
    """The approval to answer: the named one, or the only one still open."""
    record = run.record()
    if record.state != "waiting_approval":
        raise ConfigurationError(f"run {run.run_id!r} waits for no approval (it is {record.state})")
    pending = run_sync(run.pending_approvals())
    open_ = [r for r in pending if r.approval_id not in record.verdicts]
    for request in pending:
        if request.approval_id == approval_id:
            return request
    if approval_id is not None:
        decided = run.record().decided.get(approval_id)
        if decided is not None:  # answered in an earlier round of this run
            verdict = "approved" if decided.approved else "denied"
            raise ApprovalNotPendingError(run.run_id, approval_id, verdict=verdict)
        raise ConfigurationError(
            f"run {run.run_id!r} has no approval {approval_id!r}; it waits for: {_requests(open_)}"
        )
    if len(open_) != 1:
        raise ConfigurationError(
            f"run {run.run_id!r} waits for {len(open_)} approvals; name one of: {_requests(open_)}"
        )
    return open_[0]


def _goes_on(nb: NotebookSession, run: Run, ns: Namespace) -> None:
    """Say truthfully where the run goes from here.

    It resumes in this kernel (its agent is here, registered from the notebook when
    needed), on another live worker, or it waits for a worker serving its agent
    (and the line says how to provide one).
    """
    record = run.record()
    line = f"{run.run_id}: {record.state}"
    if record.state in BUSY_STATES:
        run_agent(nb.runtime, record, ns)  # registers the notebook's agent, when it has it
        then = run_sync(next_step(nb.runtime, run.run_id, store_url=nb.url))
        if then:
            line += f"; {then}"
        wait = lease_wait(record, nb.runtime.owner_id)
        if wait is not None and serves_here(nb.runtime, record):
            line += f"; {wait.text()}"
    print(line)


def _edits(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--arguments`` as a JSON object (None without it); refuses mixed verdict options."""
    if args.reason is not None and not args.deny:
        raise ConfigurationError("--reason goes with --deny")
    if sum(x is not None and x is not False for x in (args.arguments, args.reply, args.deny)) > 1:
        raise ConfigurationError("use one of --deny, --arguments and --reply")
    if args.arguments is None:
        return None
    try:
        edited = json.loads(args.arguments)
    except ValueError as exc:
        raise ConfigurationError(f"--arguments is not JSON ({exc}); nothing was recorded") from None
    if not isinstance(edited, dict):
        raise ConfigurationError("--arguments must be a JSON object; nothing was recorded")
    return edited


def _approve(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    edited = _edits(args)
    run = check_run(nb, args.run)
    if args.reply is not None:  # None: the only open request
        run_sync(run.respond(args.approval_id, args.reply, by=nb.user, via="magic"))
        print(f"replied to {args.approval_id or 'the pending call'} in place of the tool")
        _goes_on(nb, run, ns)
        return
    if args.deny and args.approval_id is None and run.record().state == "needs_attention":
        _attend(nb, run, "settle", reason=args.reason)
    elif args.approval_id is not None and run.record().state != "waiting_approval":
        # answered already, or the run moved on: the runtime says which verdict won
        # (ApprovalNotPendingError), or that this very verdict was recorded before
        if args.deny:
            run_sync(run.deny(args.approval_id, reason=args.reason, by=nb.user, via="magic"))
        else:
            run_sync(run.approve(args.approval_id, arguments=edited, by=nb.user, via="magic"))
        print(f"{'denied' if args.deny else 'approved'} {args.approval_id} (recorded before)")
    else:
        request = _pick(run, args.approval_id)
        call = call_text(request.tool_name, request.input)
        if args.deny:
            run_sync(run.deny(request.approval_id, reason=args.reason, by=nb.user, via="magic"))
            print(f"denied {call} ({request.approval_id})")
        else:
            _approve_now(run, request, fresh=args.fresh, by=nb.user, edited=edited)
            ran = "" if edited is None else f" edited to {call_text(request.tool_name, edited)}"
            print(f"approved {call}{ran} ({request.approval_id})")
    _goes_on(nb, run, ns)


def _approve_now(
    run: Run,
    request: ToolApprovalRequest,
    *,
    fresh: bool,
    by: str | None,
    edited: dict[str, Any] | None = None,
) -> None:
    """Approve with the request's token; ``fresh``: with one signed now (past the max age)."""
    if fresh:  # pending_approvals() re-signs a token past the maximum age
        shown = {r.approval_id: r for r in run_sync(run.pending_approvals())}
        token = shown.get(request.approval_id, request).token
        run_sync(
            run.approve(request.approval_id, arguments=edited, token=token, by=by, via="magic")
        )
        return
    try:
        # echoes the token the request got
        run_sync(run.approve(request.approval_id, arguments=edited, by=by, via="magic"))
    except ApprovalExpiredError as exc:
        call = call_text(request.tool_name, request.input)
        raise approval_expired(
            run.run_id,
            request.approval_id,
            exc.age_ms or 0,
            exc.max_age_ms or 0,
            f"it asks to run {call}; to approve it now: "
            f"%durable approve {run.run_id} {request.approval_id} --fresh",
        ) from None


def _grant_rules(rules: list[str]) -> dict[str, Any]:
    """``--match`` words as grant rules: ``k=GLOB``, ``k^=PREFIX``, ``k==VALUE`` (a string)."""
    match: dict[str, Any] = {}
    for rule in rules:
        for sign, kind in (("==", "equals"), ("^=", "prefix"), ("=", "glob")):
            name, found, value = rule.partition(sign)
            if found and name and "=" not in name and "^" not in name:
                match[name] = {kind: value}
                break
        else:
            raise ConfigurationError(
                f"--match takes name=GLOB, name^=PREFIX or name==VALUE, not {rule!r}"
            )
    return match


def _grant(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    run = check_run(nb, args.run)
    path = tuple(args.agent.split("/")) if args.agent else ()
    grant = run_sync(
        run.grant(
            args.tool,
            minutes=args.minutes,
            match=_grant_rules(args.match),
            agent_path=path,
            by=nb.user,
            via="magic",
        )
    )
    covered = f"every {grant.tool} call" + (f" of {'/'.join(path)}" if path else "")
    if grant.match:
        covered += f" matching {grant.match}"
    minutes = args.minutes if args.minutes is not None else DEFAULT_GRANT_MINUTES
    print(
        f"granted {grant.grant_id}: {covered} in {run.run_id} runs without approval for "
        f"{minutes:g} min (by {grant.granted_by}); "
        f"%durable revoke {run.run_id} {grant.grant_id} ends it"
    )


def _revoke(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    run = check_run(nb, args.run)
    run_sync(run.revoke(args.grant_id, by=nb.user, via="magic"))
    print(f"revoked {args.grant_id}: its tool's calls in {run.run_id} wait for approval again")


def _resume(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    run = check_run(nb, args.run)
    record = run.record()
    if (
        record.state in UNFINISHED_STATES
        and run_agent(nb.runtime, record, ns, imports=True) is None
    ):
        where = f" (defined at {record.agent_origin})" if record.agent_origin else ""
        raise ConfigurationError(
            f"run {run.run_id!r} needs agent {record.agent_id!r} version "
            f"{record.agent_version!r}{where}: run the cell that defines it, then "
            f"%durable resume {run.run_id}"
        )
    nb.runtime.wake()
    hints = {
        "waiting_approval": f"answer it with %durable approve {run.run_id} [APPROVAL_ID] [--deny]",
        "needs_attention": f"an interrupted tool call waits: %durable retry {run.run_id}, or "
        f"%durable settle {run.run_id} --reason R",
        "failed": f"let it go on with %durable retry {run.run_id}",
    }
    line = f"{run.run_id}: {record.state}"
    if record.state in hints:
        line += f"; {hints[record.state]}"
    elif record.state in BUSY_STATES:
        definitions = nb.runtime.registry.definitions()
        wait = lease_wait(record, nb.runtime.owner_id)
        if definition_matches(record, definitions) is False:
            # this kernel's definition is not the submitted one: say which part differs
            line += f"; it {mismatch_reason(record, definitions)}"
        else:
            line += f"; {wait.text()} in this kernel" if wait else "; it goes on in this kernel"
    print(line)
    _views.show(_views.run_view(nb.runtime, run.run_id))


def _rewind(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    check_run(nb, args.run)
    fork = run_sync(nb.runtime.fork(args.run, args.step, new_run_id=args.run_id, edit=args.edit))
    print(f"forked {fork.run_id} from {args.run} at step {args.step}")
    _goes_on(nb, fork, ns)
    _views.show(_views.run_view(nb.runtime, fork.run_id))


def _cancel(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    run = check_run(nb, args.run)
    run_sync(run.cancel())
    print(f"{run.run_id}: {run.status}")


def _attend(
    nb: NotebookSession,
    run: Run,
    action: AttentionAction,
    *,
    reason: str | None = None,
    rerun: bool = False,
) -> None:
    """Retry or settle a needs_attention run the way its buttons do: signed, checked, recorded."""
    command = f"%durable retry {run.run_id}"
    record = run.record()
    outcome = run_sync(
        decide_attention(
            nb.runtime,
            run.run_id,
            action,
            token=attention_token(nb.runtime, record, action),
            source=claimed_source(nb.user, "magic"),
            reason=reason,
            rerun=rerun,
            use_hint=f"{command} --use-late-result",
            rerun_hint=f"{command} --rerun",
        )
    )
    if not outcome.recorded:
        raise ConfigurationError(f"run {run.run_id!r}: {outcome.message}")
    if action == "retry":
        print(f"{run.run_id}: retried: the interrupted call runs again")
    else:
        print(f"settled the interrupted tool call(s) of {run.run_id} as errors")


def _settle(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    run = check_run(nb, args.run)
    state = run.record().state
    if state != "needs_attention":
        raise ConfigurationError(
            f"run {run.run_id!r} is {state}: only a needs_attention run is settled"
        )
    _attend(nb, run, "settle", reason=args.reason)
    _goes_on(nb, run, ns)


def _retry(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    run = check_run(nb, args.run)
    if args.use_late_result:
        used = run_sync(run.use_late_result())
        print(f"{run.run_id}: settled with its late result: {late_result_line(used)}")
    elif run.record().state == "needs_attention":
        _attend(nb, run, "retry", rerun=args.rerun)
    else:
        command = f"%durable retry {run.run_id}"
        try:
            late = run_sync(run.retry(rerun=args.rerun))
        except LateResultUndecidedError as refused:  # said in the notebook's words
            use, rerun = f"{command} --use-late-result", f"{command} --rerun"
            raise blind_retry_error(run.run_id, refused.late, use=use, rerun=rerun) from None
        for entry in late:  # --rerun: said all the same
            print(f"{run.run_id}: running it again: {late_result_line(entry)}")
    _goes_on(nb, run, ns)


def _worker(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    runtime = nb.runtime
    for agent in agents_in(ns):
        try:
            register(runtime, agent)
        except (ConfigurationError, DurableConflictError) as exc:
            print(f"not serving {agent!r}: {exc}")
    runtime.wake()
    served = sorted(runtime.registry.keys())
    names = ", ".join(f"{a} v{v}" for a, v in served) or "no agent (define one in a cell)"
    print(f"this kernel executes runs of: {names}; store: {nb.url}")
    listed = runtime.list_runs(sorted(BUSY_STATES))
    waiting = [r for r in listed if of_engine(r, runtime.engine.name)]
    definitions = runtime.registry.definitions()
    missing: dict[str, int] = {}
    differing: list[RuntimeRun] = []
    for record in waiting:
        if (record.agent_id, record.agent_version) not in served:
            key = f"{record.agent_id} v{record.agent_version}"
            missing[key] = missing.get(key, 0) + 1
        elif definition_matches(record, definitions) is False:
            differing.append(record)
    print(f"{len(waiting) - sum(missing.values()) - len(differing)} run(s) to execute here")
    for record in differing:
        print(f"{record.run_id} {mismatch_reason(record, definitions)}")
    if len(listed) > len(waiting):
        print(f"{len(listed) - len(waiting)} run(s) of another engine, left to it")
    if missing:
        counts = ", ".join(f"{key} ({n})" for key, n in sorted(missing.items()))
        print(f"waiting for agents this kernel does not have: {counts}")


def _dashboard(nb: NotebookSession, args: argparse.Namespace, ns: Namespace) -> None:
    _views.show(_views.dashboard_view(nb.runtime))


HANDLERS = {
    "store": _store,
    "runs": _runs,
    "graphs": _graphs,
    "show": _show,
    "history": _history,
    "explain": _explain,
    "approvals": _approvals,
    "approve": _approve,
    "grant": _grant,
    "revoke": _revoke,
    "resume": _resume,
    "rewind": _rewind,
    "cancel": _cancel,
    "retry": _retry,
    "settle": _settle,
    "worker": _worker,
    "dashboard": _dashboard,
}
"""Subcommand name -> handler(session, arguments, user namespace) -> the magic's value."""
