"""The SessionStore seam and the checkpoint codec, as the loops use them."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from support.checkpointing import (
    SpyStore,
    approval_model,
    approve,
    drain,
    make_tools,
    three_step_model,
)

import nbdurable as nd
from nbdurable.loop.parts import ErrorPart, FinishPart


class AsyncStore:
    """A store whose methods are coroutine functions (optionally only some of them)."""

    def __init__(self, *, async_save: bool = True, async_load: bool = True) -> None:
        self.rows: dict[str, nd.AgentCheckpoint] = {}
        self.saves = 0
        self.loads = 0
        self.save = self._async_save if async_save else self._sync_save
        self.load = self._async_load if async_load else self._sync_load

    async def _async_save(self, checkpoint: nd.AgentCheckpoint) -> None:
        await asyncio.sleep(0)
        self._sync_save(checkpoint)

    def _sync_save(self, checkpoint: nd.AgentCheckpoint) -> None:
        self.saves += 1
        self.rows[checkpoint.run_id] = checkpoint

    async def _async_load(self, run_id: str) -> nd.AgentCheckpoint | None:
        await asyncio.sleep(0)
        return self._sync_load(run_id)

    def _sync_load(self, run_id: str) -> nd.AgentCheckpoint | None:
        self.loads += 1
        return self.rows.get(run_id)


class TextStore:
    """A "persistent" store: keeps only serialized JSON text, like a database row."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}

    def save(self, checkpoint: nd.AgentCheckpoint) -> None:
        self.rows[checkpoint.run_id] = nd.serialize_checkpoint(checkpoint)

    def load(self, run_id: str) -> nd.AgentCheckpoint | None:
        row = self.rows.get(run_id)
        return None if row is None else nd.deserialize_checkpoint(row)


@pytest.mark.spec("S000-06")
@pytest.mark.parametrize(
    ("async_save", "async_load"), [(True, True), (True, False), (False, True), (False, False)]
)
async def test_sync_and_async_store_methods_are_both_accepted(
    async_save: bool, async_load: bool
) -> None:
    """``save``/``load`` may be plain or coroutine functions, in any mix."""
    store = AsyncStore(async_save=async_save, async_load=async_load)
    assert isinstance(store, nd.SessionStore)
    log: list[str] = []
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-a"),
    )
    assert first.status == "suspended"
    assert store.rows["run-a"].status == "suspended"  # an async save was really awaited
    done = await nd.resume_from_checkpoint(
        store,
        "run-a",
        model=approval_model(),
        tools=make_tools(log),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    assert done.status == "completed" and done.text == "finished"
    assert log == ["lookup:a", "drop:stg"]
    assert store.saves == 3  # step 0 running, step 1 suspended, step 2 completed
    assert store.loads >= 1
    assert store.rows["run-a"].status == "completed"


@pytest.mark.spec("S000-06")
async def test_async_store_works_for_the_streaming_twins() -> None:
    """stream_chat and resume_stream_from_checkpoint also await async stores."""
    store = AsyncStore()
    stream = nd.stream_chat(
        model=approval_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-s"),
    )
    await drain(stream)
    pending = await stream.pending_approvals
    assert store.rows["run-s"].status == "suspended"
    resumed = nd.resume_stream_from_checkpoint(
        store,
        "run-s",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[approve(pending[0])],
    )
    await drain(resumed)
    assert await resumed.status == "completed"
    assert store.rows["run-s"].status == "completed"


@pytest.mark.spec("S000-07")
def test_load_returns_none_for_an_unknown_run() -> None:
    """``load`` of an unknown run id is None (not an exception)."""
    store = nd.InMemorySessionStore()
    assert store.load("never-saved") is None
    assert store.load("never-saved", step_index=0) is None
    assert store.history("never-saved") == []


@pytest.mark.spec("S000-07")
async def test_loop_starts_fresh_when_load_returns_none() -> None:
    """The loop treats ``None`` from ``load`` as a new run starting at step 0."""
    store = SpyStore()
    result = await nd.generate_text(
        model=three_step_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="fresh"),
    )
    assert store.loads == ["fresh"]
    assert [c.step_index for c in store.saved] == [0, 1, 2]
    assert result.step_index == 2


