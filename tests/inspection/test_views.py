"""The DataFrame views on every store: runs, history, messages, events, usage."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
import pytest

import nbdurable as nd
from nbdurable import inspect as ins
from nbdurable.inspect import _compact

from .conftest import make_run


async def test_history_has_one_typed_row_per_checkpoint(any_store: Any) -> None:
    await make_run(any_store, "r1")
    frame = ins.history(any_store, "r1")
    infos = any_store.history("r1")
    assert len(frame) == len(infos) == 4  # tool steps 0-2 (suspended at 2), final text at 3
    assert frame.index.name == "step"
    assert list(frame.index) == [i.step_index for i in infos]
    assert isinstance(frame["status"].dtype, pd.CategoricalDtype)
    assert str(frame["created_at"].dtype).startswith("datetime64") and "UTC" in str(
        frame["created_at"].dtype
    )
    assert list(frame["status"]) == [i.status for i in infos]
    assert frame["status"].iloc[-1] == "completed"
    assert list(frame["messages"]) == [i.message_count for i in infos]
    assert frame["new_messages"].sum() == frame["messages"].iloc[-1]
    assert frame["tool_calls"].tolist()[:3] == ["lookup", "lookup", "drop_table"]
    assert frame["tokens_delta"].sum() == frame["total_tokens"].iloc[-1]
    assert frame["cost_delta"].sum() == pytest.approx(frame["cost"].iloc[-1])
    assert frame["pending_approvals"].tolist()[2] == 1
    assert (frame["duration_ms"].dropna() >= 0).all()


async def test_timings_come_from_the_driver_clock(clock: Any, deps: nd.Deps) -> None:
    store = nd.InMemorySessionStore()

    @nd.tool
    def slow(x: int) -> int:
        """Takes 40 ms of the fake clock."""
        clock.advance(40)
        return x

    class SlowModel(nd.ScriptedModel):
        async def generate(self, request: Any) -> Any:
            clock.advance(25)
            return await super().generate(request)

    model = SlowModel([nd.Turn.call("slow", x=1), "ok"])
    await nd.generate_text(
        model=model,
        messages=[nd.user("go")],
        tools=[slow],
        session=nd.DurableSession(store, run_id="t"),
        deps=deps,
    )
    frame = ins.history(store, "t")
    assert frame["model_ms"].tolist() == [25, 25]
    assert frame["tool_ms"].tolist() == [40, 0]
    assert frame["duration_ms"].tolist() == [65, 25]


async def test_messages_show_roles_tools_errors_and_images(any_store: Any) -> None:
    image = nd.Message(
        role="user",
        content=[
            nd.TextPart(text="What is in these?"),
            nd.ImagePart(data=b"\x89PNG\r\n", media_type="image/png"),
            nd.ImagePart(url="https://example.org/cat.png"),
        ],
    )
    await make_run(any_store, "r2", approve=False, prompt=image)
    frame = ins.messages(any_store, "r2")
    assert frame.index.name == "position"
    assert frame["role"].tolist()[:3] == ["user", "assistant", "tool"]
    assert frame["images"].tolist()[0] == 2
    assert frame["parts"].iloc[0] == "text, image"
    assert frame["tool_name"].iloc[1] == "lookup"
    assert json.loads(frame["tool_args"].iloc[1]) == {"table": "stg_2023"}
    assert json.loads(frame["tool_result"].iloc[2]) == {"rows": 42, "table": "stg_2023"}
    denied = frame[frame["is_error"]]
    assert denied["tool_name"].tolist() == ["drop_table"]
    assert "not today" in denied["tool_result"].iloc[0]
    at_step_0 = ins.messages(any_store, "r2", 0)
    assert len(at_step_0) == 3


async def test_long_texts_stay_one_readable_line(any_store: Any) -> None:
    long = "word " * 400 + "\nsecond line <b>not html</b>"
    await nd.generate_text(
        model=nd.ScriptedModel([nd.Turn.call("lookup", table="t"), long]),
        messages=[nd.user("x")],
        tools=[nd.tool(lambda table: table, name="lookup")],
        session=nd.DurableSession(any_store, run_id="long"),
    )
    frame = ins.messages(any_store, "long")
    text = frame["text"].iloc[-1]
    assert len(text) <= ins._rows.PREVIEW_CHARS and "\n" not in text and text.endswith("…")
    page = frame._repr_html_()
    assert "<b>not html</b>" not in page and "white-space: nowrap" in page


async def test_runs_lists_every_run_with_usage_and_status(any_store: Any) -> None:
    await make_run(any_store, "a")
    await make_run(any_store, "b", approve=None)
    frame = ins.runs(any_store)
    assert list(frame.index) == ["a", "b"]
    assert frame.loc["a", "status"] == "completed"
    assert frame.loc["b", "status"] == "suspended"
    assert frame.loc["b", "pending_approvals"] == 1
    assert frame.loc["a", "steps"] == 4
    assert frame.loc["a", "total_tokens"] == ins.history(any_store, "a")["total_tokens"].iloc[-1]
    assert frame.loc["a", "cost"] > 0
    assert pd.isna(frame.loc["a", "parent_run"])
    assert list(ins.runs(any_store, status="suspended").index) == ["b"]
    assert str(frame["updated_at"].dtype).startswith("datetime64")


async def test_runs_is_data_by_default_every_column_typed(any_store: Any) -> None:
    await make_run(any_store, "a")
    await make_run(any_store, "b", approve=None)
    frame = ins.runs(any_store)
    assert list(frame.columns) == list(ins._records.RUN_COLUMNS[1:])
    for column in ("created_at", "parent_run", "session_id", "total_tokens", "pending_approvals"):
        assert column in frame.columns
    assert str(frame["cost"].dtype) == "Float64"
    assert frame["cost"].sum() == pytest.approx(frame.loc["a", "cost"] + frame.loc["b", "cost"])
    assert str(frame["created_at"].dtype).startswith("datetime64")
    # code written while the compact view was the default keeps working
    assert ins.runs(any_store, all_columns=True).equals(frame)
    assert list(ins.runs(any_store, all_columns=False).columns) == list(
        ins.runs(any_store, compact=True).columns
    )


async def test_runs_compact_is_a_display_view_cost_formatted_and_what_a_run_waits_for(
    any_store: Any,
) -> None:
    await make_run(any_store, "a")
    await make_run(any_store, "b", approve=None)
    frame = ins.runs(any_store, compact=True)
    assert list(frame.columns) == ["status", "agent", "steps", "tokens", "cost", "age", "reason"]
    full = ins.runs(any_store)
    assert frame.loc["a", "tokens"] == full.loc["a", "total_tokens"]
    assert frame.loc["a", "cost"] == _compact.cost_text(full.loc["a", "cost"])
    assert frame.loc["a", "cost"].startswith("$")
    assert frame.loc["b", "reason"] == "1 approval" and frame.loc["a", "reason"] == ""
    assert frame.loc["a", "age"].endswith("s")
    assert list(ins.runs(any_store, status="suspended", compact=True).index) == ["b"]


@pytest.mark.parametrize(
    ("cost", "text"),
    [
        (None, ""),
        (float("nan"), ""),
        (0.0, "$0"),
        (0.00004, "<$0.0001"),
        (0.01234, "$0.0123"),
        (2.5, "$2.50"),
        (1234.4, "$1,234"),
    ],
)
def test_cost_reads_as_dollars_and_blank_when_unknown(cost: float | None, text: str) -> None:
    assert _compact.cost_text(cost) == text


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0s"),
        (59, "59s"),
        (65, "1m 05s"),
        (725, "12m"),
        (3 * 3600 + 120, "3h 02m"),
        (2 * 86400 + 5 * 3600, "2d 5h"),
        (40 * 86400, "40d"),
    ],
)
def test_age_is_one_or_two_units(seconds: int, text: str) -> None:
    now = 1_800_000_000_000
    assert _compact.age(now - seconds * 1000, now) == text


async def test_runs_accepts_a_url(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path}/runs.db"
    with nd.open_store(url) as store:
        await make_run(store, "u")
    assert list(ins.runs(url).index) == ["u"]
    assert len(ins.history(url, "u")) == 4


async def test_events_and_usage_frames(any_store: Any) -> None:
    if not nd.durable.supports(any_store, "events"):
        pytest.skip("no event log")
    await make_run(any_store, "e")
    frame = ins.events(any_store, "e")
    assert frame.index.name == "offset"
    assert list(frame.index) == list(range(1, len(frame) + 1))
    types = set(frame["type"])
    assert {"run_started", "tool_call", "tool_result", "checkpoint_saved"} <= types
    calls = frame[frame["type"] == "tool_call"]
    assert calls["summary"].iloc[0].startswith("lookup")
    assert len(ins.events(any_store, "e", after=3)) == len(frame) - 3
    usage = ins.usage(any_store, "e")
    assert usage["tokens_delta"].sum() == usage["total_tokens"].iloc[-1]
    assert list(usage.index) == list(ins.history(any_store, "e").index)


async def test_unknown_runs_and_steps_are_typed_errors(any_store: Any) -> None:
    await make_run(any_store, "k")
    with pytest.raises(nd.RunNotFoundError):
        ins.history(any_store, "nope")
    with pytest.raises(nd.RunNotFoundError):
        ins.messages(any_store, "nope")
    with pytest.raises(nd.CheckpointNotFoundError, match="its steps are 0-3"):
        ins.messages(any_store, "k", 9)
    with pytest.raises(nd.RunNotFoundError):
        ins.usage(any_store, "nope")


def test_a_store_without_history_is_refused() -> None:
    class Bare:
        def save(self, checkpoint: Any) -> None: ...
        def load(self, run_id: str) -> None: ...

    with pytest.raises(nd.ConfigurationError, match="history"):
        ins.runs(Bare())  # type: ignore[arg-type]


def test_without_pandas_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "pandas", None)
    monkeypatch.delitem(sys.modules, "nbdurable.inspect._frame", raising=False)
    monkeypatch.delattr(ins, "_frame", raising=False)
    with pytest.raises(nd.ConfigurationError, match=r"nbdurable\[inspect\]"):
        ins.runs(nd.InMemorySessionStore())


def test_frames_stay_inspect_frames_when_sliced() -> None:
    from nbdurable.inspect._frame import InspectFrame, frame

    data = frame(
        [{"k": 1, "status": "completed", "t": 0}, {"k": 2, "status": "failed", "t": 1}],
        columns=("k", "status", "t"),
        index="k",
        categories={"status": ("completed", "failed")},
        datetimes=("t",),
    )
    assert isinstance(data[data["status"] == "failed"], InspectFrame)
    html = data._repr_html_()
    assert "#cf222e" in html and "1970-01-01 00:00:00.001" in html


async def test_checkpoints_without_step_stats_read_tool_calls_from_messages(
    any_store: Any,
) -> None:
    """Checkpoints saved by other code (or before step stats existed) still list tool calls."""
    await make_run(any_store, "src")
    for info in any_store.history("src"):
        old = any_store.load("src", step_index=info.step_index)
        any_store.save(old.model_copy(update={"run_id": "old", "step_id": "", "stats": None}))
    assert all(i.stats is None for i in any_store.history("old"))
    frame = ins.history(any_store, "old")
    assert frame["tool_calls"].tolist() == ins.history(any_store, "src")["tool_calls"].tolist()
    assert frame["model_ms"].isna().all()
    assert frame["duration_ms"].iloc[1:].notna().all()


class _Frozen:
    """A clock stuck on one millisecond: every submission ties."""

    def now(self) -> int:
        return 1_700_000_000_000


async def test_runs_created_in_the_same_millisecond_keep_their_submission_order(
    runs_store: Any,
) -> None:
    """Ordering by (created_at, run_id) put 'busy' before 'waits' whenever two
    runs were submitted within one millisecond (an order-dependent test failed so)."""
    agent = nd.Agent("a", nd.ScriptedModel(["hi"]), version="1")
    client = nd.DurableRuntime(store=runs_store, agents=[agent], deps=nd.Deps(clock=_Frozen()))
    for run_id in ("waits", "busy", "done"):
        await client.submit("a", "Hi.", run_id=run_id)
    assert list(ins.runs(runs_store).index) == ["waits", "busy", "done"]
    assert list(ins.runs(runs_store).index) == ["waits", "busy", "done"]
