"""%durable approvals: the inbox of every run waiting for a verdict, as a DataFrame."""

from __future__ import annotations

from typing import Any

from nbdurable.notebook import NotebookSession

from .conftest import Shown, eventually, janitor, state


class _Epoch:
    def now(self) -> int:
        return 0


async def test_the_pending_approvals_of_every_run_then_every_one_with_all(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    assert "default store" in magic("durable", "approvals").stderr  # reading creates nothing
    nb.register(janitor())
    assert magic("durable", "approvals").value.empty
    magic("agent", "janitor --run-id r1", "Clean up.")
    magic("agent", "janitor --run-id r2 --session s2", "Clean up.")
    await eventually(lambda: state(nb, "r1") == state(nb, "r2") == "waiting_approval")
    out = magic("durable", "approvals")
    frame = out.value
    assert out.stderr == "" and sorted(frame["run_id"]) == ["r1", "r2"]
    assert set(frame["status"]) == {"pending"}
    assert list(frame["tool"]) == ["drop_table", "drop_table"]
    assert frame.loc[frame["run_id"] == "r1", "arguments"].iloc[0] == {"name": "stg_2023"}

    magic("durable", "approve r1 --deny --reason stale")
    left = magic("durable", "approvals").value
    assert list(left["run_id"]) == ["r2"]
    every = magic("durable", "approvals --all").value
    assert dict(zip(every["run_id"], every["status"], strict=True)) == {
        "r1": "denied",
        "r2": "pending",
    }
    assert every.loc[every["run_id"] == "r1", "reason"].iloc[0] == "stale"
    one = magic("durable", "approvals --all --run r1").value
    assert list(one["run_id"]) == ["r1"]
    missing = magic("durable", "approvals --run nope")
    assert missing.value is None and missing.stderr.startswith("nbdurable: ")
    magic("durable", "approve r2")
    assert (await nb.run("r2").result()).text == "Done: dropped stg_2023."
    assert magic("durable", "approvals").value.empty


async def test_a_request_past_the_runtimes_max_age_shows_as_expired(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    nb.runtime.signer.clock = _Epoch()  # the request is signed with issued_at=0
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id old", "Clean up.")
    await eventually(lambda: state(nb, "old") == "waiting_approval")
    frame = magic("durable", "approvals").value
    assert list(frame["status"]) == ["expired"]  # still listed: decidable with a fresh token
