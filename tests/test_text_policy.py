"""Strings UTF-8 cannot encode: lone surrogates become U+FFFD at the message boundary.

Python turns undecodable bytes into lone surrogates (``os.listdir``, subprocess
output with ``surrogateescape``). Wherever such text enters a run (the prompt,
tool arguments, tool results, tool errors, model text, streamed deltas) the run
goes on, no step is lost, and every store and the event log hold valid UTF-8.
"""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable._text import valid_data, valid_text
from nbdurable.messages import ToolCallPart, ToolResultPart
from nbdurable.parts import ErrorPart, TextDeltaPart
from nbdurable.stores._packing import unpack_json

BAD = "a\udcffb"  # what os.fsdecode(b"a\xffb") gives
GOOD = "a\ufffdb"
# A JSON escape of a surrogate in stored text would read back as a lone surrogate.
_ESCAPED_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}|\\u[dD][c-fC-F][0-9a-fA-F]{2}")


# -- the policy itself -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("a\udcffb", "a\ufffdb"),
        ("a\udcff\udcfeb", "a\ufffd\ufffdb"),  # one replacement per surrogate
        ("\ud83d\ude00", "\U0001f600"),  # a pair is the character it encodes
        ("x\ud83d", "x\ufffd"),
        ("\ude00\ud83d", "\ufffd\ufffd"),  # reversed: two lone surrogates
        ("\U0001f600\udcff", "\U0001f600\ufffd"),
        ("héllo", "héllo"),
    ],
)
def test_valid_text_replaces_lone_surrogates(raw: str, clean: str) -> None:
    assert valid_text(raw) == clean
    assert valid_text(raw).encode("utf-8").decode("utf-8") == clean


def test_valid_data_cleans_keys_and_nested_values_and_keeps_clean_data() -> None:
    clean = {"files": ["a", {"b": (1, 2.5, None, True)}], "n": 3}
    assert valid_data(clean) is clean
    dirty = {BAD: [BAD, {"k": (BAD, 1)}], "n": 3, "same": ["x"]}
    assert valid_data(dirty) == {GOOD: [GOOD, {"k": (GOOD, 1)}], "n": 3, "same": ["x"]}
    assert valid_data(dirty)["same"] is dirty["same"]  # unchanged branches are not copied
    cycle: list[Any] = [BAD]
    cycle.append(cycle)
    assert valid_data(cycle)[0] == GOOD  # a cycle does not recurse forever


def test_every_text_bearing_part_applies_the_policy() -> None:
    call = ToolCallPart(tool_call_id="c" + BAD, tool_name="t", args={BAD: [BAD]})
    assert call.tool_call_id == "c" + GOOD and call.args == {GOOD: [GOOD]}
    result = ToolResultPart(tool_call_id="c", tool_name="t", result={"out": BAD})
    assert result.result == {"out": GOOD}
    assert nd.user(BAD).text == GOOD
    assert nd.Message(role="user", content=BAD, metadata={"m": BAD}).metadata == {"m": GOOD}
    assert TextDeltaPart(step_index=0, delta=BAD).delta == GOOD
    assert ErrorPart(error_type="E", message=BAD).message == GOOD
    request = nd.ToolApprovalRequest(
        approval_id="a", tool_call_id="c", tool_name="t", input={"p": BAD}
    )
    assert request.input == {"p": GOOD}
    assert nd.ToolApprovalResponse(approval_id="a", approved=False, reason=BAD).reason == GOOD
    # the JSON of every part is now encodable, and reads back equal
    message = nd.Message(role="tool", content=(result,))
    assert nd.Message.model_validate_json(message.model_dump_json()) == message


def test_events_payloads_apply_the_policy() -> None:
    event = nd.events.NewEvent(type="x", payload={"message": BAD, BAD: 1}, created_at=0)
    assert event.payload == {"message": GOOD, GOOD: 1}
    assert event.model_dump_json()


# -- every entry point of a loop run, on the stores that write files ---------------------


def _sides() -> dict[str, list[str]]:
    return {"ran": []}


def _tools(log: list[str]) -> list[nd.Tool]:
    @nd.tool
    def list_dir(path: str) -> list[str]:
        """List a directory (file names as os.listdir gives them)."""
        log.append(path)
        return ["ok.csv", BAD]

    @nd.tool
    def open_file(name: str) -> str:
        """Open a file that does not exist."""
        log.append(name)
        raise RuntimeError(f"cannot open {BAD}: no such file")

    return [list_dir, open_file]


def _script(entry: str) -> list[Any]:
    """Two tool steps then an answer, with the bad text entering where ``entry`` says."""
    path = BAD if entry == "tool arguments" else "data"
    text = BAD if entry == "model text" else "listing"
    tool = "open_file" if entry == "tool error" else "list_dir"
    arg = "name" if tool == "open_file" else "path"
    return [
        nd.Turn(text=text, tool_calls=[(tool, {arg: path})]),
        nd.Turn(text=text, tool_calls=[("list_dir", {"path": "more"})]),
        nd.Turn(text="done " + text),
    ]