@pytest.mark.spec("S000-08")
async def test_store_without_delete_or_list_works_for_every_loop() -> None:
    """``delete``/``list`` are optional; a save+load store runs, suspends, resumes."""
    store = SpyStore()
    assert not hasattr(store, "delete") and not hasattr(store, "list")
    log: list[str] = []
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-m"),
    )
    resumed = nd.resume_stream_from_checkpoint(
        store,
        "run-m",
        model=approval_model(),
        tools=make_tools(log),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    await drain(resumed)
    assert await resumed.status == "completed"
    assert log == ["lookup:a", "drop:stg"]
    assert [c.status for c in store.saved] == ["running", "suspended", "completed"]


@pytest.mark.spec("S000-08")
async def test_loops_never_call_delete() -> None:
    """The loops never call the optional ``delete`` (cleanup tooling only)."""

    class DeleteSpy(SpyStore):
        def __init__(self) -> None:
            super().__init__()
            self.deleted: list[str] = []

        def delete(self, run_id: str) -> None:
            self.deleted.append(run_id)

        def list(self) -> list[str]:
            return sorted({c.run_id for c in self.saved})

    store = DeleteSpy()
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-d"),
    )
    await nd.resume_from_checkpoint(
        store,
        "run-d",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    # Resuming a completed run and a fresh streaming run: still no delete.
    await nd.resume_from_checkpoint(store, "run-d", model=approval_model(), tools=make_tools([]))
    await drain(
        nd.stream_chat(
            model=three_step_model(),
            messages="go",
            tools=make_tools([]),
            session=nd.DurableSession(store, run_id="run-e"),
        )
    )
    assert store.deleted == []
    assert store.list() == ["run-d", "run-e"]


@pytest.mark.spec("S000-08")
def test_in_memory_store_optional_methods() -> None:
    """The bundled store offers ``list`` (run ids) and ``delete`` (unknown: no-op)."""
    store = nd.InMemorySessionStore()
    for run_id in ("b", "a"):
        store.save(
            nd.AgentCheckpoint(
                run_id=run_id, step_index=0, status="running", messages=(), created_at=1
            )
        )
    assert store.list() == ["b", "a"]
    store.delete("b")
    store.delete("unknown")
    assert store.list() == ["a"]
    assert store.load("b") is None


@pytest.mark.spec("S000-09")
async def test_in_memory_store_keeps_every_snapshot_load_returns_latest() -> None:
    """Every snapshot is kept; ``load`` gives the latest, history all."""
    store = nd.InMemorySessionStore()
    first = await nd.generate_text(
        model=approval_model(),
        messages="go",
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-h"),
    )
    assert store.load("run-h").status == "suspended"
    await nd.resume_from_checkpoint(
        store,
        "run-h",
        model=approval_model(),
        tools=make_tools([]),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    history = store.history("run-h")
    assert [(h.step_index, h.status) for h in history] == [
        (0, "running"),
        (1, "suspended"),
        (2, "completed"),
    ]
    assert all(isinstance(h, nd.CheckpointInfo) for h in history)
    assert not hasattr(history[0], "messages")  # metadata only
    assert [h.message_count for h in history] == [3, 4, 6]

    latest = store.load("run-h")
    assert latest.step_index == 2 and latest.status == "completed"
    older = store.load("run-h", step_index=1)
    assert older.status == "suspended"
    assert older.pending_approvals == first.pending_approvals
    assert older.messages == first.messages
    assert store.load("run-h", step_index=0).messages == first.messages[:3]
    assert store.load("run-h", step_index=9) is None


@pytest.mark.spec("S000-09")
def test_latest_save_wins_also_for_a_repeated_step_index() -> None:
    """The latest save of a run wins for ``load`` and ``load(step_index=)``."""
    store = nd.InMemorySessionStore()

    def cp(step: int, created_at: int) -> nd.AgentCheckpoint:
        return nd.AgentCheckpoint(
            run_id="r", step_index=step, status="running", messages=(), created_at=created_at
        )

    store.save(cp(0, 1))
    store.save(cp(1, 2))
    store.save(cp(1, 3))
    assert store.load("r").created_at == 3
    assert store.load("r", step_index=1).created_at == 3
    assert store.load("r", step_index=0).created_at == 1
    assert [h.created_at for h in store.history("r")] == [1, 2, 3]


@pytest.mark.spec("S000-10")
@pytest.mark.parametrize("async_save", [False, True])
async def test_raising_save_is_logged_and_the_run_goes_on(
    deps: nd.Deps, logger: Any, async_save: bool
) -> None:
    """A raising ``save`` is logged via ``deps.logger.error``; the run completes."""

    class BrokenStore:
        def __init__(self) -> None:
            self.attempts = 0

        def load(self, run_id: str) -> None:
            return None

        if async_save:

            async def save(self, checkpoint: nd.AgentCheckpoint) -> None:
                self.attempts += 1
                raise OSError("disk full")

        else:

            def save(self, checkpoint: nd.AgentCheckpoint) -> None:
                self.attempts += 1
                raise OSError("disk full")

    store = BrokenStore()
    log: list[str] = []
    result = await nd.generate_text(
        model=three_step_model(),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-broken"),
        deps=deps,
    )
    assert result.status == "completed" and result.text == "all done"
    assert log == ["lookup:a", "lookup:b"]
    assert store.attempts == 3
    assert len(logger.errors) == 3
    assert "run-broken#0" in logger.errors[0] and "disk full" in logger.errors[0]

    stream = nd.stream_chat(
        model=three_step_model(),
        messages="go",
        tools=make_tools(log),
        session=nd.DurableSession(store, run_id="run-broken-2"),
        deps=deps,
    )
    parts = await drain(stream)
    assert not any(isinstance(p, ErrorPart) for p in parts)
    assert isinstance(parts[-1], FinishPart) and parts[-1].status == "completed"
    assert len(logger.errors) == 6


@pytest.mark.spec("S000-11")
async def test_codec_round_trips_image_bytes() -> None:
    """Serialize gives JSON text; deserialize gives real bytes back; nothing lost."""
    png = b"\x89PNG\r\n\x1a\n\x00\xff\xfe binary"
    store = nd.InMemorySessionStore()
    await nd.generate_text(
        model=approval_model(),
        messages=[nd.user(["What is in this chart?", png])],
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-img"),
    )
    checkpoint = store.load("run-img")
    text = nd.serialize_checkpoint(checkpoint)
    assert isinstance(text, str)
    assert isinstance(json.loads(text), dict)
    back = nd.deserialize_checkpoint(text)
    assert back == checkpoint
    image = back.messages[0].content[1]
    assert isinstance(image, nd.ImagePart)
    assert isinstance(image.data, bytes) and image.data == png
    assert nd.deserialize_checkpoint(text.encode("utf-8")) == checkpoint
    assert nd.serialize_checkpoint(back) == text


@pytest.mark.spec("S000-11")
async def test_a_text_only_store_resumes_with_real_image_bytes() -> None:
    """A store keeping only codec text hands the model real bytes after resume."""
    png = b"\x00\x01\x02\xff image"
    store = TextStore()
    first = await nd.generate_text(
        model=approval_model(),
        messages=[nd.user(["Describe", png])],
        tools=make_tools([]),
        session=nd.DurableSession(store, run_id="run-t"),
    )
    model = approval_model()
    await nd.resume_from_checkpoint(
        store,
        "run-t",
        model=model,
        tools=make_tools([]),
        approval_responses=[approve(first.pending_approvals[0])],
    )
    sent = model.requests[0].messages[0].content[1]
    assert isinstance(sent, nd.ImagePart) and sent.data == png


@pytest.mark.spec("S000-11")
def test_codec_is_version_gated() -> None:
    """The codec refuses other versions and garbage instead of misreading them."""
    checkpoint = nd.AgentCheckpoint(
        run_id="r", step_index=0, status="running", messages=(nd.user("hi"),), created_at=5
    )
    data = json.loads(nd.serialize_checkpoint(checkpoint))
    data["version"] = 2
    with pytest.raises(nd.CheckpointVersionError):
        nd.deserialize_checkpoint(json.dumps(data))
    with pytest.raises(nd.StoreCorruptionError):
        nd.deserialize_checkpoint("{not json")
    with pytest.raises(nd.StoreCorruptionError):
        nd.deserialize_checkpoint('{"version": 1, "run_id": "r"}')
