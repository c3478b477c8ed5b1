"""Inspection fixtures: real runs on every bundled store.

``any_store`` is parametrised over memory, SQLite, JSONL and PostgreSQL (the
stores with history); ``runs_store`` over those that keep runtime run records.
``make_run`` drives a real loop run (ScriptedModel, real tools) into a store.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import nbdurable as nd

pytest.importorskip("pandas")


@pytest.fixture(params=["memory", "sqlite", "jsonl", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "memory":
        return "memory://"
    if request.param == "postgres":
        return str(request.getfixturevalue("pg_database"))
    if request.param == "jsonl":
        return f"jsonl:///{tmp_path}/runs"
    return f"sqlite:///{tmp_path}/runs.db"


@pytest.fixture
def any_store(store_url: str) -> Iterator[Any]:
    opened = nd.open_store(store_url)
    yield opened
    opened.close()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def runs_store(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[Any]:
    if request.param == "memory":
        url = "memory://"
    elif request.param == "postgres":
        url = str(request.getfixturevalue("pg_database"))
    else:
        url = f"sqlite:///{tmp_path}/runs.db"
    opened = nd.open_store(url)
    yield opened
    opened.close()


@nd.tool
def lookup(table: str) -> dict[str, Any]:
    """Look a table up."""
    return {"table": table, "rows": 42}


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


TOOLS = [lookup, drop_table]


def script(*extra: Any) -> list[Any]:
    """Two lookups, then a gated drop, then a final text."""
    return [
        nd.Turn.call("lookup", "Looking at stg_2023.", table="stg_2023"),
        nd.Turn.call("lookup", "And stg_2024.", table="stg_2024"),
        nd.Turn.call("drop_table", "stg_2023 is stale.", name="stg_2023"),
        *extra,
        "Done: dropped stg_2023.",
    ]


async def make_run(
    store: Any,
    run_id: str,
    *,
    approve: bool | None = True,
    signer: nd.ApprovalSigner | None = None,
    price: tuple[float, float] | None = (3.0, 15.0),
    prompt: Any = "Clean up stale staging tables.",
    deps: nd.Deps | None = None,
) -> nd.GenerateTextResult:
    """A real run: three tool steps, suspended at the gated call; then resumed
    (approved or denied) to completion unless ``approve`` is None."""
    signer = signer or nd.ApprovalSigner("test-secret")
    model = nd.ScriptedModel(script(), price_per_million=price)
    first = await nd.generate_text(
        model=model,
        messages=[nd.user(prompt) if isinstance(prompt, str) else prompt],
        tools=TOOLS,
        session=nd.DurableSession(store, run_id=run_id),
        approval_signer=signer,
        deps=deps,
    )
    assert first.status == "suspended"
    if approve is None:
        return first
    request = first.pending_approvals[0]
    response = nd.ToolApprovalResponse(
        approval_id=request.approval_id,
        approved=approve,
        token=request.token if approve else None,
        reason=None if approve else "not today",
    )
    return await nd.resume_from_checkpoint(
        store,
        run_id,
        model=model,
        tools=TOOLS,
        approval_responses=[response],
        approval_signer=signer,
        deps=deps,
    )
