"""An approval card whose verdict lost to another process, and one whose token expired."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import nbdurable as nd
from nbdurable import events as ev
from nbdurable.notebook.widgets import RunWidget

from .widget_fixtures import SECRET, eventually, front_end_sends, janitor, runtime_for

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROOT = Path(__file__).resolve().parents[2]


def click(widget: RunWidget, action: str, token: str | None = None) -> None:
    card = widget.approvals[0]
    content = {"type": action, "approval_id": card["approval_id"], "reason": None}
    front_end_sends(widget, {**content, "token": card["token"] if token is None else token})


async def test_the_card_switches_to_the_verdict_another_process_recorded(tmp_path: Path) -> None:
    async with runtime_for(tmp_path, janitor()) as runtime:
        run = await runtime.submit("janitor", "Clean up the staging tables.")
        await run.wait("waiting_approval")
        widget = RunWidget(runtime, run.run_id)
        await eventually(lambda: [c["state"] for c in widget.approvals] == ["pending"])
        approval_id = widget.approvals[0]["approval_id"]
        # a teammate denies it from a shell while the card is still on screen
        done = subprocess.run(  # noqa: ASYNC221 (another process, on purpose)
            [
                sys.executable,
                "-m",
                "nbdurable.cli",
                "runs",
                "deny",
                run.run_id,
                approval_id,
                "--store",
                f"sqlite:///{tmp_path}/runs.db",
            ],
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        click(widget, "approve")
        await widget.settled()
        card = widget.approvals[0]
        assert (card["state"], card["message"]) == ("denied", "already denied elsewhere")
        await run.result()
        resolved = [
            e for e in runtime.store.read_events(run.run_id) if e.type == ev.APPROVAL_RESOLVED
        ]
        assert [e.payload["approved"] for e in resolved] == [False]


class _Clock:
    def __init__(self, t: int) -> None:
        self.t = t

    def now(self) -> int:
        return self.t


async def test_an_expired_card_asks_again_with_a_fresh_token(tmp_path: Path) -> None:
    clock = _Clock(0)  # the request is signed with issued_at=0
    store = nd.open_store(f"sqlite:///{tmp_path}/runs.db")
    runtime = await nd.DurableRuntime.open(
        store=store, agents=[janitor()], approval_signer=nd.ApprovalSigner(SECRET, clock=clock)
    )
    try:
        run = await runtime.submit("janitor", "Clean up the staging tables.")
        await run.wait("waiting_approval")
        widget = RunWidget(runtime, run.run_id)
        await eventually(lambda: [c["state"] for c in widget.approvals] == ["pending"])
        old = widget.approvals[0]["token"]
        clock.t = int(time.time() * 1000)
        click(widget, "approve")
        await widget.settled()
        card = widget.approvals[0]
        assert card["state"] == "pending" and "expired" in card["message"]
        assert card["token"] != old and runtime.signer.verify(card["token"])["issued_at"] == clock.t
        assert run.record().state == "waiting_approval" and run.record().verdicts == {}
        click(widget, "approve")  # the human decides again, on the request shown again
        await widget.settled()
        assert widget.approvals[0]["state"] == "approved"
        assert (await run.result()).text == "Done: dropped stg_2023."
    finally:
        await runtime.close()
        store.close()
