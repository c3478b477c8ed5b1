"""Re-running a ``%%agent`` cell whose run is unfinished re-attaches to it (issue 37, item 1).

After a kernel restart the stale widget says to re-run the cell: doing so finds the
cell's run again (by the agent, the session, the prompt and the cell's id) instead of
orphaning it behind a second run; ``--new`` starts a fresh run on purpose.
"""

from __future__ import annotations

from typing import Any

import pytest

from nbdurable.notebook import NotebookSession

from .conftest import Shown, eventually, janitor, state

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

PROMPT = "Clean up the staging tables."


async def test_rerunning_the_cell_after_a_restart_reattaches_to_its_waiting_run(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --as run", PROMPT)
    run_id = ip.user_ns["run"].run_id
    await eventually(lambda: state(nb, run_id) == "waiting_approval")

    await nb.close()  # the kernel restarts; the notebook's cells run again
    ip.user_ns["janitor"] = janitor()
    out = magic("agent", "janitor --as run", PROMPT)
    assert out.stdout == (
        f"re-attached to {run_id} (waiting_approval), this cell's unfinished run; "
        "%%agent ... --new starts a fresh one\n"
    )
    assert ip.user_ns["run"].run_id == run_id and views[-1] == Shown("run", run_id)
    waiting = magic("durable", "runs --status waiting_approval").value
    assert list(waiting.index) == [run_id]  # one run, not two

    # the re-attached run goes on in this kernel
    magic("durable", f"approve {run_id}")
    assert (await nb.run(run_id).result()).text == "Done: dropped stg_2023."

    # a finished run is not re-attached: the cell starts a new one
    magic("agent", "janitor --as run", PROMPT)
    again = ip.user_ns["run"].run_id
    assert again != run_id
    await eventually(lambda: state(nb, again) == "waiting_approval")
    # --new: a fresh run even while the cell's run is unfinished
    assert magic("agent", "janitor --as run --new", PROMPT).stdout == ""
    fresh = ip.user_ns["run"].run_id
    await eventually(lambda: state(nb, fresh) == "waiting_approval")
    waiting = magic("durable", "runs --status waiting_approval").value
    assert sorted(waiting.index) == sorted([again, fresh])


async def test_an_edited_prompt_or_another_cell_is_another_run(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --as run", PROMPT)
    first = ip.user_ns["run"].run_id
    magic("agent", "janitor --as run", PROMPT + " Today.")
    assert ip.user_ns["run"].run_id != first
    ip.parent_header = {"metadata": {"cellId": "another-cell"}}
    try:
        magic("agent", "janitor --as run", PROMPT)
    finally:
        ip.parent_header = {}
    assert ip.user_ns["run"].run_id != first


async def test_a_named_unfinished_run_is_reattached_not_refused(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id r1", PROMPT)
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    await nb.close()
    out = magic("agent", "janitor --run-id r1", PROMPT)
    assert out.stdout.startswith("re-attached to r1 (waiting_approval)")
    assert out.stderr == "" and views[-1] == Shown("run", "r1")
