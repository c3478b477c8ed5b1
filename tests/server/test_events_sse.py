"""The event stream over real HTTP: SSE frames, reconnect by Last-Event-ID, until=stop."""

from __future__ import annotations

import contextlib
import json
import time
from typing import Any

import httpx
import pytest
from httpx_sse import connect_sse
from support.seed_consumer import ConsumerCrash, SeedConsumer, sse

from . import agents as test_agents
from .harness import Server


def _submit(server: Server, agent: str, prompt: str = "Go.") -> str:
    with server.client() as http:
        response = http.post("/runs", json={"agent": agent, "prompt": prompt})
    assert response.status_code == 201, response.text
    return str(response.json()["run_id"])


def _read(
    http: httpx.Client, run_id: str, *, headers: dict[str, str] | None = None, **params: Any
) -> list[Any]:
    with connect_sse(
        http, "GET", f"/runs/{run_id}/events", params=params, headers=dict(headers or {})
    ) as src:
        assert src.response.status_code == 200
        assert src.response.headers["content-type"].startswith("text/event-stream")
        return list(src.iter_sse())


def _as_logged(sse: Any) -> dict[str, Any]:
    data = json.loads(sse.data)
    assert sse.id == str(data["offset"]) and sse.event == data["type"]
    return dict(data)


def test_stream_to_completion_equals_the_store_log(server: Server) -> None:
    run_id = _submit(server, "helper")
    with server.client() as http:
        got = [_as_logged(e) for e in _read(http, run_id)]
    logged = [e.model_dump(mode="json") for e in server.events(run_id)]
    assert got == logged
    assert got[-1]["type"] == "run_finished" and got[-1]["payload"]["state"] == "completed"
    assert [e["offset"] for e in got] == list(range(1, len(got) + 1))


def test_disconnect_mid_run_and_reconnect_with_last_event_id(server: Server) -> None:
    run_id = _submit(server, "streamer")
    received: list[dict[str, Any]] = []
    with server.client() as http:
        # first connection: read some live deltas, then drop the connection mid-run
        with connect_sse(http, "GET", f"/runs/{run_id}/events") as source:
            for sse in source.iter_sse():
                received.append(_as_logged(sse))
                if sum(e["type"] == "model_delta" for e in received) >= 40:
                    break
        last_id = received[-1]["offset"]
        assert not server.record(run_id).finished, "the run must still be going when we drop"
        time.sleep(0.2)  # events keep coming while nobody listens
        reconnect = _read(http, run_id, headers={"Last-Event-ID": str(last_id)})
        received += [_as_logged(e) for e in reconnect]
    offsets = [e["offset"] for e in received]
    assert offsets == list(range(1, len(offsets) + 1)), "a gap or a duplicate"
    logged = [e.model_dump(mode="json") for e in server.events(run_id)]
    assert received == logged
    assert server.record(run_id).state == "completed"
    assert sum(e["type"] == "model_delta" for e in received) > 200


def test_after_query_and_a_client_that_saw_the_end(server: Server) -> None:
    run_id = _submit(server, "helper")
    server.wait_state(run_id, "completed")
    logged = server.events(run_id)
    with server.client() as http:
        tail = _read(http, run_id, after=3)
        assert [int(e.id) for e in tail] == [e.offset for e in logged[3:]]
        # the header wins over ?after= (it is what a reconnecting EventSource sends)
        header = _read(http, run_id, after=1, headers={"Last-Event-ID": "5"})
        assert [int(e.id) for e in header] == [e.offset for e in logged[5:]]
        assert _read(http, run_id, after=len(logged)) == []  # saw the end: ends at once
        bad = http.get(f"/runs/{run_id}/events", headers={"Last-Event-ID": "abc"})
        assert bad.status_code == 422 and bad.json()["error"]["type"] == "ConfigurationError"
        assert http.get("/runs/nope/events").status_code == 404
        assert http.get(f"/runs/{run_id}/events", params={"after": -1}).status_code == 422


def test_until_stop_ends_at_a_wait_and_finish_goes_on(server: Server) -> None:
    run_id = _submit(server, "janitor")
    with server.client() as http:
        stopped = _read(http, run_id, until="stop")
        assert stopped[-1].event == "run_state"
        assert json.loads(stopped[-1].data)["payload"]["state"] == "waiting_approval"
        [request] = http.get(f"/runs/{run_id}/approvals").json()
        # a follower without until=stop keeps the stream open across the wait
        with connect_sse(
            http, "GET", f"/runs/{run_id}/events", headers={"Last-Event-ID": stopped[-1].id}
        ) as source:
            verdict = http.post(
                f"/runs/{run_id}/approvals/{request['approval_id']}",
                json={"approve": True, "token": request["token"]},
            )
            assert verdict.status_code == 200, verdict.text
            rest = list(source.iter_sse())
    assert int(rest[0].id) == int(stopped[-1].id) + 1
    assert json.loads(rest[-1].data)["payload"]["state"] == "completed"
    assert any(e.event == "tool_result" for e in rest)


@pytest.mark.spec("S004-19", "S004-20")
async def test_a_seed_consumer_over_sse_reads_to_the_end_and_a_retry_leg(
    server: Server,
) -> None:
    """Over the bridge, a consumer written to the seed (Last-Event-ID
    reconnect after its own crash) stops at run_error, the last event of the failed
    run; after POST /retry a consumer that kept the offset reads the retry leg,
    run_started marked retried, through to run_finished."""
    source = sse(server.url, server.token)
    run_id = _submit(server, "flaky")
    first = SeedConsumer()
    first.save_run_id(run_id)
    with contextlib.suppress(ConsumerCrash):
        await first.consume(source, crash_after=2)
    await first.consume(source)
    assert server.wait_state(run_id, "failed").reason == "model_error"
    log = server.events(run_id)
    assert first.handled == [e.offset for e in log] and first.cleared_at == [log[-1].offset]
    assert log[-1].type == "run_error" and log[-1].payload["state"] == "failed"
    end = log[-1].offset

    test_agents.FLAKY["fail"] = False
    with server.client() as http:
        assert http.post(f"/runs/{run_id}/retry").status_code == 200
    second = SeedConsumer(saved={"run_id": run_id, "offset": end})
    await second.consume(source)
    assert server.wait_state(run_id, "completed")
    log = server.events(run_id)
    assert second.handled == [e.offset for e in log if e.offset > end]
    assert second.cleared_at == [log[-1].offset] and log[-1].type == "run_finished"
    starts = second.payloads_of("run_started")
    assert starts and starts[0]["retried"] is True
