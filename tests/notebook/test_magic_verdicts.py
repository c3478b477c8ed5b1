"""%durable approve: a verdict that lost, and a request whose token is past the maximum age."""

from __future__ import annotations

from typing import Any

from nbdurable._deps import SystemClock
from nbdurable.notebook import NotebookSession

from .conftest import Shown, eventually, janitor, state


class _Epoch:
    def now(self) -> int:
        return 0


async def test_approve_a_request_past_the_max_age_only_with_a_fresh_token(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    nb.runtime.signer.clock = _Epoch()  # the request is signed with issued_at=0
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id r1", "Clean up the staging tables.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    nb.runtime.signer.clock = SystemClock()
    refused = magic("durable", "approve r1")
    assert refused.stdout == "" and refused.stderr.count("\n") == 1
    assert "expired" in refused.stderr and "%durable approve r1 approval_" in refused.stderr
    assert "--fresh" in refused.stderr and "drop_table(name='stg_2023')" in refused.stderr
    assert state(nb, "r1") == "waiting_approval" and nb.run("r1").record().verdicts == {}
    out = magic("durable", "approve r1 --fresh")
    assert out.stdout.startswith("approved drop_table(name='stg_2023')")
    assert (await nb.run("r1").result()).text == "Done: dropped stg_2023."


async def test_a_denial_after_an_approval_is_told_which_won(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id r1", "Clean up the staging tables.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    [request] = await nb.run("r1").pending_approvals()
    await nb.run("r1").approve(request.approval_id)  # another view, or the CLI, first
    lost = magic("durable", f"approve r1 {request.approval_id} --deny")
    assert lost.stderr == (
        f"nbdurable: approval {request.approval_id!r} of run 'r1' was already approved\n"
    )


async def test_a_reply_from_the_magic_and_an_edit_the_tool_does_not_allow(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id r1", "Clean up the staging tables.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    refused = magic("durable", """approve r1 --arguments '{"name": "other"}'""")
    assert "does not allow editing" in refused.stderr and refused.stdout == ""
    assert nb.run("r1").record().decided == {}
    out = magic("durable", "approve r1 --reply 'keep it, it is in use'")
    assert out.stdout.startswith("replied to the pending call in place of the tool")
    [decision] = nb.run("r1").record().decided.values()
    assert (decision.kind, decision.reply) == ("replied", "keep it, it is in use")
    assert decision.source is not None and decision.source.via == "magic"
