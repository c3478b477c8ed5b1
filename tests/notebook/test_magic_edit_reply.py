"""%durable approve --arguments JSON (an edited call) and %durable reply (an answer instead)."""

from __future__ import annotations

from typing import Any

import nbdurable as nd
from nbdurable.notebook import NotebookSession

from .conftest import Shown, eventually, state


@nd.tool(needs_approval=True, allow_edit=True)
def archive_table(name: str, keep_days: int = 30) -> str:
    """Archive a warehouse table."""
    return f"archived {name}, kept {keep_days} days"


def archivist() -> nd.Agent:
    model = nd.ScriptedModel(
        [
            nd.Turn.call("archive_table", name="stg_2023"),
            lambda request: f"Tool said: {request.messages[-1].tool_results[0].result}",
        ]
    )
    return nd.Agent("archivist", model, [archive_table], version="1")


async def test_approve_with_edited_arguments(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["archivist"] = archivist()
    magic("agent", "archivist --run-id r1", "Tidy up.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    bad = magic("durable", 'approve r1 --arguments \'{"name": "x", "keep_days": "soon"}\'')
    assert bad.stdout == "" and bad.stderr.startswith("nbdurable: ")
    assert "keep_days" in bad.stderr and "still waits" in bad.stderr
    assert state(nb, "r1") == "waiting_approval"
    garbled = magic("durable", "approve r1 --arguments '{name: x}'")
    assert "--arguments takes a JSON object" in garbled.stderr
    out = magic("durable", 'approve r1 --arguments \'{"name": "stg_2023_old", "keep_days": 7}\'')
    assert out.stdout.startswith(
        "approved archive_table(name='stg_2023') edited to "
        "archive_table(name='stg_2023_old', keep_days=7)"
    ), out.text
    result = await nb.run("r1").result()
    assert result.text == "Tool said: archived stg_2023_old, kept 7 days"


async def test_reply_in_place_of_the_tool(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["archivist"] = archivist()
    magic("agent", "archivist --run-id r1", "Tidy up.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    out = magic("durable", "reply r1 'use the staging schema instead'")
    assert out.stdout.startswith("replied to archive_table(name='stg_2023') in place of the tool")
    result = await nb.run("r1").result()
    assert result.text == "Tool said: use the staging schema instead"
    empty = magic("durable", "reply r1 ''")
    assert "the reply is empty" in empty.stderr
    both = magic("durable", "approve r1 --reply 'no' --arguments '{}'")
    assert "use one of --deny, --arguments and --reply" in both.stderr
