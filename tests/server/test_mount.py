"""The bridge mounted inside an existing ASGI app, served over real HTTP."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI

from .harness import Server


def _mount(bridge: Any) -> FastAPI:
    parent = FastAPI()

    @parent.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    parent.mount("/nbdurable", bridge)
    return parent


def test_mounted_bridge_serves_runs_and_links(make_server: Any) -> None:
    server: Server = make_server(wrap=_mount)
    with server.client() as http:
        assert http.get("/health").json() == {"status": "ok"}
        run = http.post("/nbdurable/runs", json={"agent": "janitor", "prompt": "Go."})
        assert run.status_code == 201
        run_id = run.json()["run_id"]
        server.wait_state(run_id, "waiting_approval")
        [approval] = http.get(f"/nbdurable/runs/{run_id}/approvals").json()
        assert approval["link"].startswith(f"{server.url}/nbdurable/approve/{run_id}/")
        assert http.get("/nbdurable/openapi.json").status_code == 200
    with server.client(auth=False) as http:
        page = http.get(approval["link"])
        assert page.status_code == 200 and "drop_table" in page.text
        token = approval["link"].split("token=")[1]
        from urllib.parse import unquote

        ok = http.post(
            f"/nbdurable/approve/{run_id}/{approval['approval_id']}",
            json={"approve": True, "token": unquote(token)},
        )
        assert ok.status_code == 200, ok.text
    server.wait_state(run_id, "completed")
