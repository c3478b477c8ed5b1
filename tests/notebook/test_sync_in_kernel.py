"""The blocking API in a real kernel (jupyter_client): cells that wait while the loop runs.

A run started by ``%%agent`` executes as tasks on the kernel's loop; the next cell
blocks on ``run.result_sync()`` and gets the result, because the loop runs nested
meanwhile (another run streams on it all along). A run that waits for an
approval makes the blocking cell raise ``WaitingForHumanError`` at once instead of
hanging (the kernel could not deliver the click while the cell blocks); a click
on the run widget's card, sent as the browser sends it (a ``comm_msg`` on the
shell channel), is handled once the cell returned, and ``result_sync()`` then
gets the answer. A widget-button callback that blocks works the same way.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("jupyter_client")
pytest.importorskip("ipykernel")

SLACK = 60


class Kernel:
    """A real ipykernel started through jupyter_client, executing cells one by one."""

    def __init__(self, cwd: Path) -> None:
        from jupyter_client.manager import KernelManager

        self.manager = KernelManager(kernel_name="python3")
        self.manager.start_kernel(cwd=str(cwd))
        self.client = self.manager.client()
        self.client.start_channels()
        self.client.wait_for_ready(timeout=SLACK)

    def run(self, code: str) -> dict[str, Any]:
        """Execute ``code``; its stdout text, rich outputs and error (None when it ran cleanly)."""
        msg_id = self.client.execute(textwrap.dedent(code))
        outputs: dict[str, Any] = {"stdout": "", "data": [], "error": None}
        while True:
            msg = self.client.get_iopub_msg(timeout=SLACK)
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "stream" and content["name"] == "stdout":
                outputs["stdout"] += content["text"]
            elif kind in ("display_data", "execute_result"):
                outputs["data"].append(content["data"])
            elif kind == "error":
                outputs["error"] = f"{content['ename']}: {content['evalue']}"
            elif kind == "status" and content["execution_state"] == "idle":
                break
        while self.client.get_shell_msg(timeout=SLACK)["parent_header"].get("msg_id") != msg_id:
            pass  # a reply to an earlier request (kernel_info)
        return outputs

    def ok(self, code: str) -> str:
        """Execute ``code``, which must run cleanly; its stdout."""
        out = self.run(code)
        assert out["error"] is None, out["error"]
        return str(out["stdout"])

    def comm_msg(self, comm_id: str, content: dict[str, Any]) -> None:
        """What a browser sends for a widget's ``model.send(content)``."""
        message = self.client.session.msg(
            "comm_msg",
            {"comm_id": comm_id, "data": {"method": "custom", "content": content}},
        )
        self.client.shell_channel.send(message)  # no reply: the next cell runs after it

    def close(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@pytest.fixture
def kernel(tmp_path: Path) -> Iterator[Kernel]:
    k = Kernel(tmp_path)
    try:
        k.ok(
            f"""
            %load_ext nbdurable
            %durable store sqlite:///{tmp_path}/runs.db
            import nbdurable as nd

            @nd.tool(needs_approval=True)
            def drop_table(name: str) -> str:
                \"\"\"Drop a table (a human approves each call).\"\"\"
                return f"dropped {{name}}"

            words = " ".join(f"w{{i}}" for i in range(60))
            streamer = nd.Agent(
                "streamer", nd.ScriptedModel([words], stream_delay=0.02), version="1", stream=True
            )
            talker = nd.Agent("talker", nd.ScriptedModel(["hello"] * 9, mode="sequential"), version="1")
            janitor = nd.Agent(
                "janitor",
                nd.ScriptedModel([nd.Turn.call("drop_table", name="stg"), "done"]),
                [drop_table],
                version="1",
            )
            """
        )
        yield k
    finally:
        k.close()


def _model_id(outputs: dict[str, Any]) -> str:
    for data in outputs["data"]:
        view = data.get("application/vnd.jupyter.widget-view+json")
        if view:
            return str(view["model_id"])
    raise AssertionError(f"no widget displayed: {outputs}")


def test_a_cell_blocks_on_a_magic_run_while_another_run_streams(kernel: Kernel) -> None:
    kernel.ok("%%agent streamer --as bg\nTell a long story.")
    kernel.ok("%%agent talker --as quick\nHi.")
    assert kernel.ok("print(quick.result_sync(timeout=60).text)") == "hello\n"
    # the streaming run went on while the cell blocked, and can be waited on the same way
    story = kernel.ok(
        """
        result = bg.result_sync(timeout=60)
        events = nd.run_sync(nd.read_events(bg.runtime.store, bg.run_id))
        deltas = [e for e in events if e.type == "model_delta"]
        print(result.text.count("w"), len(deltas) > 1)
        """
    )
    assert story == "60 True\n"
    assert kernel.ok(
        "print(nd.generate_text_sync(model=nd.ScriptedModel(['hi']), messages='x').text)"
    ) == ("hi\n")


def test_only_the_kernels_own_loop_is_made_reentrant(kernel: Kernel) -> None:
    """The loops of ipykernel's service threads (IOPub, shell channel, control) stay as they were."""
    kernel.ok("%%agent talker --as quick\nHi.")
    assert kernel.ok("print(quick.result_sync(timeout=60).text)") == "hello\n"
    report = kernel.ok(
        """
        import asyncio, threading
        mine = asyncio.get_running_loop()
        others = [
            t.io_loop.asyncio_loop
            for t in threading.enumerate()
            if getattr(t, "io_loop", None) is not None
        ]
        print(hasattr(mine, "_nest_patched"), type(mine).__name__)
        print(len(others) >= 2, [hasattr(loop, "_nest_patched") for loop in others if loop is not mine])
        """
    )
    first, second = report.splitlines()
    assert first == "True Reentrant_UnixSelectorEventLoop"
    assert second.startswith("True [False") and "True]" not in second and "True," not in second


def test_a_run_waiting_for_approval_stops_the_blocking_wait_and_a_card_click_then_lands(
    kernel: Kernel,
) -> None:
    card_widget = _model_id(kernel.run("%%agent janitor --as j\nClean up."))
    kernel.ok("%%agent streamer --as bg\nTell a long story.")
    waited = kernel.ok(
        """
        try:
            j.result_sync(timeout=60)
        except nd.WaitingForHumanError as error:
            print(type(error).__name__, error.state, len(error.approval_ids))
        """
    )
    assert waited == "WaitingForHumanError waiting_approval 1\n"
    # asked for, the approval state is simply returned
    assert kernel.ok("print(j.wait_sync('waiting_approval', timeout=60).state)") == (
        "waiting_approval\n"
    )
    printed = kernel.ok(
        f"""
            import ipywidgets, json
            import asyncio
            w = ipywidgets.Widget.widgets[{card_widget!r}]
            for _ in range(600):  # the widget shows the card on its next flush
                if w.approvals:
                    break
                nd.run_sync(asyncio.sleep(0.05))
            print(json.dumps(w.approvals[0]))
            """
    )
    card = json.loads(printed)
    # the browser's click, delivered now that no cell blocks
    kernel.comm_msg(
        card_widget,
        {
            "type": "approve",
            "approval_id": card["approval_id"],
            "token": card["token"],
            "reason": None,
        },
    )
    assert kernel.ok("print(j.result_sync(timeout=60).text)") == "done\n"
    assert kernel.ok("print(bg.result_sync(timeout=60).text.count('w'))") == "60\n"


def test_a_widget_callback_blocks_on_a_run_and_durable_approve_unblocks_it(kernel: Kernel) -> None:
    button = _model_id(
        kernel.run(
            """
            import ipywidgets
            from nbdurable.notebook import session
            rt = session().runtime
            rt.register_agents([janitor])
            seen = []
            def on_click(_button):
                run = nd.run_sync(rt.submit("janitor", "Clean up."))
                try:
                    seen.append(run.result_sync(timeout=60).text)
                except nd.WaitingForHumanError as error:
                    seen.append(error.state)
            button = ipywidgets.Button(description="Go")
            button.on_click(on_click)
            button
            """
        )
    )
    kernel.comm_msg(button, {"event": "click"})
    assert kernel.ok("print(seen)") == "['waiting_approval']\n"
    run_id = kernel.ok("print(rt.list_runs('waiting_approval')[-1].run_id)").strip()
    kernel.ok(f"%durable approve {run_id}")
    assert kernel.ok(f"print(nd.Run(rt, {run_id!r}).result_sync(timeout=60).text)") == "done\n"


def test_a_thread_keeps_its_timeout_and_is_joined_while_a_cell_holds_the_loop(
    kernel: Kernel,
) -> None:
    kernel.ok("%%agent talker --as quick\nHi.")
    assert kernel.ok("print(quick.result_sync(timeout=60).text)") == "hello\n"
    kernel.ok("%%agent streamer --as bg\nTell a long story.")  # runs on the kernel's loop
    held = kernel.ok(
        """
        import threading, time

        def wait(call):
            box = {}
            def target():
                started = time.monotonic()
                try:
                    box["outcome"] = call()
                except Exception as error:
                    box["outcome"] = error
                box["elapsed"] = time.monotonic() - started
            thread = threading.Thread(target=target, daemon=True)
            thread.start()
            thread.join(5)  # this cell holds the kernel's loop meanwhile
            return thread.is_alive(), box

        alive, box = wait(lambda: bg.result_sync(timeout=0.5))
        print(alive, type(box.get("outcome")).__name__, box.get("elapsed", 99) < 2.5)
        alive, box = wait(lambda: quick.result_sync().text)  # no timeout
        print(alive, box.get("outcome"), box.get("elapsed", 99) < 2.5)
        """
    )
    assert held == "False TimeoutError True\nFalse hello True\n"
    # the loop is free again: the held run goes on
    assert kernel.ok("print(len(bg.result_sync(timeout=60).text.split()))") == "60\n"
