"""What is particular to the JSONL store: file names, line format, torn lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable.stores.jsonl._format import run_file_name

from .test_conformance import checkpoint, histories, step_pair


@pytest.fixture
def store(tmp_path: Path) -> nd.JsonlSessionStore:
    return nd.JsonlSessionStore(tmp_path / "runs")


def lines(store: nd.JsonlSessionStore, run_id: str) -> list[dict[str, object]]:
    return [json.loads(raw) for raw in store.path_for(run_id).read_text().splitlines()]


RUN_IDS = [
    "run-42",
    "parent::researcher#call_1",
    "parent::researcher#call_1::critic#call_9",
    "Run-42",
    "run-42 ",
    "a/b/../c",
    "..",
    ".hidden",
    "",
    "ünïcødé 🚀",
    "x" * 600,
    "x" * 599 + "y",
    "%41",
    "A",
    "~",
]


def test_any_run_id_gets_its_own_safe_file(store: nd.JsonlSessionStore) -> None:
    names = [run_file_name(r) for r in RUN_IDS]
    assert len({n.lower() for n in names}) == len(RUN_IDS)  # distinct even without case
    for name in names:
        assert "/" not in name and not name.startswith(".") and len(name.encode()) <= 255
    assert run_file_name("parent::researcher#call_1") == "parent%3A%3Aresearcher%23call_1.jsonl"
    h = histories(1)[0]
    for run_id in RUN_IDS:
        store.save(checkpoint(run_id, 0, h))
    assert store.list() == RUN_IDS
    for run_id in RUN_IDS:
        assert store.load(run_id) == checkpoint(run_id, 0, h)


def test_lines_hold_only_new_messages_and_forks_copy(store: nd.JsonlSessionStore) -> None:
    h = histories(3)
    for i, messages in enumerate(h):
        store.save(checkpoint("r", i, messages))
    edited = (*h[1][:3], nd.user("edit"))
    store.save(checkpoint("r", 2, edited))
    store.save(checkpoint("r", 3, (*edited, *step_pair(3))))
    got = lines(store, "r")
    assert [(line["full"], len(line["messages"]), line["message_count"]) for line in got] == [  # type: ignore[arg-type]
        (True, 3, 3),
        (False, 2, 5),
        (False, 2, 7),
        (True, 4, 4),  # does not extend the previous line: the whole history, said so
        (False, 2, 6),
    ]
    assert all(line["run_id"] == "r" for line in got)
    assert store.load("r", step_index=1) == checkpoint("r", 1, h[1])
    assert store.load("r") == checkpoint("r", 3, (*edited, *step_pair(3)))


def test_a_torn_last_line_is_ignored_with_a_warning_then_cut(
    store: nd.JsonlSessionStore, tmp_path: Path
) -> None:
    h = histories(3)
    store.save(checkpoint("r", 0, h[0]))
    store.save(checkpoint("r", 1, h[1]))
    path = store.path_for("r")
    whole = path.read_bytes()
    store.save(checkpoint("r", 2, h[2]))
    third = path.read_bytes()[len(whole) :]
    for torn in (third[: len(third) // 2], third[:-1]):  # cut mid-line, or just before the newline
        path.write_bytes(whole + torn)
        reopened = nd.JsonlSessionStore(tmp_path / "runs")
        with pytest.warns(RuntimeWarning, match="torn last line"):
            assert reopened.load("r") == checkpoint("r", 1, h[1])
        assert [i.step_index for i in reopened.history("r")] == [0, 1]
        reopened.save(checkpoint("r", 2, h[2]))  # cuts the torn bytes first
        data = path.read_bytes()
        assert data.startswith(whole) and data.endswith(b"\n") and data.count(b"\n") == 3
        assert [line["step_index"] for line in lines(reopened, "r")] == [0, 1, 2]
        assert nd.JsonlSessionStore(tmp_path / "runs").load("r") == checkpoint("r", 2, h[2])


def test_a_damaged_middle_line_is_corruption(store: nd.JsonlSessionStore, tmp_path: Path) -> None:
    h = histories(3)
    for i, messages in enumerate(h):
        store.save(checkpoint("r", i, messages))
    path = store.path_for("r")
    raw = path.read_bytes().split(b"\n")
    raw[1] = b"{not json"
    path.write_bytes(b"\n".join(raw))
    with pytest.raises(nd.StoreCorruptionError, match="line 2") as caught:
        nd.JsonlSessionStore(tmp_path / "runs").load("r")
    assert caught.value.run_id == "r" and "after step 0" in str(caught.value)


def test_a_foreign_format_marker_is_refused(tmp_path: Path) -> None:
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "nbdurable-jsonl.json").write_text("garbage")
    with pytest.raises(nd.StoreCorruptionError):
        nd.JsonlSessionStore(tmp_path / "runs")


def test_another_writer_is_noticed_by_file_size(tmp_path: Path) -> None:
    h = histories(3)
    a, b = nd.JsonlSessionStore(tmp_path / "runs"), nd.JsonlSessionStore(tmp_path / "runs")
    a.save(checkpoint("r", 0, h[0]))
    assert b.load("r") == checkpoint("r", 0, h[0])
    a.save(checkpoint("r", 1, h[1]))
    assert b.load("r") == checkpoint("r", 1, h[1])
    b.save(checkpoint("r", 2, h[2]))
    assert a.load("r") == checkpoint("r", 2, h[2])
    assert [i.step_index for i in a.history("r")] == [0, 1, 2]
