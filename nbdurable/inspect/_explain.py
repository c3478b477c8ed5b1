"""``explain``: why a run is where it is, and what would move it on."""

from __future__ import annotations

import functools
import html
import json
import time
from dataclasses import dataclass, field, replace
from typing import Any

from .._errors import RunNotFoundError
from ..durable._checkpoint import AgentCheckpoint
from ..durable._lookup import runtime_record
from ..durable._signer import token_issued_at
from ..durable.store import EventLog, HistoryStore, RunStore
from ..events._model import RUN_TAKEN_OVER, TOOL_APPROVAL_REQUEST
from ..runs import (
    ACTIVE_STATES,
    TEMPORAL,
    UNFINISHED_STATES,
    UNSUCCESSFUL_STATES,
    AttentionAction,
    Decision,
    RuntimeRun,
    decided_action,
    decided_phrase,
    describe_holder,
    late_result_line,
    process_gone,
    undecided_late_results,
    verdict_line,
)
from ._next import Context, NextSteps, check_context, here, magics_loaded
from ._rows import preview
from ._source import StoreLike, opened

__all__ = ["Explanation", "PendingApproval", "explain"]


@dataclass(frozen=True)
class PendingApproval:
    """A gated tool call a run waits for.

    Attributes:
        approval_id: What a verdict names.
        tool_name: The tool.
        args: Its arguments.
        agent_path: The sub-agents down to the one that made the call (empty at top level).
        age_s: Seconds since its token was issued (None for an unsigned request).
        allow_edit: Whether the tool lets a human edit the call's arguments.
        parameters: With ``allow_edit``: the tool's JSON schema of its arguments.
    """

    approval_id: str
    tool_name: str
    args: dict[str, Any]
    agent_path: tuple[str, ...]
    age_s: float | None
    allow_edit: bool = False
    parameters: dict[str, Any] | None = None


