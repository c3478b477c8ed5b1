"""Runs over real HTTP: submit, get, list, cancel, retry, and the typed errors."""

from __future__ import annotations

from typing import Any

from nbdurable.runs import RunPatch

from . import agents as test_agents
from .harness import Server


def _submit(server: Server, **body: Any) -> dict[str, Any]:
    with server.client() as http:
        response = http.post("/runs", json=body)
    assert response.status_code == 201, response.text
    return dict(response.json())


def test_submit_get_and_complete(server: Server) -> None:
    run = _submit(server, agent="helper", prompt="What is the answer?")
    assert run["agent_id"] == "helper" and run["state"] in ("pending", "running", "completed")
    server.wait_state(run["run_id"], "completed")
    with server.client() as http:
        got = http.get(f"/runs/{run['run_id']}").json()
    assert got["state"] == "completed" and got["finished"] is True
    assert got["result_text"] == "It is 42."


def test_submit_a_user_message_and_options(server: Server) -> None:
    message = {"role": "user", "content": [{"type": "text", "text": "What is the answer?"}]}
    run = _submit(
        server, agent="helper", prompt=message, session_id="s-1", request_id="req-1", timeout=60
    )
    assert run["session_id"] == "s-1" and run["request_id"] == "req-1"
    assert run["deadline_at"] is not None
    again = _submit(server, agent="helper", prompt=message, request_id="req-1")
    assert again["run_id"] == run["run_id"]  # deduplicated
    with server.client() as http:
        other = http.post(
            "/runs", json={"agent": "helper", "prompt": "else", "request_id": "req-1"}
        )
    assert other.status_code == 409
    assert other.json()["error"]["type"] == "DurableConflictError"


def test_typed_errors(server: Server) -> None:
    with server.client() as http:
        missing = http.get("/runs/nope")
        assert missing.status_code == 404
        assert missing.json() == {
            "error": {"type": "RunNotFoundError", "message": "Run 'nope' not found."}
        }
        unknown = http.post("/runs", json={"agent": "ghost", "prompt": "hi"})
        assert unknown.status_code == 422
        assert unknown.json()["error"]["type"] == "ConfigurationError"
        blank = http.post("/runs", json={"agent": "helper", "prompt": "   "})
        assert blank.status_code == 422 and blank.json()["error"]["type"] == "ConfigurationError"
        invalid = http.post("/runs", json={"agent": "helper"})
        assert invalid.status_code == 422
        body = invalid.json()["error"]
        assert body["type"] == "ValidationError" and body["details"][0]["loc"][-1] == "prompt"
        assistant = http.post(
            "/runs", json={"agent": "helper", "prompt": {"role": "assistant", "content": "x"}}
        )
        assert assistant.status_code == 422
        not_json = http.post(
            "/runs", content=b"{nope", headers={"Content-Type": "application/json"}
        )
        assert not_json.status_code == 422
        route = http.get("/nothing-here")
        assert route.status_code == 404 and route.json()["error"]["type"] == "NotFoundError"


def test_busy_session_is_a_conflict_unless_enqueued(server: Server) -> None:
    first = _submit(server, agent="janitor", prompt="Clean up.", session_id="busy")
    server.wait_state(first["run_id"], "waiting_approval")
    with server.client() as http:
        refused = http.post("/runs", json={"agent": "helper", "prompt": "hi", "session_id": "busy"})
        assert refused.status_code == 409
        assert refused.json()["error"]["type"] == "DurableConflictError"
        queued = http.post(
            "/runs",
            json={"agent": "helper", "prompt": "hi", "session_id": "busy", "enqueue": True},
        )
        assert queued.status_code == 201 and queued.json()["state"] == "queued"


def test_list_filters(server: Server) -> None:
    done = _submit(server, agent="helper", prompt="one")
    waiting = _submit(server, agent="janitor", prompt="two")
    server.wait_state(done["run_id"], "completed")
    server.wait_state(waiting["run_id"], "waiting_approval")
    with server.client() as http:
        everything = http.get("/runs").json()["runs"]
        assert [r["run_id"] for r in everything] == [waiting["run_id"], done["run_id"]]
        by_state = http.get("/runs", params={"state": "waiting_approval"}).json()["runs"]
        assert [r["run_id"] for r in by_state] == [waiting["run_id"]]
        by_agent = http.get("/runs", params={"agent": "helper"}).json()["runs"]
        assert [r["run_id"] for r in by_agent] == [done["run_id"]]
        limited = http.get("/runs", params={"limit": 1}).json()["runs"]
        assert [r["run_id"] for r in limited] == [waiting["run_id"]]
        bad_state = http.get("/runs", params={"state": "sleeping"})
        assert bad_state.status_code == 422
        assert http.get("/runs", params={"limit": 0}).status_code == 422


