"""nbdurable.History: an immutable message sequence that shares its prefix, used like a tuple."""

from __future__ import annotations

import copy
import itertools
import pickle
import threading

import pydantic
import pytest

import nbdurable as nd
from nbdurable.history import History, SharedSequence


def msgs(n: int, prefix: str = "m") -> tuple[nd.Message, ...]:
    return tuple(
        nd.user(f"{prefix}{i}") if i % 2 == 0 else nd.assistant(f"{prefix}{i}") for i in range(n)
    )


# -- a sequence like the tuple it replaces -------------------------------------------------


def test_reads_like_the_tuple_of_its_messages() -> None:
    items = msgs(5)
    h = History(items)
    assert len(h) == 5 and bool(h) and not History()
    assert [h[i] for i in range(5)] == list(items)
    assert h[-1] is items[-1] and h[-5] is items[0]
    for bad in (5, -6):
        with pytest.raises(IndexError):
            h[bad]
    assert h[1:3] == items[1:3] and type(h[1:3]) is tuple
    assert h[::-2] == items[::-2] and h[3:1] == () and h[-2:] == items[-2:]
    assert list(h) == list(items) and list(reversed(h)) == list(reversed(items))
    assert items[2] in h and nd.user("m2") in h and nd.user("zz") not in h
    assert h.index(items[3]) == 3 and h.count(items[0]) == 1
    with pytest.raises(ValueError):
        h.index(nd.user("zz"))
    assert h.as_tuple() == items and (*h,) == items


def test_equals_and_hashes_like_the_tuple() -> None:
    items = msgs(4)
    h = History(items)
    assert h == items and items == h and h != items[:3] and items[:3] != h
    assert h == History(items) and h == History(list(items))  # another backing list
    assert hash(h) == hash(items) == hash(History(items))
    assert {items: "x"}[h] == "x" and len({h, items}) == 1
    # like a tuple, not equal to a list (nor to anything else)
    assert h != list(items) and h != "m0" and h != 0
    assert History() == () and hash(History()) == hash(())


def test_concatenates_with_tuples_and_histories() -> None:
    a, b = msgs(2), msgs(2, "x")
    h = History(a)
    assert h + b == a + b and isinstance(h + b, History)
    assert b + h == b + a and isinstance(b + h, History)
    assert h + History(b) == a + b
    assert h == a  # unchanged by the appends above
    with pytest.raises(TypeError):
        h + list(b)  # type: ignore[operator]
    with pytest.raises(TypeError):
        h + ("not a message",)  # type: ignore[operator]  # noqa: RUF005


def test_holds_messages_only() -> None:
    with pytest.raises(TypeError, match="Messages"):
        History([nd.user("a"), "b"])  # type: ignore[list-item]
    with pytest.raises(TypeError):
        History(msgs(1)).appended({"role": "user"})  # type: ignore[arg-type]


def test_repr_is_short_whatever_the_length() -> None:
    short = History(msgs(2))
    assert repr(short) == f"History({msgs(2)!r})"
    long = History(msgs(10_000))
    text = repr(long)
    assert "10,000 messages" in text and len(text) < 1_000
    assert repr(long[-1]) in text


def test_pickles_and_copies_to_an_equal_history() -> None:
    h = History(msgs(3)).appended(nd.user("last"))
    back = pickle.loads(pickle.dumps(h))
    assert isinstance(back, History) and back == h
    assert copy.copy(h) is h
    deep = copy.deepcopy(h)
    assert deep == h and deep[0] is not h[0]


# -- sharing and forks ---------------------------------------------------------------------


def test_appending_to_the_newest_history_shares_its_list() -> None:
    first = History(msgs(3))
    second = first.appended(nd.user("a"))
    third = second.appended(nd.assistant("b"), nd.user("c"))
    assert third.extends(second) and third.extends(first) and second.extends(first)
    assert not first.extends(second)
    assert first == msgs(3) and len(second) == 4 and len(third) == 6
    assert third[:4] == (*msgs(3), nd.user("a"))


def test_appending_to_an_older_history_forks_and_changes_neither() -> None:
    base = History(msgs(2))
    newer = base.appended(nd.user("newer"))
    fork = base.appended(nd.user("fork"))  # base is not the newest view of its list
    assert newer == (*msgs(2), nd.user("newer"))
    assert fork == (*msgs(2), nd.user("fork"))
    assert not fork.extends(base) and newer.extends(base)
    # each line keeps growing on its own list, neither seeing the other's appends
    newer2 = newer.appended(nd.assistant("n2"))
    fork2 = fork.appended(nd.assistant("f2"))
    assert newer2.extends(newer) and fork2.extends(fork)
    assert newer2 == (*msgs(2), nd.user("newer"), nd.assistant("n2"))
    assert fork2 == (*msgs(2), nd.user("fork"), nd.assistant("f2"))
    assert base == msgs(2) and newer == (*msgs(2), nd.user("newer"))
    assert fork == (*msgs(2), nd.user("fork"))


def test_a_concatenation_shares_like_an_append() -> None:
    base = History(msgs(2))
    grown = base + (nd.user("x"),)  # noqa: RUF005 (the operator is under test)
    assert grown.extends(base)
    again = base + (nd.user("y"),)  # noqa: RUF005 (base is older now: a copy)
    assert grown[-1] == nd.user("x") and again[-1] == nd.user("y") and not again.extends(base)