ENTRIES = ["prompt", "tool arguments", "tool result", "tool error", "model text"]


def _open(kind: str, tmp_path: Path) -> Any:
    if kind == "sqlite":
        return nd.open_store(f"sqlite:///{tmp_path}/runs.db")
    return nd.open_store(f"jsonl:///{tmp_path}/runs")


# Columns whose BLOBs are packed JSON text (nbdurable.stores._packing).
_PACKED = {
    ("events", "payload"),
    ("nodes", "message"),
    ("checkpoints", "usage"),
    ("checkpoints", "extra"),
}


def _assert_stored_bytes_valid(kind: str, tmp_path: Path) -> int:
    """Every stored text is strict UTF-8 without an escaped surrogate; returns the U+FFFD count."""
    replaced = 0
    if kind == "sqlite":
        conn = sqlite3.connect(tmp_path / "runs.db")
        conn.text_factory = bytes
        try:
            tables = [
                r[0].decode()
                for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            ]
            for table in tables:
                columns = [r[1].decode() for r in conn.execute(f'PRAGMA table_info("{table}")')]
                for column in columns:
                    query = f'SELECT "{column}", typeof("{column}") FROM "{table}"'
                    for value, kind in conn.execute(query):
                        if kind == b"blob" and (table, column) in _PACKED:
                            value = unpack_json(value).encode()  # JSON packed by the store
                        elif kind != b"text":
                            continue
                        text = value.decode("utf-8")  # strict: raises on invalid bytes
                        assert not _ESCAPED_SURROGATE.search(value), (table, column, value)
                        replaced += text.count("\ufffd")
        finally:
            conn.close()
    else:
        for path in (tmp_path / "runs").rglob("*"):
            if path.is_file():
                raw = path.read_bytes()
                text = raw.decode("utf-8")
                assert not _ESCAPED_SURROGATE.search(raw), path
                replaced += text.count("\ufffd")
    return replaced


@pytest.mark.parametrize("kind", ["sqlite", "jsonl"])
@pytest.mark.parametrize("entry", ENTRIES)
async def test_loop_run_with_a_lone_surrogate_completes_and_stores_valid_utf8(
    entry: str, kind: str, tmp_path: Path
) -> None:
    log: list[str] = []
    store = _open(kind, tmp_path)
    prompt = BAD if entry == "prompt" else "list the files"
    result = await nd.generate_text(
        model=nd.ScriptedModel(_script(entry)),
        messages=[nd.user(prompt)],
        tools=_tools(log),
        session=nd.DurableSession(store, run_id="run-1"),
    )
    # no step lost: each tool ran once, every step is checkpointed, the latest loads
    assert len(log) == 2
    assert [info.step_index for info in store.history("run-1")] == [0, 1, 2]
    loaded = store.load("run-1")
    assert loaded.status == "completed" and loaded.messages == result.messages
    dumped = json.dumps([m.model_dump(mode="json") for m in loaded.messages], ensure_ascii=False)
    assert "\ufffd" in dumped and not re.search("[\ud800-\udfff]", dumped)
    events = list(await nd.events.read_events(store, "run-1"))
    assert events[-1].type == "run_finished"
    if entry == "tool error":
        [failed] = [
            e for e in events if e.type == "tool_result" and e.payload["result"]["is_error"]
        ]
        assert GOOD in json.dumps(failed.payload, ensure_ascii=False)
    store.close()
    assert _assert_stored_bytes_valid(kind, tmp_path) > 0


async def test_stream_chat_deltas_and_prompt_with_lone_surrogates(tmp_path: Path) -> None:
    log: list[str] = []
    store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
    model = nd.ScriptedModel(
        [nd.Turn(text=f"see {BAD} here", tool_calls=[("list_dir", {"path": BAD})]), f"done {BAD}"]
    )
    stream = nd.stream_chat(
        model=model,
        messages=BAD,
        tools=_tools(log),
        session=nd.DurableSession(store, run_id="run-s"),
    )
    deltas = [part.delta async for part in stream.full_stream if isinstance(part, TextDeltaPart)]
    result = await stream.result()
    assert log == [GOOD]  # the tool got the cleaned argument
    assert GOOD in "".join(deltas) and result.text == f"done {GOOD}"
    stored = [e for e in await nd.events.read_events(store, "run-s") if e.type == "model_delta"]
    assert GOOD in "".join(e.payload["delta"] for e in stored)
    assert store.load("run-s").status == "completed"
    store.close()
    assert _assert_stored_bytes_valid("sqlite", tmp_path) > 0
