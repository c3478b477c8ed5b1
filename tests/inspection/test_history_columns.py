"""The history frame built from columns is the frame the per-checkpoint rows built.

``nd.inspect.history`` reads a SQLite store's checkpoint rows straight into
columns (issue 42: the 500-step frame within DBOS's step listing time). These
tests keep its frame identical, value for value and dtype for dtype, to the
construction it replaced: one dict per :class:`~nbdurable.CheckpointInfo`, then
the typed frame. The runs hold what makes rows differ: tool calls, approvals
approved and denied (decided by someone, via something), a tool error, unknown
cost, a fork, a sub-agent's run, checkpoints without step stats.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd
import pytest
from support.lead_agents import lead_with_coder

import nbdurable as nd
from nbdurable import inspect as ins
from nbdurable.durable._checkpoint import AgentCheckpoint, CheckpointInfo
from nbdurable.durable.store import RunStore
from nbdurable.inspect import _frame, _records
from nbdurable.messages import Usage
from nbdurable.runs import Decision, who_decided
from nbdurable.runtime import Agent, DurableRuntime

from .conftest import TOOLS, make_run, script

# --- the construction the columns replaced (kept verbatim as the reference) -----------


def _reference_rows(
    history: Sequence[CheckpointInfo],
    latest: AgentCheckpoint | None,
    decided: Mapping[str, Decision] | None,
) -> list[dict[str, Any]]:
    messages = latest.messages if latest is not None else ()
    added: list[Any] = []
    previous_count = 0
    for info in history:
        count = info.message_count
        added.append(messages[previous_count:count] if count >= previous_count else ())
        previous_count = count
    rows: list[dict[str, Any]] = []
    previous: CheckpointInfo | None = None
    for i, info in enumerate(history):
        usage, before = info.usage, previous.usage if previous is not None else Usage()
        stats = info.stats
        duration = None
        if stats is not None:
            duration = info.created_at - stats.started_at
        elif previous is not None:
            duration = info.created_at - previous.created_at
        if stats is not None:
            calls = list(stats.tool_calls)
        elif latest is not None:
            calls = [call.tool_name for message in added[i] for call in message.tool_calls]
        else:
            calls = []
        sources = [
            source
            for r in info.pending_approvals
            if r.approval_id in (decided or {})
            and (source := (decided or {})[r.approval_id].source) is not None
        ]
        who = [who_decided(s) for s in sources if who_decided(s)]
        via = [s.via for s in sources if s.via]
        rows.append(
            {
                "step": info.step_index,
                "status": info.status,
                "finish_reason": info.finish_reason,
                "messages": info.message_count,
                "new_messages": info.message_count - (previous.message_count if previous else 0),
                "tool_calls": ", ".join(calls),
                "input_tokens": usage.input_tokens,
                "output_tokens": usage.output_tokens,
                "total_tokens": usage.total_tokens,
                "cost": usage.cost,
                "tokens_delta": usage.total_tokens - before.total_tokens,
                "input_tokens_delta": usage.input_tokens - before.input_tokens,
                "output_tokens_delta": usage.output_tokens - before.output_tokens,
                "cost_delta": None if usage.cost is None else usage.cost - (before.cost or 0.0),
                "duration_ms": duration,
                "model_ms": stats.model_ms if stats is not None else None,
                "tool_ms": stats.tool_ms if stats is not None else None,
                "pending_approvals": len(info.pending_approvals),
                "created_at": info.created_at,
                "decided_by": ", ".join(dict.fromkeys(who)) or None,
                "via": ", ".join(dict.fromkeys(via)) or None,
            }
        )
        previous = info
    return rows


def _reference_inputs(store: Any, run_id: str) -> tuple[Any, Any, Any]:
    infos = store.history(run_id)
    needs = any(
        info.stats is None and not (i == 0 and info.forked_from is not None)
        for i, info in enumerate(infos)
    )
    latest = store.load(run_id) if needs else None
    record = store.rt_get(run_id) if isinstance(store, RunStore) else None
    return infos, latest, record.decided if record is not None else None


def _reference_frame(store: Any, run_id: str) -> pd.DataFrame:
    rows = _reference_rows(*_reference_inputs(store, run_id))
    return _frame.frame(
        rows,
        columns=_records.HISTORY_COLUMNS,
        index="step",
        **_records.HISTORY_TYPES,
    )


# --- runs with every kind of row ---------------------------------------------------------


def _janitor() -> Agent:
    return Agent("janitor", nd.ScriptedModel(script()), TOOLS, version="1")


@nd.tool
def flaky(x: int) -> int:
    """Fails every time."""
    raise ValueError(f"no {x}")


async def _rich_runs(store: Any) -> None:
    await make_run(store, "approved")
    await make_run(store, "denied", approve=False, price=None)  # cost unknown
    await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn.call("flaky", x=1), "gave up"]),
        messages=[nd.user("try it")],
        tools=[flaky],
        session=nd.DurableSession(store, run_id="errors"),
    )
    ins.rewind(store, "approved", 1, new_run_id="fork")
    await nd.resume_from_checkpoint(
        store, "fork", model=nd.ScriptedModel(["forked and done"], mode="sequential"), tools=TOOLS
    )
    for info in store.history("approved"):  # saved by other code: no step stats
        old = store.load("approved", step_index=info.step_index)
        store.save(old.model_copy(update={"run_id": "old", "step_id": "", "stats": None}))
    if isinstance(store, RunStore):
        async with DurableRuntime(store=store, agents=[_janitor(), lead_with_coder()]) as runtime:
            run = await runtime.submit("janitor", "Clean up stale staging tables.", run_id="rt")
            await run.wait("waiting_approval")
            await run.approve(by="ana", via="magic")
            await run.result()
            sub = await runtime.submit("lead", "Have the coder test it.", run_id="sub")
            await sub.wait("waiting_approval")
            await sub.approve(by="lee", via="http")
            await sub.result()


@pytest.fixture(params=["sqlite", "memory", "jsonl"])
def url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    return {
        "sqlite": f"sqlite:///{tmp_path}/runs.db",
        "memory": "memory://",
        "jsonl": f"jsonl:///{tmp_path}/runs",
    }[request.param]


async def test_the_frame_is_the_one_the_rows_built_on_every_kind_of_run(url: str) -> None:
    store = nd.open_store(url)
    try:
        await _check_every_run(store)
    finally:
        store.close()


async def _check_every_run(store: Any) -> None:
    await _rich_runs(store)
    run_ids = store.list()
    assert {"approved", "denied", "errors", "fork", "old"} <= set(run_ids)
    if isinstance(store, RunStore):
        assert len(run_ids) > 7  # the sub-agent's run is listed too
    for run_id in run_ids:
        frame = ins.history(store, run_id)
        expected = _reference_frame(store, run_id)
        assert type(frame) is type(expected)
        pd.testing.assert_frame_equal(frame, expected, check_exact=True)
        assert list(frame.dtypes) == list(expected.dtypes)
        rows = _records.history_rows(store, run_id)
        assert [row["step"] for row in rows] == list(expected.index)
        assert rows == _reference_rows(*_reference_inputs(store, run_id))
    usage = ins.usage(store, "approved")
    history = ins.history(store, "approved")
    pd.testing.assert_frame_equal(usage, history[list(usage.columns)], check_exact=True)
    rt = ins.history(store, "rt") if isinstance(store, RunStore) else None
    if rt is not None:
        assert rt["decided_by"].dropna().tolist() == ["by ana (claimed)"]
