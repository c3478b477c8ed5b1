"""%durable grant / %durable revoke: a standing approval from the notebook."""

from __future__ import annotations

from typing import Any

import pytest

import nbdurable as nd
from nbdurable.notebook import NotebookSession

from .conftest import Shown, eventually, janitor, state


async def test_grant_settles_the_waiting_call_and_revoke_ends_it(
    ip: Any,
    nb: NotebookSession,
    magic: Any,
    views: list[Shown],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("NBDURABLE_USER", "ana")
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id r1", "Clean up the staging tables.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    out = magic("durable", "grant r1 drop_table --minutes 5 --match name=stg_*")
    assert out.stderr == ""
    assert out.stdout.startswith("granted grant_")
    assert "every drop_table call matching {'name': {'glob': 'stg_*'}} in r1" in out.stdout
    assert "for 5 min (by ana)" in out.stdout
    run = nb.run("r1")
    assert (await run.result()).text == "Done: dropped stg_2023."
    events = await nd.read_events(nb.store, "r1")
    [added] = [e.payload for e in events if e.type == "grant_added"]
    assert added["via"] == "magic" and added["granted_by"] == "ana"
    [resolved] = [e.payload for e in events if e.type == "approval_resolved"]
    assert resolved["source"]["grant_id"] == added["grant_id"]
    assert resolved["source"]["via"] == "grant"
    revoked = magic("durable", f"revoke r1 {added['grant_id']}")
    assert revoked.stdout.startswith(f"revoked {added['grant_id']}")
    assert run.record().grants is not None
    assert run.record().grants["revoked"] == [added["grant_id"]]


async def test_grant_rules_and_unknown_grants_are_told_plainly(
    ip: Any, nb: NotebookSession, magic: Any, views: list[Shown]
) -> None:
    ip.user_ns["janitor"] = janitor()
    magic("agent", "janitor --run-id r1", "Clean up the staging tables.")
    await eventually(lambda: state(nb, "r1") == "waiting_approval")
    bad = magic("durable", "grant r1 drop_table --match stg_*")
    assert "--match takes name=GLOB" in bad.stderr and bad.stdout == ""
    narrow = magic("durable", "grant r1 drop_table --match name^=prod_ --match force==yes")
    assert "{'force': {'equals': 'yes'}, 'name': {'prefix': 'prod_'}}" in narrow.stdout
    assert state(nb, "r1") == "waiting_approval"  # the waiting call matches neither rule
    unknown = magic("durable", "revoke r1 grant_nope")
    assert "has no grant 'grant_nope'" in unknown.stderr
