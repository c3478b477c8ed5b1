"""Who decided, from a notebook: ``session().user``, the magic (via magic) and the card (via widget).

The name is the one set once on the session, else ``NBDURABLE_USER``, else the
OS user; it is recorded as claimed. An agent's approvers accept it only if listed.
"""

from __future__ import annotations

import getpass
from pathlib import Path
from typing import Any

import pytest

import nbdurable as nd
from nbdurable.notebook import NotebookSession, session, set_session
from nbdurable.notebook.widgets import RunWidget

from .conftest import Shown, eventually, janitor, state
from .widget_fixtures import front_end_sends

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _source(nb: NotebookSession, run_id: str) -> dict[str, Any]:
    [entry] = nb.run(run_id).record().decided.values()
    source: dict[str, Any] = entry.source.model_dump(mode="json")
    return source


def test_the_user_defaults_to_nbdurable_user_then_the_os_user_and_is_set_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    previous = set_session(None)
    try:
        monkeypatch.delenv("NBDURABLE_USER", raising=False)
        assert session().user == getpass.getuser()
        monkeypatch.setenv("NBDURABLE_USER", "kim")
        assert session().user == "kim"
        session().user = "ana"
        assert session().user == "ana"
        session().user = "ana"  # the same name again is no change
        with pytest.raises(nd.ConfigurationError, match="set once"):
            session().user = "lee"
        with pytest.raises(nd.ConfigurationError, match="nonblank"):
            NotebookSession().user = " "
    finally:
        set_session(previous)


async def test_a_magic_verdict_records_the_session_user_via_magic(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    nb.user = "ana"
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id r1", "Clean up the staging tables.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    assert nb.run("r1").record().submitted_by == "ana"
    out = magic("durable", "approve r1")
    assert out.stdout.startswith("approved drop_table(name='stg_2023')"), out.stderr
    source = _source(nb, "r1")
    assert (source["by"], source["authenticated"], source["via"]) == ("ana", False, "magic")
    await nb.run("r1").result()


async def test_a_magic_verdict_from_a_name_the_agent_does_not_list_is_refused(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    nb.user = "bob"
    ip.user_ns["janitor"] = janitor(approvers={"drop_table": ["ana", "lee"]})
    magic("agent", "janitor --run-id r1", "Clean up the staging tables.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    refused = magic("durable", "approve r1")
    assert refused.stdout == "" and refused.stderr.count("\n") == 1
    assert "'bob' may not decide" in refused.stderr and "only ana, lee may" in refused.stderr
    assert state(nb, "r1") == "waiting_approval" and nb.run("r1").record().decided == {}
    await nb.run("r1").approve(by="lee")  # a listed teammate, from this kernel's API
    assert _source(nb, "r1")["by"] == "lee"


async def test_a_card_click_records_via_widget_and_the_card_says_who(
    nb: NotebookSession, tmp_path: Path
) -> None:
    nb.user = "ana"
    nb.register(janitor())
    run = nb.submit(janitor(), "Clean up the staging tables.", run_id="r1")
    await run.wait("waiting_approval")
    widget = RunWidget(nb.runtime, run.run_id)
    await eventually(lambda: [c["state"] for c in widget.approvals] == ["pending"])
    card = widget.approvals[0]
    front_end_sends(
        widget,
        {"type": "approve", "approval_id": card["approval_id"], "token": card["token"]},
    )
    await widget.settled()
    await run.result()
    source = _source(nb, "r1")
    assert (source["by"], source["via"]) == ("ana", "widget")
    await eventually(lambda: widget.approvals[0]["decided_by"].startswith("by ana, "))
    assert widget.approvals[0]["decided_by"].endswith(" after the request")
    widget.close()
