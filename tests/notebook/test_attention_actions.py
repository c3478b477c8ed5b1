"""Retry and Settle of a needs_attention run, from the run widget, the dashboard and ``%durable``.

The run stops in needs_attention the way it does in reality: a kernel-like process
is SIGKILLed inside a ``manual`` tool call, and this process (the restarted kernel)
takes the run over. Each action goes through a token the kernel signed, bound to
the run, the action and the stop; a forged, replayed or crossed token changes
nothing; who decided, and through what, lands in the run record and in explain.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from nbdurable.messages import VerdictSource
from nbdurable.notebook import NotebookSession
from nbdurable.notebook.widgets import RunsDashboard, RunWidget
from nbdurable.runs import RunPatch
from nbdurable.runs._attention import attention_key
from nbdurable.runtime._attention import attention_token, decide_attention

from . import interrupted
from .conftest import eventually, state
from .test_widgets_restart import kill_a_kernel_in_its_tool
from .widget_fixtures import front_end_sends

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


async def stopped(ip: Any, nb: NotebookSession, magic: Any, tmp_path: Path, run_id: str) -> None:
    """``run_id`` in needs_attention: its kernel died in the tool, this one took it over."""
    kill_a_kernel_in_its_tool(tmp_path, run_id, lease_ms=1500)
    ip.user_ns["biller"] = interrupted.biller()
    magic("durable", f"resume {run_id}")
    await eventually(lambda: state(nb, run_id) == "needs_attention", timeout=20)


async def test_the_widget_retries_with_its_signed_token_once_and_explain_says_who(
    ip: Any, nb: NotebookSession, magic: Any, tmp_path: Path
) -> None:
    await stopped(ip, nb, magic, tmp_path, "bill")
    widget = RunWidget(nb.runtime, "bill")
    await eventually(lambda: widget.attention.get("state") == "open")
    offer = dict(widget.attention)
    assert widget.summary.endswith("Retry runs it again, Settle denies it")

    # the agent's rule on who may decide its tool's calls holds for a retry too
    store = nb.runtime.runtime_store
    store.rt_update("bill", RunPatch(approvers={"charge": ["nobody-here"]}))
    front_end_sends(widget, {"type": "retry", "token": offer["retry"]})
    await widget.settled()
    assert widget.attention["message"].startswith("not allowed"), widget.attention
    assert widget.attention["state"] == "open" and state(nb, "bill") == "needs_attention"
    store.rt_update("bill", RunPatch(approvers=None))

    # a forged token, and the settle token sent as a retry: nothing changes
    front_end_sends(widget, {"type": "retry", "token": offer["retry"] + "x"})
    await widget.settled()
    assert widget.attention["state"] == "open"
    assert widget.attention["message"].startswith("invalid token")
    front_end_sends(widget, {"type": "retry", "token": offer["settle"]})
    await widget.settled()
    assert state(nb, "bill") == "needs_attention"

    front_end_sends(widget, {"type": "retry", "token": widget.attention["retry"]})
    await widget.settled()
    assert widget.attention["state"] == "retried", widget.attention
    assert widget.attention["message"].startswith("retried; the run resumes here")
    assert (await nb.run("bill").result()).text == "Charged 5."
    await eventually(lambda: widget.status == "completed")
    assert widget.attention == {"state": "retried", "message": widget.attention["message"]}

    record = nb.runtime.runtime_store.rt_get("bill")
    [entry] = [d for k, d in record.decided.items() if k.startswith("retry@")]
    assert entry.approved and entry.source is not None and entry.source.via == "widget"
    assert entry.token_sha256 and offer["retry"] not in str(record.decided)
    why = "\n".join(magic("durable", "explain bill").value.details)
    assert f"needs_attention: retried by {entry.source.by} (claimed) via widget" in why

    # the same token again, from any view: the stop is gone, nothing happens twice
    replay = await decide_attention(
        nb.runtime,
        "bill",
        "retry",
        token=offer["retry"],
        source=VerdictSource(by="eve", via="widget"),
    )
    assert replay.state == "stale" and not replay.recorded
    widget.close()


async def test_settle_from_the_dashboard_and_from_the_magic_is_signed_and_recorded(
    ip: Any, nb: NotebookSession, magic: Any, tmp_path: Path
) -> None:
    await stopped(ip, nb, magic, tmp_path, "bill")
    record = nb.runtime.runtime_store.rt_get("bill")
    old = attention_token(nb.runtime, record, "settle")
    dashboard = RunsDashboard(nb.runtime, refresh_interval=60)
    row = next(r for r in dashboard.view.rows if r["id"] == "bill")
    assert "Settle denies it" in row["cells"]["reason"]
    dashboard.view._handle_custom_msg(
        {"type": "settle", "run_id": "bill", "reason": "charged by hand"}, []
    )
    await dashboard.settled()
    assert dashboard.view.message.startswith("bill: settled: charged by hand; the run resumes")
    assert not dashboard.view.message_error
    assert (await nb.run("bill").result()).text == "Charged 5."
    [result] = nb.store.load("bill").messages[-2].content
    assert result.is_error and result.result == "charged by hand"
    # a token signed for the stop that was settled acts no more
    late = await decide_attention(
        nb.runtime, "bill", "settle", token=old, source=VerdictSource(by="eve", via="api")
    )
    assert late.state == "stale"
    dashboard.close()

    await stopped(ip, nb, magic, tmp_path, "bill2")
    # A token that is valid for another run's stop at the same fence and decision
    # number (bill's, signed by this kernel): refused for bill2, from every path.
    stop2 = nb.runtime.runtime_store.rt_get("bill2")
    assert (stop2.fence, attention_key(stop2, "settle")[1]) == (
        record.fence,
        attention_key(record, "settle")[1],
    )
    for action, crossed in (
        ("settle", old),
        ("retry", attention_token(nb.runtime, record, "retry")),
    ):
        refused = await decide_attention(
            nb.runtime, "bill2", action, token=crossed, source=VerdictSource(by="eve", via="api")
        )
        assert refused.state == "invalid token" and not refused.recorded, refused
    crossing = RunWidget(nb.runtime, "bill2")
    await eventually(lambda: crossing.attention.get("state") == "open")
    front_end_sends(crossing, {"type": "settle", "token": old, "reason": "crossed"})
    await crossing.settled()
    assert crossing.attention["message"].startswith("invalid token"), crossing.attention
    crossing.close()
    after = nb.runtime.runtime_store.rt_get("bill2")
    assert after.state == "needs_attention" and after.decided == stop2.decided

    out = magic("durable", 'settle bill2 --reason "not twice"')
    assert out.stdout.splitlines()[0] == "settled the interrupted tool call(s) of bill2 as errors"
    record = nb.runtime.runtime_store.rt_get("bill2")
    [entry] = [d for k, d in record.decided.items() if k.startswith("settle@")]
    assert (entry.approved, entry.reason, entry.source.via) == (False, "not twice", "magic")
    why = "\n".join(magic("durable", "explain bill2").value.details)
    assert "needs_attention: settled as denied by " in why and "via magic: not twice" in why
    refused = magic("durable", "settle bill2")
    assert "only a needs_attention run is settled" in refused.stderr
