"""A request signed with a retired key can only be denied, over a real bridge restarted per step.

docs/core.md ("Rotating the approval secret"): once key ``k1`` is retired, a
request still waiting with a ``k1`` token can only be denied (or the run
forked). ``nbdurable serve`` runs as a subprocess, restarted with each step of
the rotation (``NBDURABLE_APPROVAL_SECRET`` as a key set): a link minted while
``k1`` was still trusted (signed with ``k2``, so it verifies itself) approves
nothing after ``k1`` is retired, no new link is minted, and a denial still works.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx

from .test_link_minting import _as, _env, _token, _wait_for, bridge

K1, K2 = "the first approval secret", "the second approval secret"


def _keys(current: str | None, **keys: str) -> dict[str, str]:
    keyset: dict[str, object] = {"keys": keys}
    if current is not None:
        keyset["current"] = current
    return _env(NBDURABLE_APPROVAL_SECRET=json.dumps(keyset))


def test_after_k1_is_retired_a_request_it_signed_can_only_be_denied(tmp_path: Path) -> None:
    with bridge(tmp_path, env=_keys("k1", k1=K1)) as url, _as(url, "ana") as http:
        run_id = http.post("/runs", json={"agent": "janitor", "prompt": "Go."}).json()["run_id"]
        _wait_for(lambda: http.get(f"/runs/{run_id}").json()["state"] == "waiting_approval")
    # step 2: k2 signs, k1 still verifies; the link is signed with k2
    with bridge(tmp_path, env=_keys("k2", k2=K2, k1=K1)) as url, _as(url, "ana") as http:
        [pending] = http.get(f"/runs/{run_id}/approvals", params={"to": "ana"}).json()
        assert pending["link"] is not None
        early_link = _token(pending["link"])
    # step 4: k1 retired
    with bridge(tmp_path, env=_keys(None, k2=K2)) as url, _as(url, "ana") as http:
        approval_id = pending["approval_id"]
        for params in ({}, {"to": "ana"}):  # no new link for it
            [listed] = http.get(f"/runs/{run_id}/approvals", params=params).json()
            assert listed["link"] is None
        [row] = http.get("/approvals", params={"run_id": run_id}).json()
        assert row["link"] is None
        with httpx.Client(base_url=url, timeout=20) as anonymous:
            refused = anonymous.post(
                f"/approve/{run_id}/{approval_id}", json={"approve": True, "token": early_link}
            )
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["type"] == "ApprovalTokenError"
        assert "can only be denied" in refused.json()["error"]["message"]
        refused = http.post(
            f"/runs/{run_id}/approvals/{approval_id}", json={"approve": True, "token": early_link}
        )
        assert refused.status_code == 403 and "retired" in refused.json()["error"]["message"]
        assert http.get(f"/runs/{run_id}").json()["state"] == "waiting_approval"
        # a denial needs no trusted request: the same link denies
        with httpx.Client(base_url=url, timeout=20) as anonymous:
            denied = anonymous.post(
                f"/approve/{run_id}/{approval_id}",
                json={"approve": False, "token": early_link, "reason": "signed with k1"},
            )
        assert denied.status_code == 200, denied.text
        run = _wait_for(
            lambda: (r := http.get(f"/runs/{run_id}").json())["state"] == "completed" and r
        )
    assert run["result_text"].startswith("Kept it")