def test_appends_from_threads_at_once_each_keep_their_own_message() -> None:
    for _ in range(50):
        base = History(msgs(2))
        barrier = threading.Barrier(4)
        results: dict[int, History] = {}

        def grow(
            n: int, base: History, barrier: threading.Barrier, out: dict[int, History]
        ) -> None:
            barrier.wait()
            out[n] = base.appended(nd.user(f"t{n}"))

        threads = [
            threading.Thread(target=grow, args=(n, base, barrier, results)) for n in range(4)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for n, h in results.items():
            assert h == (*msgs(2), nd.user(f"t{n}"))
        assert sum(h.extends(base) for h in results.values()) == 1  # one shared, three forked


# -- pydantic fields ------------------------------------------------------------------------


class AsTuple(pydantic.BaseModel):
    messages: tuple[nd.Message, ...]


class AsHistory(pydantic.BaseModel):
    messages: History


def mixed() -> tuple[nd.Message, ...]:
    image = nd.ImagePart(data=b"\x89PNG\r\n", media_type="image/png")
    call = nd.ToolCallPart(tool_call_id="c1", tool_name="ping", args={"n": 1})
    result = nd.ToolResultPart(tool_call_id="c1", tool_name="ping", result={"ok": "é"})
    return (
        nd.system("sys"),
        nd.user(["look", image]),
        nd.assistant(["calling", call]),
        nd.tool_message([result]),
    )


def test_a_field_takes_tuples_lists_dicts_and_json() -> None:
    items = mixed()
    for given in (items, list(items), [m.model_dump() for m in items]):
        held = AsHistory(messages=given).messages  # type: ignore[arg-type]
        assert isinstance(held, History) and held == items
    assert (
        AsHistory.model_validate_json(AsTuple(messages=items).model_dump_json()).messages == items
    )
    with pytest.raises(pydantic.ValidationError):
        AsHistory(messages=[{"role": "nobody"}])  # type: ignore[list-item]


def test_a_field_takes_a_history_as_is() -> None:
    h = History(mixed())
    assert AsHistory(messages=h).messages is h
    assert AsHistory.model_construct(messages=h).messages is h


def test_serializes_exactly_as_a_tuple_field() -> None:
    items = mixed()
    as_tuple = AsTuple(messages=items)
    for value in (History(items), History(items[:2]).appended(*items[2:])):
        as_history = AsHistory(messages=value)
        assert as_history.model_dump_json() == as_tuple.model_dump_json()
        assert as_history.model_dump() == as_tuple.model_dump()
        assert as_history.model_dump(mode="json") == as_tuple.model_dump(mode="json")
    # a plain tuple put in by model_construct serializes the same way
    assert AsHistory.model_construct(messages=items).model_dump_json() == as_tuple.model_dump_json()
    assert AsHistory.model_json_schema()["properties"]["messages"]["type"] == "array"


def test_a_checkpoint_of_a_history_is_byte_identical_to_one_of_a_tuple() -> None:
    items = mixed()
    fields = {"run_id": "r", "step_index": 1, "status": "running", "created_at": 5}
    of_history = nd.AgentCheckpoint(messages=History(items), **fields)
    of_tuple = nd.AgentCheckpoint.model_construct(messages=items, step_id="r#1", **fields)
    assert of_history.model_dump_json() == of_tuple.model_dump_json()
    assert nd.serialize_checkpoint(of_history) == nd.serialize_checkpoint(of_tuple)
    back = nd.deserialize_checkpoint(nd.serialize_checkpoint(of_history))
    assert isinstance(back.messages, History) and back == of_history
    assert pickle.loads(pickle.dumps(of_history)) == of_history
    for unhashable in (items, History(items)):  # a tool call's args are a dict, as before
        with pytest.raises(TypeError):
            hash(unhashable)


# -- SharedSequence: the same sharing for any items (a call's steps) -------------------------


def test_a_shared_sequence_of_any_items_reads_like_a_tuple_and_forks() -> None:
    base: SharedSequence[int] = SharedSequence([1, 2])
    newer = base.appended(3)
    fork = base.appended(4)
    assert newer == (1, 2, 3) and fork == (1, 2, 4) and base == (1, 2)
    assert newer.extends(base) and not fork.extends(base)
    assert hash(newer) == hash((1, 2, 3)) and newer[-1] == 3 and newer[1:] == (2, 3)
    assert pickle.loads(pickle.dumps(newer)) == (1, 2, 3)
    assert repr(SharedSequence(range(10))).startswith("SharedSequence(<10 items>")
    assert History() != SharedSequence([1]) and SharedSequence() == History() == ()


async def test_step_contexts_share_the_steps_and_the_history() -> None:
    seen: list[nd.StepContext] = []

    def stop(ctx: nd.StepContext) -> bool:
        seen.append(ctx)
        return False

    @nd.tool
    def ping(i: int) -> str:
        """Answer."""
        return f"pong {i}"

    turns: list[object] = [nd.Turn.call("ping", i=i) for i in range(4)] + ["done"]
    model = nd.ScriptedModel(turns, keep_requests=None)
    result = await nd.generate_text(model=model, messages="go", tools=[ping], stop_when=stop)
    assert result.text == "done" and isinstance(result.steps, tuple) and len(result.steps) == 5
    # each context kept what it saw, though later steps were appended after it
    assert [len(c.steps) for c in seen] == [1, 2, 3, 4]
    assert [len(c.messages) for c in seen] == [3, 5, 7, 9]
    assert all(c.steps == result.steps[: len(c.steps)] for c in seen)
    assert all(c.messages == result.messages[: len(c.messages)] for c in seen)
    # one shared list, no copies: every request's history extends the one before
    requests = model.requests
    assert all(isinstance(r.messages, History) for r in requests)
    assert all(b.messages.extends(a.messages) for a, b in itertools.pairwise(requests))
    assert result.messages.extends(requests[-1].messages)