@dataclass(frozen=True)
class Explanation:
    """Why a run is where it is.

    Attributes:
        run_id: The run.
        status: Its runtime state, or its latest checkpoint's status for a run
            the runtime does not own.
        summary: One sentence.
        details: Facts behind the summary, one per line.
        actions: What would move the run on, phrased for ``context``.
        approvals: The approvals it waits for.
        context: Where the reader is: ``api`` (Python calls), ``notebook``
            (``%durable`` magics) or ``terminal`` (``nbdurable`` commands).

    ``str()`` and the notebook's HTML view show the same lines in the same layout.
    """

    run_id: str
    status: str
    summary: str
    details: tuple[str, ...] = ()
    actions: tuple[str, ...] = ()
    approvals: tuple[PendingApproval, ...] = field(default=())
    context: Context = "api"

    def lines(self) -> list[str]:
        """The explanation as text lines: the one layout of ``str()`` and the HTML view."""
        lines = [f"{self.run_id}: {self.status}", f"  {self.summary}"]
        lines += [f"  - {line}" for line in self.details]
        if self.actions:
            lines.append("  Next:")
            lines += [f"    {line}" for line in self.actions]
        return lines

    def __str__(self) -> str:
        return "\n".join(self.lines())

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(str(self))  # IPython's plain-text view (consoles, nbclient) shows the text

    def _repr_html_(self) -> str:
        first, *rest = self.lines()
        body = "\n".join(html.escape(line) for line in rest)
        return (
            # JupyterLab breaks output <pre> text anywhere (word-break: break-all):
            # wrap at spaces, and cut a word only when it alone is wider than the cell
            "<pre class='nbdurable-explain' style='white-space: pre-wrap; "
            "word-break: normal; overflow-wrap: break-word'>"
            f"<b>{html.escape(first)}</b>\n{body}</pre>"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict of every field."""
        return {
            "run_id": self.run_id,
            "status": self.status,
            "summary": self.summary,
            "details": list(self.details),
            "actions": list(self.actions),
            "context": self.context,
            "approvals": [
                {
                    "approval_id": a.approval_id,
                    "tool_name": a.tool_name,
                    "args": a.args,
                    "agent_path": list(a.agent_path),
                    "age_s": a.age_s,
                    "allow_edit": a.allow_edit,
                    "parameters": a.parameters,
                }
                for a in self.approvals
            ],
        }


def explain(
    store: StoreLike, run_id: str, *, now: int | None = None, context: Context | None = None
) -> Explanation:
    """Why ``run_id`` is where it is: what it waits for, what failed, who owns it.

    Covers every run state: waiting for approvals (tool, arguments, agent path,
    token age), needs_attention (which tool, why), retry_wait (until when, after
    which error), running (and whether its owner's lease lapsed), queued behind
    which run, failed or cancelled (reason, error), completed (finish reason).

    Args:
        store: A store, or a store URL.
        run_id: The run.
        now: The time to measure ages against, epoch ms (default: the wall clock).
        context: Where the reader is, which decides how the next steps are
            phrased: ``"api"`` (Python calls), ``"notebook"`` (``%durable``
            magics and the widget's buttons, what ``%durable explain`` passes)
            or ``"terminal"`` (``nbdurable`` commands, what ``nbdurable runs
            explain`` passes). By default ``"notebook"`` in a Jupyter kernel
            (with ``%load_ext nbdurable`` first among the next steps when the
            magics are not loaded yet), else ``"api"``.

    Raises:
        RunNotFoundError: The store has neither a checkpoint nor a runtime record of the run.
        ConfigurationError: An unknown ``context``.
    """
    steps = NextSteps(check_context(context) if context is not None else here(), run_id)
    clock = int(time.time() * 1000) if now is None else now
    with opened(store) as source:
        record = runtime_record(source, run_id)
        checkpoint = source.load(run_id)
        if record is None and checkpoint is None:
            raise RunNotFoundError(run_id)
        ahead = _ahead_in_session(source, record) if record is not None else None
        deps = [runtime_record(source, d) for d in record.depends_on] if record else []
        takeover = _takeover(source, record) if record is not None else None
        verdicts = _verdict_lines(source, record) if record is not None else []
        late = record is not None and bool(record.late_results)
        intents = source.rt_intents(run_id) if late and isinstance(source, RunStore) else []
    approvals = _approvals(checkpoint, clock)
    if record is None:
        assert checkpoint is not None
        explanation = _explain_checkpoint(checkpoint, approvals)
    elif record.depends_on and (
        record.state == "queued"
        or (record.state == "needs_attention" and record.reason == "dependency_failed")
    ):
        explanation = _explain_dependencies(record, [d for d in deps if d is not None], steps)
    else:
        explanation = _explain_record(record, checkpoint, approvals, clock, ahead, steps, takeover)
    if verdicts:
        explanation = replace(explanation, details=(*explanation.details, *verdicts))
    if record is not None and record.late_results:
        explanation = _with_late_results(explanation, record, intents, steps)
    notebook = context is None and steps.context == "notebook"
    if notebook and explanation.actions and not magics_loaded():
        load = "%load_ext nbdurable  (once per kernel: the %durable commands below)"
        explanation = replace(explanation, actions=(load, *explanation.actions))
    return replace(explanation, context=steps.context)


def _with_late_results(
    explanation: Explanation, record: RuntimeRun, intents: Any, steps: NextSteps
) -> Explanation:
    """Late results right after the first fact: said before anything that runs the call again."""
    lines = [f"late: {late_result_line(late)}" for late in record.late_results]
    first, *rest = explanation.details or ("",)
    details = (first, *lines, *rest) if first else (*lines, *rest)
    undecided = undecided_late_results(record, intents)
    if record.state != "needs_attention" or not undecided:
        return replace(explanation, details=details)
    usable = any(late.outcome == "result" for late in undecided)
    actions = steps.interrupted_tool(ran_late=True, usable=usable)
    return replace(explanation, details=details, actions=actions)


def _verdict_lines(store: HistoryStore, record: RuntimeRun) -> list[str]:
    """One line per recorded verdict: who gave it, how, and how long after the request."""
    if not record.decided:
        return []
    requested: dict[str, int] = {}
    events = store.read_events(record.run_id) if isinstance(store, EventLog) else ()
    if isinstance(events, list | tuple):  # an async store: explain reads synchronously
        for event in events:
            request = event.payload.get("request") if event.type == TOOL_APPROVAL_REQUEST else None
            if isinstance(request, dict) and request.get("approval_id") not in requested:
                issued = token_issued_at(request.get("token"))
                requested[str(request.get("approval_id"))] = issued or event.created_at
    lines = []
    for approval_id, entry in sorted(record.decided.items(), key=lambda i: i[1].at):
        action = decided_action(approval_id)
        if action is not None:  # a retry or settle of a needs_attention stop
            lines.append(_attention_line(action, entry))
            continue
        asked = requested.get(approval_id)
        waited = entry.at - asked if asked and entry.at else None
        line = verdict_line(entry.approved, entry.source, waited, kind=entry.kind)
        lines.append(f"approval {approval_id}: {line}{_what_was_done(entry)}")
    return lines


def _what_was_done(entry: Decision) -> str:
    """``: ran with (...) instead of (...)`` for an edit, ``: "..."`` for a reply, else ""."""
    if entry.arguments is not None:
        original = entry.original_arguments
        instead = f" instead of ({_args(original)})" if original is not None else ""
        return preview(f": ran with ({_args(entry.arguments)}){instead}", 200)
    if entry.reply is not None:
        return preview(f": {entry.reply!r}", 120)
    return ""


def _attention_line(action: AttentionAction, entry: Decision) -> str:
    """``retried by ana (claimed) via widget``, ``settled ...: reason``: a needs_attention stop."""
    done = "retried" if action == "retry" else "settled as denied"
    source = entry.source
    who = decided_phrase(source)
    if source is not None and source.via and f"via {source.via}" not in who:
        who = f"{who} via {source.via}" if who else f"via {source.via}"
    line = f"needs_attention: {done}" + (f" {who}" if who else "")
    return f"{line}: {entry.reason}" if entry.reason else line


def _takeover(store: HistoryStore, record: RuntimeRun) -> str | None:
    """The ``run_taken_over`` message of the run's current claim, if it was a takeover."""
    if record.previous_owner is None or not isinstance(store, EventLog):
        return None
    events = store.read_events(record.run_id)
    if not isinstance(events, list | tuple):
        return None  # an async store: explain reads synchronously
    for event in reversed(events):
        if event.type == RUN_TAKEN_OVER and event.payload.get("fence") == record.fence:
            return str(event.payload.get("message", ""))
    return None


def _explain_dependencies(
    record: RuntimeRun, deps: list[RuntimeRun], steps: NextSteps
) -> Explanation:
    """A graph node waiting for its dependencies (queued, or paused by a failed one)."""
    lines = [f"dependency {d.node_id or d.run_id} ({d.run_id}): {d.state}" for d in deps]
    broken = [d for d in deps if d.state in UNSUCCESSFUL_STATES]
    node = record.node_id or record.run_id
    if record.state == "needs_attention":
        summary = f"Paused: graph node {node!r} waits because a dependency failed."
    else:
        waiting = [d.node_id or d.run_id for d in deps if d.state != "completed"]
        summary = f"Queued in graph {record.graph_id}: waiting for {', '.join(waiting)}."
    actions = tuple(
        line for d in broken for line in steps.retry(d.run_id, then="then this node goes on")
    )
    return Explanation(record.run_id, record.state, summary, details=tuple(lines), actions=actions)


def _approvals(checkpoint: AgentCheckpoint | None, now: int) -> tuple[PendingApproval, ...]:
    if checkpoint is None:
        return ()
    found = []
    for request in checkpoint.pending_approvals:
        issued = token_issued_at(request.token)
        found.append(
            PendingApproval(
                approval_id=request.approval_id,
                tool_name=request.tool_name,
                args=dict(request.input),
                agent_path=request.agent_path,
                age_s=None if issued is None else max(0, now - issued) / 1000,
                allow_edit=request.allow_edit,
                parameters=request.parameters,
            )
        )
    return tuple(found)


def _approval_lines(approvals: tuple[PendingApproval, ...]) -> list[str]:
    lines = []
    for a in approvals:
        where = f" in sub-agent {'/'.join(a.agent_path)}" if a.agent_path else ""
        age = f", asked {_duration(a.age_s)} ago" if a.age_s is not None else ""
        call = preview(f"{a.tool_name}({_args(a.args)})", 100)
        lines.append(f"approval {a.approval_id}: {call}{where}{age}")
    return lines


def _args(args: dict[str, Any]) -> str:
    return ", ".join(
        f"{k}={json.dumps(v, ensure_ascii=False, default=repr)}" for k, v in args.items()
    )


def _explain_checkpoint(
    checkpoint: AgentCheckpoint, approvals: tuple[PendingApproval, ...]
) -> Explanation:
    run_id, status = checkpoint.run_id, checkpoint.status
    step = f"step {checkpoint.step_index}"
    fork = checkpoint.forked_from
    lineage = (
        [
            f"forked from {fork.run_id} at step {fork.step_index}"
            + (" (edited)" if fork.edited else "")
        ]
        if fork is not None
        else []
    )
    resume = "resume_from_checkpoint(store, run_id, model=..., tools=...)"
    say = functools.partial(Explanation, run_id, status)
    if status == "completed":
        return say(
            f"Completed at {step} (finish reason: {checkpoint.finish_reason or 'stop'}).",
            details=(*lineage, f"{len(checkpoint.messages)} messages, {_usage(checkpoint)}"),
        )
    if approvals:
        return say(
            f"Suspended at {step}, waiting for {len(approvals)} approval(s).",
            details=(*lineage, *_approval_lines(approvals)),
            actions=(f"{resume} with approval_responses=[...]",),
            approvals=approvals,
        )
    if status == "suspended":
        return say(
            f"Suspended at {step}, waiting for client tool results.",
            details=(*lineage,),
            actions=(f"{resume} with the tool results as messages",),
        )
    return say(
        f"Stopped after {step} with a next step to take: the process running it "
        "ended (or it still runs elsewhere).",
        details=(*lineage, f"last checkpoint written {_ts(checkpoint.created_at)}"),
        actions=(resume,),
    )


def _explain_record(
    record: RuntimeRun,
    checkpoint: AgentCheckpoint | None,
    approvals: tuple[PendingApproval, ...],
    now: int,
    ahead: RuntimeRun | None,
    steps: NextSteps,
    takeover: str | None = None,
) -> Explanation:
    run_id, state = record.run_id, record.state
    agent = f"agent {record.agent_id!r} version {record.agent_version!r}"
    step = f"step {checkpoint.step_index}" if checkpoint is not None else "no step yet"
    facts = [f"{agent}, session {record.session_id}, {step}, {record.operations} operation(s)"]
    if takeover:
        facts.append(takeover)
    if checkpoint is not None and checkpoint.forked_from is not None:
        fork = checkpoint.forked_from
        facts.append(f"forked from {fork.run_id} at step {fork.step_index}")
    if record.error:
        facts.append(f"last error: {record.error}")
    if record.waiting_reason and not record.finished:
        facts.append(f"it {record.waiting_reason}")
    say = functools.partial(Explanation, run_id, state, details=tuple(facts))
    if state == "waiting_approval":
        return say(
            f"Waiting for {len(approvals)} approval(s) at {step}.",
            details=(*facts, *_approval_lines(approvals)),
            actions=steps.answer_approvals(),
            approvals=approvals,
        )
    if state == "needs_attention":
        return say(
            f"Needs a human: {record.reason or 'see the details'}.",
            actions=steps.interrupted_tool(),
        )
    if state == "retry_wait":
        at = record.next_attempt_at
        when = f"at {_ts(at)} (in {_duration(max(0, at - now) / 1000)})" if at else "soon"
        return say(
            f"The model call failed; attempt {record.model_attempts + 1} starts {when}.",
            actions=steps.retries_by_itself(),
        )
    if state in ACTIVE_STATES:
        return _explain_owned(record, facts, now, steps)
    if state == "queued":
        behind = f"behind {ahead.run_id} ({ahead.state})" if ahead is not None else "in its session"
        return say(
            f"Queued {behind}: runs of a session execute one after another.",
        )
    if state == "pending" and record.engine == TEMPORAL:
        return say(
            f"Pending: it {record.waiting_reason or 'waits for a Temporal worker to take it'}.",
            actions=_temporal_workers(record, steps),
        )
    if state == "pending" and record.waiting_reason:
        return say(
            f"Pending: it {record.waiting_reason}.",
            actions=(
                "run it where the definition it was submitted with is registered (its "
                "notebook, or a worker importing that definition)",
                steps.cancel("then submit it again under a new version"),
            ),
        )
    if state == "pending":
        return say(
            "Eligible and waiting for a runtime serving its agent to take it "
            "(a free slot in a notebook's runtime or an `nbdurable worker`).",
            actions=steps.execute(record),
        )
    if state == "completed":
        reason = checkpoint.finish_reason if checkpoint is not None else None
        return say(
            f"Completed at {step} (finish reason: {reason or 'stop'}).",
            details=(*facts, _usage(checkpoint)) if checkpoint is not None else tuple(facts),
        )
    return say(  # failed, cancelled
        f"{state.capitalize()}: {record.reason or 'no reason recorded'}.",
        actions=steps.retry() if state == "failed" else (),
    )


def _temporal_workers(record: RuntimeRun, steps: NextSteps) -> tuple[str, ...]:
    """What to start for a pending Temporal run (runtimes and embedded workers leave it alone)."""
    agent = f"agent {record.agent_id!r} version {record.agent_version!r}"
    worker = "nbdurable worker --engine temporal --task-queue QUEUE --store URL --agents M:ATTR"
    if not record.waiting_reason:
        return (f"{worker}  (serving {agent})",)
    if "Temporal worker of deployment" in record.waiting_reason:  # pinned to its release
        start = f"{worker} --deployment NAME  (the release named above: same build)"
    else:
        start = f"{worker}  (serving {agent} with the definition it was submitted with)"
    return (start, steps.cancel("then submit it again under a new version"))


def _explain_owned(record: RuntimeRun, facts: list[str], now: int, steps: NextSteps) -> Explanation:
    expires = record.lease_expires_at
    owner = describe_holder(record.lease_owner)
    say = functools.partial(Explanation, record.run_id, record.state, details=tuple(facts))
    if process_gone(record.lease_owner):
        return say(
            f"Marked {record.state}, but its owner {owner} is gone: its process no longer "
            "exists on this host.",
            actions=(
                "any runtime serving its agent on this host takes it over at once and "
                "resumes from the last step",
            ),
        )
    if expires is not None and expires < now:
        return say(
            f"Marked {record.state}, but its owner {owner} is gone: the lease expired "
            f"{_duration((now - expires) / 1000)} ago.",
            actions=(
                "any runtime serving its agent claims it and resumes from the last step",
                *steps.execute(record),
            ),
        )
    left = f"; lease valid for {_duration((expires - now) / 1000)}" if expires is not None else ""
    return say(
        f"Executing in {owner}{left}.",
    )


def _ahead_in_session(store: HistoryStore, record: RuntimeRun) -> RuntimeRun | None:
    if record.state != "queued" or not isinstance(store, RunStore):
        return None
    runtime: Any = store
    unfinished = sorted(UNFINISHED_STATES)
    earlier = [r for r in runtime.rt_session(record.session_id, unfinished) if r.seq < record.seq]
    return earlier[0] if earlier else None


def _usage(checkpoint: AgentCheckpoint) -> str:
    u = checkpoint.usage
    cost = f", ${u.cost:.4f}" if u.cost is not None else ""
    return f"{u.total_tokens} tokens ({u.input_tokens} in, {u.output_tokens} out{cost})"


def _ts(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(ms / 1000))


def _duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
