"""The session store and the checkpoint codec: what a store keeps and returns, what
the codec round-trips."""

from __future__ import annotations

import json

import pytest
from support.checkpointing import approval_model, approve, make_tools

import nbdurable as nd


class TextStore:
    """A "persistent" store: keeps only serialized JSON text, like a database row."""

    def __init__(self) -> None:
        self.rows: dict[str, str] = {}

    def save(self, checkpoint: nd.AgentCheckpoint) -> None:
        self.rows[checkpoint.run_id] = nd.serialize_checkpoint(checkpoint)

    def load(self, run_id: str) -> nd.AgentCheckpoint | None:
        row = self.rows.get(run_id)
        return None if row is None else nd.deserialize_checkpoint(row)


@pytest.mark.spec("S000-07")
def test_load_returns_none_for_an_unknown_run() -> None:
    """``load`` of an unknown run id is None (not an exception)."""
    store = nd.InMemorySessionStore()
    assert store.load("never-saved") is None
    assert store.load("never-saved", step_index=0) is None
    assert store.history("never-saved") == []


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
    model = approval_model(keep_requests=None)
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
