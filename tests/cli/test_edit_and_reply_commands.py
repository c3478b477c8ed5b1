"""``nbdurable runs approve --arguments JSON`` and ``runs respond --reply TEXT`` (or ``--reply``)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from support import cli_agents as test_agents

import nbdurable as nd

from .conftest import AGENTS


async def _park(url: str) -> None:
    store = nd.open_store(url)
    try:
        async with await nd.DurableRuntime.open(
            store=store, agents=test_agents.agents(), poll_interval=0.01
        ) as runtime:
            for run_id, agent in (("run-edit", "editor"), ("run-reply", "janitor")):
                run = await runtime.submit(agent, "Clean up.", run_id=run_id)
                await run.wait("waiting_approval")
    finally:
        store.close()


def _record(url: str, run_id: str) -> nd.runs.RuntimeRun:
    store = nd.open_store(url)
    try:
        return store.rt_get(run_id)  # type: ignore[attr-defined,no-any-return]
    finally:
        store.close()


def test_approve_with_edited_arguments_and_respond_with_a_reply(cli, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    asyncio.run(_park(url))
    # refused edits: not JSON, a tool that allows none, arguments that do not fit (exit 2)
    for run_id, arguments, said in (
        ("run-edit", "{name", "not JSON"),
        ("run-reply", '{"name": "x"}', "does not allow editing"),
        ("run-edit", '{"name": 7}', "do not fit"),
    ):
        status, out, err = cli("runs", "approve", run_id, "--arguments", arguments, "--store", url)
        assert status == 2 and out == "" and said in err, err
    assert _record(url, "run-edit").state == "waiting_approval"
    status, out, err = cli(
        "runs",
        "approve",
        "run-edit",
        "--arguments",
        '{"name": "stg_2022", "cascade": true}',
        "--as",
        "ana",
        "--agents",
        AGENTS,
        "--store",
        url,
    )
    assert status == 0, err
    assert "edited to edit_table(name='stg_2022', cascade=True)" in out.splitlines()[0]
    record = _record(url, "run-edit")
    assert record.state == "completed" and record.result_text == (
        "Done: dropped stg_2022 with cascade."
    )
    [decision] = record.decided.values()
    assert decision.kind == "edited" and decision.source.by == "ana"
    status, out, err = cli(
        "runs", "respond", "run-reply", "--reply", "not today", "--agents", AGENTS, "--store", url
    )
    assert status == 0, err
    assert out.startswith("replied to drop_table(name='stg_2024') in place of the tool")
    assert _record(url, "run-reply").result_text == "Done: not today."
    # the inbox shows both
    status, out, _ = cli("runs", "approvals", "--all", "--json", "--store", url)
    rows = {row["run_id"]: row for row in json.loads(out)}
    assert rows["run-edit"]["edited_arguments"] == {"name": "stg_2022", "cascade": True}
    assert rows["run-reply"]["status"] == "replied" and rows["run-reply"]["reply"] == "not today"
    # a reply also by `runs approve --reply`, and the loser of a replied approval: exit 3
    status, _, err = cli("runs", "approve", "run-reply", "--reply", "again?", "--store", url)
    assert status == 3 and "already replied" in err
