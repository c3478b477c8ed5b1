"""The bridge's AG-UI endpoints over real HTTP: every event validated by the official
``ag-ui-protocol`` package, interrupts answered by resume entries through the bridge's
own decision path (token, principal, one verdict wins), reconnect by position."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from . import agents as test_agents
from .agui_agents import editable_agents
from .agui_client import (
    approve,
    check_lifecycle,
    deny,
    interrupts,
    parse_stream,
    read,
    resume_body,
    types,
)
from .harness import Server

pytestmark = pytest.mark.slow  # each test starts a bridge (uvicorn on a socket)


def _submit(server: Server, agent: str = "janitor", token: str | None = None) -> str:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with server.client() as http:
        response = http.post("/runs", json={"agent": agent, "prompt": "Go."}, headers=headers)
    assert response.status_code == 201, response.text
    return str(response.json()["run_id"])


def _waiting(server: Server, agent: str = "janitor") -> tuple[str, list[Any]]:
    run_id = _submit(server, agent)
    with server.client() as http:
        first = read(http, run_id, until="stop")
    return run_id, first


def test_a_waiting_run_is_an_agui_run_ending_in_a_tool_call_interrupt(server: Server) -> None:
    run_id, got = _waiting(server)
    check_lifecycle(got)
    assert list(types(got))[:3] == ["RUN_STARTED", "STATE_SNAPSHOT", "STEP_STARTED"]
    started = got[0].data
    assert started["threadId"] == run_id and started["protocolVersion"] == "1.0"
    assert "TEXT_MESSAGE_CONTENT" in types(got)
    text = "".join(e.data["delta"] for e in got if e.type == "TEXT_MESSAGE_CONTENT")
    assert text == "Dropping it."
    [args] = [e.data for e in got if e.type == "TOOL_CALL_ARGS"]
    assert json.loads(args["delta"]) == {"name": "stg_2023"}
    [start] = [e.data for e in got if e.type == "TOOL_CALL_START"]
    assert start["toolCallName"] == "drop_table"
    assert start["parentMessageId"] == got[3].data["messageId"]  # the step's text message
    [request] = server.call(_pending(server, run_id))
    [added] = [e.data for e in got if e.type == "STATE_DELTA"]
    assert added["delta"][0]["path"] == f"/approvals/{request.approval_id}"
    assert list(types(got))[-3:] == ["MESSAGES_SNAPSHOT", "STATE_SNAPSHOT", "RUN_FINISHED"]
    assert got[-2].data["snapshot"]["approvals"][request.approval_id]["status"] == "pending"
    # the messages and the state the protocol asks for before an interrupt
    user, assistant = got[-3].data["messages"]
    assert (user["role"], user["content"]) == ("user", "Go.")
    assert (assistant["role"], assistant["content"]) == ("assistant", "Dropping it.")
    [call] = assistant["toolCalls"]
    assert call["id"] == request.tool_call_id and call["function"]["name"] == "drop_table"
    assert json.loads(call["function"]["arguments"]) == {"name": "stg_2023"}
    [interrupt] = interrupts(got)
    assert interrupt["id"] == request.approval_id
    assert interrupt["reason"] == "tool_call" and interrupt["toolCallId"] == request.tool_call_id
    assert interrupt["metadata"]["nbdurable"]["token"] == request.token
    assert interrupt["metadata"]["nbdurable"]["arguments"] == {"name": "stg_2023"}
    assert interrupt["responseSchema"]["required"] == ["approved"]
    assert interrupt["expiresAt"].endswith("Z")  # the bridge's max age from the token's issue
    # every AG-UI event has the position of the log entry it comes from
    logged = {e.offset: e.type for e in server.events(run_id)}
    assert logged[got[0].position[0]] == "run_started"
    assert logged[got[-1].position[0]] == "run_suspended"


async def _pending(server: Server, run_id: str) -> Any:
    run = await server.runtime.get_run(run_id)
    return await run.pending_approvals()


def test_approve_by_resume_and_the_next_agui_run_finishes(server: Server) -> None:
    run_id, first = _waiting(server)
    [interrupt] = interrupts(first)
    with server.client() as http:
        answered = http.post(
            f"/agui/runs/{run_id}/resume", json=resume_body(run_id, approve(interrupt))
        )
        assert answered.status_code == 200, answered.text
        body = answered.json()
        assert body["threadId"] == run_id
        assert body["verdicts"] == [
            {"interruptId": interrupt["id"], "outcome": "approved", "message": "approved"}
        ]
        rest = read(http, run_id, headers={"Last-Event-ID": first[-1].id})
    check_lifecycle(first + rest)
    assert rest[0].type == "RUN_STARTED" and rest[0].data["runId"] == f"{run_id}.2"
    [result] = [e.data for e in rest if e.type == "TOOL_CALL_RESULT"]
    assert result["toolCallId"] == interrupt["toolCallId"]  # against the original call
    assert result["content"] == "dropped stg_2023"
    assert "TOOL_CALL_START" not in types(rest)  # the call is not proposed again
    status = [e.data["delta"][0] for e in rest if e.type == "STATE_DELTA"]
    assert {
        "op": "replace",
        "path": f"/approvals/{interrupt['id']}/status",
        "value": "approved",
    } in status
    assert rest[-1].type == "RUN_FINISHED"
    assert rest[-1].data["outcome"] == {"type": "success"}
    assert rest[-1].data["result"] == "Done: dropped stg_2023."
    # the verdict went through the bridge's path: recorded as over HTTP
    [resolved] = [e for e in server.events(run_id) if e.type == "approval_resolved"]
    assert resolved.payload["source"]["via"] == "http"


def test_resume_with_accept_sse_streams_the_continuation(server: Server) -> None:
    run_id, first = _waiting(server)
    [interrupt] = interrupts(first)
    with server.client() as http:
        answered = http.post(
            f"/agui/runs/{run_id}/resume",
            json=resume_body(run_id, deny(interrupt, reason="not on a Friday")),
            headers={"Accept": "text/event-stream"},
        )
    assert answered.status_code == 200, answered.text
    assert answered.headers["content-type"].startswith("text/event-stream")
    rest = parse_stream(answered.text)
    check_lifecycle(first + rest)
    assert rest[0].type == "RUN_STARTED" and rest[0].position > first[-1].position
    [result] = [e.data for e in rest if e.type == "TOOL_CALL_RESULT"]
    assert "not on a Friday" in result["content"]
    assert rest[-1].data["result"].startswith("Kept it:")
    assert server.record(run_id).state == "completed"


def test_a_cancelled_entry_denies_the_call(server: Server) -> None:
    run_id, first = _waiting(server)
    [interrupt] = interrupts(first)
    with server.client() as http:
        cancelled = {"interruptId": interrupt["id"], "status": "cancelled"}
        answered = http.post(f"/agui/runs/{run_id}/resume", json=resume_body(run_id, cancelled))
    assert answered.status_code == 200, answered.text
    assert answered.json()["verdicts"][0]["outcome"] == "denied"
    record = server.wait_state(run_id, "completed")
    assert record.result_text.startswith("Kept it:")


def test_the_decision_path_refuses_what_the_bridge_refuses(server: Server) -> None:
    run_id, first = _waiting(server)
    [interrupt] = interrupts(first)
    url = f"/agui/runs/{run_id}/resume"
    no_token = {**approve(interrupt), "metadata": {}}
    forged = approve(interrupt)
    forged["metadata"]["nbdurable"]["token"] = (
        interrupt["metadata"]["nbdurable"]["token"][:-4] + "AAAA"
    )
    with server.client() as http:
        refused = http.post(url, json=resume_body(run_id, no_token))
        assert (
            refused.status_code == 403 and refused.json()["error"]["type"] == "ApprovalTokenError"
        )
        assert http.post(url, json=resume_body(run_id, forged)).status_code == 403
        assert server.record(run_id).state == "waiting_approval"  # nothing recorded
        bad = {
            "another thread": {**resume_body("run-other", approve(interrupt))},
            "no resume": resume_body(run_id),
            "not RunAgentInput": {"resume": []},
            "twice": resume_body(run_id, deny(interrupt), deny(interrupt)),
            "no approved": resume_body(run_id, {**deny(interrupt), "payload": {"ok": 1}}),
            "reply with approve": resume_body(run_id, approve(interrupt, reply="x")),
            "edit with deny": resume_body(run_id, deny(interrupt, editedArgs={"name": "x"})),
            "unknown key": resume_body(run_id, deny(interrupt, why="x")),
        }
        for name, body in bad.items():
            answer = http.post(url, json=body)
            assert answer.status_code == 422, (name, answer.text)
            assert answer.json()["error"]["type"] == "ConfigurationError", name
        assert server.record(run_id).state == "waiting_approval"
        unknown = {**deny(interrupt), "interruptId": "approval_nope"}
        assert http.post(url, json=resume_body(run_id, unknown)).status_code == 409
        assert (
            http.post(
                "/agui/runs/run-nope/resume", json=resume_body("run-nope", deny(interrupt))
            ).status_code
            == 404
        )
        # the first verdict wins; the same resume again answers as the first time did
        first_answer = http.post(url, json=resume_body(run_id, approve(interrupt)))
        assert first_answer.status_code == 200, first_answer.text
        again = http.post(url, json=resume_body(run_id, approve(interrupt)))
        assert again.status_code == 200 and again.json()["verdicts"][0]["outcome"] == "approved"
        late = http.post(url, json=resume_body(run_id, deny(interrupt)))
        assert late.status_code == 409 and late.json()["error"]["verdict"] == "approved"
    with server.client(auth=False) as anonymous:
        assert anonymous.get(f"/agui/runs/{run_id}/events").status_code == 401
        assert anonymous.post(url, json=resume_body(run_id, deny(interrupt))).status_code == 401


def test_named_principals_are_recorded_and_checked_against_approvers(
    make_server: Callable[..., Server],
) -> None:
    tokens = {"ana": "token-of-ana-0123456789", "bob": "token-of-bob-0123456789"}
    server = make_server(tokens=tokens, agents=test_agents.guarded_agents)
    run_id = _submit(server, "guarded", token=tokens["bob"])
    server.wait_state(run_id, "waiting_approval")
    with server.client() as http:
        [interrupt] = interrupts(read(http, run_id, until="stop"))
        url = f"/agui/runs/{run_id}/resume"
        as_bob = {"Authorization": f"Bearer {tokens['bob']}"}
        refused = http.post(url, json=resume_body(run_id, approve(interrupt)), headers=as_bob)
        assert refused.status_code == 403, refused.text
        assert refused.json()["error"]["type"] == "ApproverNotAllowedError"
        as_ana = {"Authorization": f"Bearer {tokens['ana']}"}
        ok = http.post(url, json=resume_body(run_id, approve(interrupt)), headers=as_ana)
        assert ok.status_code == 200, ok.text
    server.wait_state(run_id, "completed")
    [resolved] = [e for e in server.events(run_id) if e.type == "approval_resolved"]
    assert resolved.payload["source"]["by"] == "ana"
    assert resolved.payload["source"]["authenticated"] is True


def test_reconnect_by_position_has_no_gap_and_no_duplicate(server: Server) -> None:
    run_id = _submit(server, "streamer")
    with server.client() as http:
        part = read(http, run_id, limit=60)  # drop the connection mid-run
        assert not server.record(run_id).finished, "the run must still be going when we drop"
        rest = read(http, run_id, headers={"Last-Event-ID": part[-1].id})
        whole = read(http, run_id)
        # cut inside one log entry's events (TOOL_CALL_START of three): resume at its next
        [args] = [e for e in whole if e.type == "TOOL_CALL_ARGS"]
        inside = read(http, run_id, headers={"Last-Event-ID": args.id})
        tail = read(http, run_id, after=args.position[0])  # ?after=N: entries after N
        assert read(http, run_id, headers={"Last-Event-ID": whole[-1].id}) == []  # saw the end
        bad = http.get(f"/agui/runs/{run_id}/events", headers={"Last-Event-ID": "x.1"})
        assert bad.status_code == 422 and bad.json()["error"]["type"] == "ConfigurationError"
        assert http.get("/agui/runs/nope/events").status_code == 404
    assert [e.id for e in part + rest] == [e.id for e in whole]
    assert [e.data for e in part + rest] == [e.data for e in whole]
    check_lifecycle(whole)
    assert [e.type for e in inside][:1] == ["TOOL_CALL_END"]
    assert inside == whole[whole.index(args) + 1 :]
    assert tail == [e for e in whole if e.position[0] > args.position[0]]
    assert sum(e.type == "TEXT_MESSAGE_CONTENT" for e in whole) > 200
    assert whole[-1].data["outcome"] == {"type": "success"}


def test_messages_per_step_a_failed_run_errs_and_a_cancelled_one_ends_cancelled(
    server: Server,
) -> None:
    done = _submit(server, "helper")
    failed = _submit(server, "flaky")
    waiting, first = _waiting(server)
    with server.client() as http:
        got = read(http, done)
        server.wait_state(failed, "failed")
        erred = read(http, failed)
        assert http.post(f"/runs/{waiting}/cancel").status_code == 200
        server.wait_state(waiting, "cancelled")
        cancelled = read(http, waiting, headers={"Last-Event-ID": first[-1].id})
    for events in (got, erred, first + cancelled):
        check_lifecycle(events)
    texts: dict[str, str] = {}
    for e in got:
        if e.type == "TEXT_MESSAGE_CONTENT":
            texts[e.data["messageId"]] = texts.get(e.data["messageId"], "") + e.data["delta"]
    assert list(texts.values()) == ["Looking it up.", "It is 42."]
    assert got[-1].data["result"] == "It is 42."
    assert erred[-1].type == "RUN_ERROR" and erred[-1].data["code"] == "RunFailedError"
    assert "the model is down" in erred[-1].data["message"]
    # cancelled while it waited: the thread's next run says so, and nothing else
    assert cancelled[0].type == "RUN_STARTED"
    assert cancelled[-1].type == "RUN_FINISHED"
    assert cancelled[-1].data["outcome"] == {"type": "cancelled"}


def test_without_the_extra_the_routes_say_which_to_install(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(__import__("sys").modules, "ag_ui", None)  # as if not installed
    run_id = _submit(server, "helper")
    with server.client() as http:
        for answer in (
            http.get(f"/agui/runs/{run_id}/events"),
            http.post(f"/agui/runs/{run_id}/resume", json=resume_body(run_id)),
        ):
            assert answer.status_code == 501, answer.text
            error = answer.json()["error"]
            assert error["type"] == "AgUiUnavailableError"
            assert "pip install 'nbdurable[ag-ui]'" in error["message"]


def test_edit_then_approve_runs_the_edited_call_and_a_reply_answers_instead(
    make_server: Callable[..., Server],
) -> None:
    server = make_server(agents=editable_agents)
    edited, replied, janitor = (
        _submit(server, agent) for agent in ("archivist",) * 2 + ("janitor",)
    )
    url = "/agui/runs/{}/resume".format
    with server.client() as http:
        first = {run: read(http, run, until="stop") for run in (edited, replied, janitor)}
        [interrupt] = interrupts(first[edited])
        schema = interrupt["responseSchema"]["properties"]
        assert schema["editedArgs"]["properties"].keys() == {"name", "days"}  # the tool's schema
        assert "reply" in schema
        # arguments that do not fit the tool's schema, or a tool that allows no edits: 422
        wrong = http.post(
            url(edited),
            json=resume_body(edited, approve(interrupt, editedArgs={"name": 5, "days": "x"})),
        )
        assert wrong.status_code == 422 and wrong.json()["error"]["type"] == "InvalidEditError"
        [janitor_interrupt] = interrupts(first[janitor])
        assert "editedArgs" not in janitor_interrupt["responseSchema"]["properties"]
        refused = http.post(
            url(janitor),
            json=resume_body(janitor, approve(janitor_interrupt, editedArgs={"name": "x"})),
        )
        assert (
            refused.status_code == 422 and refused.json()["error"]["type"] == "EditNotAllowedError"
        )
        assert server.record(edited).state == server.record(janitor).state == "waiting_approval"
        # the edit: the call runs with the human's arguments
        ok = http.post(
            url(edited),
            json=resume_body(edited, approve(interrupt, editedArgs={"name": "stg_old", "days": 7})),
        )
        assert ok.status_code == 200, ok.text
        assert ok.json()["verdicts"][0]["outcome"] == "edited"
        rest = read(http, edited, headers={"Last-Event-ID": first[edited][-1].id})
        # the reply: the human answers in place of the tool
        [other] = interrupts(first[replied])
        answered = http.post(
            url(replied), json=resume_body(replied, deny(other, reply="use the staging copy"))
        )
        assert answered.status_code == 200, answered.text
        assert answered.json()["verdicts"][0]["outcome"] == "replied"
        after_reply = read(http, replied, headers={"Last-Event-ID": first[replied][-1].id})
    check_lifecycle(first[edited] + rest)
    check_lifecycle(first[replied] + after_reply)
    # the audit trail: the model's proposal, the human's edit, what ran
    [proposed] = [e.data for e in first[edited] if e.type == "TOOL_CALL_ARGS"]
    assert json.loads(proposed["delta"]) == {"name": "stg"}
    deltas = [op for e in rest if e.type == "STATE_DELTA" for op in e.data["delta"]]
    assert {
        "op": "replace",
        "path": f"/approvals/{interrupt['id']}/status",
        "value": "edited",
    } in deltas
    assert {
        "op": "add",
        "path": f"/approvals/{interrupt['id']}/editedArguments",
        "value": {"name": "stg_old", "days": 7},
    } in deltas
    [result] = [e.data for e in rest if e.type == "TOOL_CALL_RESULT"]
    assert (
        result["toolCallId"] == interrupt["toolCallId"]
        and result["content"] == "archived stg_old (7 days)"
    )
    assert rest[-1].data["result"] == "Read: archived stg_old (7 days)"
    [reply] = [e.data for e in after_reply if e.type == "TOOL_CALL_RESULT"]
    assert reply["content"] == "use the staging copy"
    assert after_reply[-1].data["result"] == "Read: use the staging copy"


def test_importing_the_bridge_imports_no_ag_ui() -> None:
    code = (
        "import sys\n"
        "import nbdurable, nbdurable.server\n"
        "from nbdurable.server import create_app\n"
        "import nbdurable.server._app\n"
        "print('ag_ui' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]


def test_agui_answers_conform_to_the_openapi_schema(server: Server) -> None:
    schemathesis = pytest.importorskip("schemathesis")
    from schemathesis.checks import (
        content_type_conformance,
        response_schema_conformance,
        status_code_conformance,
    )

    checks = [status_code_conformance, content_type_conformance, response_schema_conformance]
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    operations = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        operations[(operation.method.upper(), operation.path)] = operation
    events = operations[("GET", "/agui/runs/{run_id}/events")]
    resume = operations[("POST", "/agui/runs/{run_id}/resume")]
    run_id, first = _waiting(server)
    [interrupt] = interrupts(first)
    with server.client() as http:
        stream = http.get(f"/agui/runs/{run_id}/events", params={"until": "stop"})
        events.Case(path_parameters={"run_id": run_id}, query={"until": "stop"}).validate_response(
            stream, checks=checks
        )
        body = resume_body(run_id, approve(interrupt))
        answered = http.post(f"/agui/runs/{run_id}/resume", json=body)
        resume.Case(path_parameters={"run_id": run_id}, body=body).validate_response(
            answered, checks=checks
        )
        refused = http.post(f"/agui/runs/{run_id}/resume", json=resume_body("other"))
        assert refused.status_code == 422
        resume.Case(path_parameters={"run_id": run_id}, body={}).validate_response(
            refused, checks=checks
        )
    assert stream.status_code == answered.status_code == 200


def test_a_resume_may_answer_some_interrupts_and_the_run_goes_on_after_the_last(
    server: Server,
) -> None:
    run_id, first = _waiting(server, "pair")
    one, two = interrupts(first)
    assert one["toolCallId"] != two["toolCallId"]
    url = f"/agui/runs/{run_id}/resume"
    with server.client() as http:
        partial = http.post(url, json=resume_body(run_id, approve(one)))
        assert partial.status_code == 200, partial.text
        assert partial.json()["run"]["state"] == "waiting_approval"  # the other call waits
        last = http.post(
            url,
            json=resume_body(run_id, deny(two, reason="only a")),
            headers={"Accept": "text/event-stream"},
        )
    rest = parse_stream(last.text)
    check_lifecycle(first + rest)
    results = {
        e.data["toolCallId"]: e.data["content"] for e in rest if e.type == "TOOL_CALL_RESULT"
    }
    assert results[one["toolCallId"]] == "dropped a" and "only a" in results[two["toolCallId"]]
    assert (
        rest[-1].data["outcome"] == {"type": "success"}
        and rest[-1].data["result"] == "Both handled."
    )


def test_a_valid_token_of_another_run_decides_nothing_here(server: Server) -> None:
    """A caller holding another run's signed interrupt (its id and token) cannot use it to
    approve, edit or reply on this run: refused, and neither run records a verdict."""
    mine, mine_events = _waiting(server)
    theirs, their_events = _waiting(server)
    [interrupt] = interrupts(mine_events)
    [foreign] = interrupts(their_events)
    token = foreign["metadata"]["nbdurable"]["token"]
    url = f"/agui/runs/{mine}/resume"
    with server.client() as http:
        for entry in (
            approve(foreign),  # their interrupt, their token
            {**approve(interrupt), "metadata": {"nbdurable": {"token": token}}},  # theirs on mine
            {
                **approve(interrupt, editedArgs={"name": "stg_2023"}),
                "metadata": {"nbdurable": {"token": token}},
            },
        ):
            answer = http.post(url, json=resume_body(mine, entry))
            assert answer.status_code in (403, 409), answer.text
        assert server.record(mine).state == "waiting_approval"
        assert server.record(theirs).state == "waiting_approval"
        assert server.record(mine).decided == {} and server.record(theirs).decided == {}
