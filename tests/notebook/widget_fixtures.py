"""Fixtures and helpers for the widget tests: real runtimes on SQLite, recorded comms.

``runtime_for(tmp_path, *agents)`` opens a DurableRuntime on a fresh SQLite store
with a known approval secret; ``comms`` records every message a widget would send
to the front-end (``comm.create_comm`` patched with a recording BaseComm).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import comm
import pytest
from comm.base_comm import BaseComm
from support.waiting import eventually as eventually  # re-exported for the tests here

import nbdurable as nd

SECRET = "widget-test-secret-7f3a9c"


@nd.tool
def lookup(table: str) -> dict[str, Any]:
    """Look a table up."""
    return {"table": table, "rows": 0}


@nd.tool(needs_approval=True)
def drop_table(name: str) -> str:
    """Drop a table."""
    return f"dropped {name}"


def janitor(version: str = "1", **kw: Any) -> nd.Agent:
    """Looks a table up, asks to drop it, then says it is done."""
    model = nd.ScriptedModel(
        [
            nd.Turn.call("lookup", "Looking at stg_2023.", table="stg_2023"),
            nd.Turn.call("drop_table", "stg_2023 is empty.", name="stg_2023"),
            "Done: dropped stg_2023.",
        ],
        price_per_million=(3.0, 15.0),
        **kw,
    )
    return nd.Agent("janitor", model, [lookup, drop_table], version=version)


def looker(steps: int, stream_delay: float) -> nd.Agent:
    """``worker``: looks ``steps`` tables up, one a step, streamed; then says it is done."""
    script: list[Any] = [
        nd.Turn.call("lookup", f"Looking at table t{i} now.", table=f"t{i}") for i in range(steps)
    ]
    model = nd.ScriptedModel([*script, "Done."], mode="sequential", stream_delay=stream_delay)
    return nd.Agent("worker", model, [lookup], version="1", stream=True, max_steps=steps + 5)


def size(data: dict[str, Any]) -> int:
    """The bytes of a message as JSON on the wire."""
    return len(json.dumps(data, ensure_ascii=False).encode())


@asynccontextmanager
async def runtime_for(tmp_path: Path, *agents: nd.Agent, **options: Any) -> AsyncIterator[Any]:
    """An open DurableRuntime on SQLite under ``tmp_path`` with the test secret."""
    store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
    runtime = await nd.DurableRuntime.open(
        store=store,
        agents=list(agents),
        approval_signer=nd.ApprovalSigner(SECRET),
        **options,
    )
    try:
        yield runtime
    finally:
        await runtime.close()
        store.close()


class RecordingComm(BaseComm):
    """A comm that keeps every message it would publish, with the time it was sent."""

    log: ClassVar[list[tuple[float, str, dict[str, Any]]]] = []

    def publish_msg(
        self,
        msg_type: str,
        data: Any = None,
        metadata: Any = None,
        buffers: Any = None,
        **keys: Any,
    ) -> None:
        RecordingComm.log.append(
            (time.monotonic(), self.comm_id, {"type": msg_type, **(data or {})})
        )


@pytest.fixture(name="comms")
def comms_fixture(monkeypatch: pytest.MonkeyPatch) -> list[tuple[float, str, dict[str, Any]]]:
    """Every front-end message of widgets created in the test: (time, comm id, data)."""
    log: ClassVar[list[tuple[float, str, dict[str, Any]]]] = []
    monkeypatch.setattr(RecordingComm, "log", log)
    monkeypatch.setattr(comm, "create_comm", lambda **kw: RecordingComm(**kw))
    return log


def front_end_sends(widget: Any, content: dict[str, Any]) -> None:
    """Deliver a custom message from the widget's front-end (what ``model.send`` does)."""
    widget._handle_msg(
        {"content": {"data": {"method": "custom", "content": content}}, "buffers": []}
    )


def click(button: Any) -> None:
    """A front-end click on an ipywidgets Button, as the browser sends it."""
    button._handle_msg(
        {"content": {"data": {"method": "custom", "content": {"event": "click"}}}, "buffers": []}
    )


def step_messages(log: list[Any], widget: Any) -> list[tuple[float, dict[str, Any]]]:
    """(time, content) of the steps deltas and snapshots the kernel sent ``widget``'s views."""
    return [
        (t, data["content"])
        for t, comm_id, data in log
        if comm_id == widget.comm.comm_id
        and data.get("method") == "custom"
        and data["content"].get("type") in ("steps", "snapshot")
    ]


class FrontEndSteps:
    """The steps a front end holds, rebuilt from the kernel's messages as run_view.js does.

    run_view.js's model (``composeSteps``) applies them and keeps its ``snapshot``
    trait current from them (what its widget manager saves). It starts where a
    model there from the widget's creation starts: no step, at sequence 0. A delta
    out of sequence is not applied (``gaps`` counts them: the model would ask for a
    snapshot).
    """

    def __init__(self) -> None:
        self.seq = 0
        self.steps: dict[int, dict[str, Any]] = {}
        self.gaps = 0

    def receive(self, message: dict[str, Any]) -> None:
        """Apply one steps delta or snapshot."""
        if message["type"] == "snapshot":
            if message["seq"] >= self.seq:
                self.seq = message["seq"]
                self.steps = {step["index"]: step for step in message["steps"]}
            return
        if message["seq"] <= self.seq:
            return
        if message["seq"] != self.seq + 1:
            self.gaps += 1
            return
        self.seq = message["seq"]
        for index in message.get("removed", []):
            self.steps.pop(index, None)
        for patch in message["changed"]:
            old = self.steps.get(patch["index"])
            if old is None:
                self.steps[patch["index"]] = patch
                continue
            step = dict(old)
            for key, value in patch.items():
                if key == "append":
                    step["text"] = old["text"] + value
                else:
                    step[key] = value
            self.steps[patch["index"]] = step

    def ordered(self) -> list[dict[str, Any]]:
        """The steps, by index."""
        return [self.steps[i] for i in sorted(self.steps)]

    @property
    def text(self) -> str:
        """The run's text as the view shows it, step after step."""
        return "\n\n".join(s["text"] for s in self.ordered() if s["text"])


def front_end_texts(log: list[Any], widget: Any) -> list[tuple[float, str, bool]]:
    """(time, text, streaming) the view showed after each steps message the kernel sent."""
    view = FrontEndSteps()
    shown = []
    for t, message in step_messages(log, widget):
        view.receive(message)
        streaming = any(step.get("streaming") for step in view.ordered())
        shown.append((t, view.text, streaming))
    return shown