def test_cancel_a_waiting_run(server: Server) -> None:
    run = _submit(server, agent="janitor", prompt="Clean up.")
    server.wait_state(run["run_id"], "waiting_approval")
    with server.client() as http:
        cancelled = http.post(f"/runs/{run['run_id']}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"
        again = http.post(f"/runs/{run['run_id']}/cancel")  # a finished run is left alone
        assert again.status_code == 200 and again.json()["state"] == "cancelled"
        assert http.post("/runs/nope/cancel").status_code == 404


def test_retry_a_failed_run(server: Server) -> None:
    run = _submit(server, agent="flaky", prompt="Try.")
    failed = server.wait_state(run["run_id"], "failed")
    assert "the model is down" in (failed.error or "")
    with server.client() as http:
        done_run = _submit(server, agent="helper", prompt="x")
        server.wait_state(done_run["run_id"], "completed")
        refused = http.post(f"/runs/{done_run['run_id']}/retry")
        assert refused.status_code == 409 and refused.json()["error"]["type"] == "RunStateError"
        test_agents.FLAKY["fail"] = False
        retried = http.post(f"/runs/{run['run_id']}/retry")
        assert retried.status_code == 200, retried.text
    record = server.wait_state(run["run_id"], "completed")
    assert record.result_text == "Back up."


def test_limits_map_to_413_and_429(make_server: Any) -> None:
    import nbdurable as nd

    server = make_server(
        runtime_options={"limits": nd.Limits(max_payload_bytes=20_000, max_pending_runs=1)}
    )
    with server.client() as http:
        big = http.post("/runs", json={"agent": "helper", "prompt": "x" * 50_000})
        assert big.status_code == 413
        assert big.json()["error"]["type"] == "LimitExceededError"
        first = http.post("/runs", json={"agent": "janitor", "prompt": "one"})
        assert first.status_code == 201
        server.wait_state(first.json()["run_id"], "waiting_approval")
        second = http.post("/runs", json={"agent": "helper", "prompt": "two"})
        assert second.status_code == 429
        assert second.json()["error"]["type"] == "LimitExceededError"


def test_a_runs_late_results_are_in_its_json(server: Server) -> None:
    from nbdurable.runs import LateResult

    run = _submit(server, agent="helper", prompt="What is the answer?")
    assert run["late_results"] == []
    server.wait_state(run["run_id"], "completed")
    late = LateResult(
        tool_call_id="call_1_0", tool_name="pay", step_index=0, fence=1, at=1, outcome="cut_off"
    )
    store = server.runtime.runtime_store
    server.run(lambda: store.rt_late_result(run["run_id"], late, now=2))
    with server.client() as http:
        got = http.get(f"/runs/{run['run_id']}").json()
    assert got["late_results"] == [late.model_dump(mode="json")]


def test_retry_of_a_call_with_a_late_result_is_refused_unless_asked(server: Server) -> None:
    from nbdurable.runs import LateResult, ToolIntent

    run = _submit(server, agent="helper", prompt="What is the answer?")
    run_id = run["run_id"]
    server.wait_state(run_id, "completed")
    # as a takeover leaves it: the call interrupted (started), the stale owner's late result
    runtime, store = server.runtime, server.runtime.runtime_store
    fence = server.run(lambda: store.rt_get(run_id)).fence
    intent = ToolIntent(
        run_id=run_id, tool_call_id="call_1_0", tool_name="pay", step_index=1, state="started"
    )
    late = LateResult(
        tool_call_id="call_1_0",
        tool_name="pay",
        step_index=1,
        fence=fence,
        at=1,
        outcome="result",
        result={"tool_call_id": "call_1_0", "tool_name": "pay", "result": "paid"},
    )
    server.run(lambda: store.rt_intent(intent, fence=fence))
    server.run(lambda: store.rt_late_result(run_id, late, now=2))
    server.run(lambda: runtime.set_state(run_id, RunPatch(state="needs_attention", reason="pay")))
    with server.client() as http:
        refused = http.post(f"/runs/{run_id}/retry")
        assert refused.status_code == 409, refused.text
        message = refused.json()["error"]["message"]
        assert "use_late_result=true" in message and "rerun=true" in message
        assert http.get(f"/runs/{run_id}").json()["state"] == "needs_attention"
        again = http.post(f"/runs/{run_id}/retry", params={"rerun": "true"})
        assert again.status_code == 200, again.text
        assert again.json()["state"] != "needs_attention"
