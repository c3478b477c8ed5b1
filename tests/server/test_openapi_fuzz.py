"""Property-based API test: every answer conforms to /openapi.json (schemathesis, bounded).

Not only "no 5xx": the status code, content type, headers and body of every
response must be the ones the schema declares for that operation, for generated
requests and for the answers generated requests rarely reach (a body that is not
UTF-8, an approval link without its token, the event stream of a real run).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

import nbdurable as nd

from .harness import TOKEN, Server, start_server

CONFORMANCE = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]
"""What every answer must satisfy: no 5xx, and exactly what the schema declares."""
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@pytest.fixture(scope="module")
def fuzzed_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    path = tmp_path_factory.mktemp("fuzz") / "runs.db"
    server = start_server(f"sqlite:///{path}", max_body_bytes=64 * 1024)
    yield server
    server.stop()


def test_the_schema_is_published_and_precise(fuzzed_server: Server) -> None:
    with fuzzed_server.client(auth=False) as http:
        spec = http.get("/openapi.json").json()
    paths = spec["paths"]
    assert set(paths) >= {
        "/runs",
        "/runs/{run_id}",
        "/runs/{run_id}/cancel",
        "/runs/{run_id}/retry",
        "/runs/{run_id}/events",
        "/runs/{run_id}/approvals",
        "/runs/{run_id}/approvals/{approval_id}",
        "/approve/{run_id}/{approval_id}",
    }
    assert spec["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"
    assert (
        "security" in paths["/runs"]["post"]
        and "security" not in paths["/approve/{run_id}/{approval_id}"]["get"]
    )
    submit = spec["components"]["schemas"]["SubmitIn"]
    assert submit["required"] == ["agent", "prompt"]
    assert (
        "text/event-stream" in paths["/runs/{run_id}/events"]["get"]["responses"]["200"]["content"]
    )
    error = paths["/runs/{run_id}"]["get"]["responses"]["404"]["content"]["application/json"]
    assert error["schema"]["$ref"].endswith("/ErrorBody")


def _operations(server: Server) -> dict[tuple[str, str], Any]:
    schema = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
    found = {}
    for result in schema.get_all_operations():
        operation = result.ok()
        found[(operation.method.upper(), operation.path)] = operation
    return found


@pytest.mark.slow
def test_generated_requests_get_answers_that_conform_to_the_schema(fuzzed_server: Server) -> None:
    """Every operation, ~12 generated requests each (schemathesis' Python API driving
    hypothesis directly: no dependence on its pytest plugin); every answer conforms."""
    operations = list(_operations(fuzzed_server).values())
    assert len(operations) >= 8
    for operation in operations:

        @given(case=operation.as_strategy())
        @settings(
            max_examples=12,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            derandomize=True,
            database=None,
        )
        def check(case: Any) -> None:
            # SSE responses of a live run would stream: ask only for runs that end, quickly
            if case.path.endswith("/events"):
                case.query = {**(case.query or {}), "until": "stop"}
            response = case.call(headers=AUTH, timeout=20)
            case.validate_response(response, checks=CONFORMANCE)
            assert response.status_code < 500, response.text

        check()


def test_answers_generated_requests_rarely_reach_conform_too(fuzzed_server: Server) -> None:
    """A body that is not UTF-8 (400), an approval page without its token (422, JSON
    although the page is HTML), and the event streams of real runs (each SSE
    message as declared, its data an event of the log)."""
    server = fuzzed_server
    operations = _operations(server)
    with server.client() as http:
        done = http.post("/runs", json={"agent": "helper", "prompt": "Go."}).json()["run_id"]
        waiting = http.post("/runs", json={"agent": "janitor", "prompt": "Go."}).json()["run_id"]
    server.wait_state(done, "completed")
    server.wait_state(waiting, "waiting_approval")
    [request] = server.call(_pending(server, waiting))
    ids = {"run_id": waiting, "approval_id": request.approval_id}

    def conform(method: str, path: str, response: Any, **case: Any) -> None:
        operation = operations[(method, path)]
        operation.Case(**case).validate_response(response, checks=CONFORMANCE)

    checked = 0
    with httpx.Client(base_url=server.url, timeout=20) as http:
        for (method, path), operation in operations.items():
            if "requestBody" not in operation.definition.raw:
                continue
            params = {k: v for k, v in ids.items() if "{" + k + "}" in path}
            url = path.format(**params)
            response = http.request(
                method,
                url,
                content=b'{"agent": "helper", "prompt": "\xff\xfe"}',  # not UTF-8
                headers={**AUTH, "Content-Type": "application/json"},
            )
            assert response.status_code == 400, (path, response.text)
            assert response.json()["error"]["type"] == "HTTPError"
            conform(method, path, response, path_parameters=params or None)
            checked += 1
        assert checked == 4  # submit, the API verdict, the link verdict, the AG-UI resume

        page = "/approve/{run_id}/{approval_id}"
        response = http.get(page.format(**ids))  # the link without its token
        assert response.status_code == 422
        assert response.headers["content-type"].startswith("application/json")
        conform("GET", page, response, path_parameters=ids)

        events = "/runs/{run_id}/events"
        for run_id, query in ((done, {}), (waiting, {"until": "stop"})):
            response = http.get(events.format(run_id=run_id), params=query, headers=AUTH)
            assert response.status_code == 200
            conform("GET", events, response, path_parameters={"run_id": run_id}, query=query)
            logged = server.events(run_id)
            messages = [m for m in response.text.split("\n\n") if m.startswith("id:")]
            assert len(messages) == len(logged)
            for message, event in zip(messages, logged, strict=True):
                data = message.split("data: ", 1)[1]
                assert nd.Event.model_validate_json(data) == event


async def _pending(server: Server, run_id: str) -> Any:
    run = await server.runtime.get_run(run_id)
    return await run.pending_approvals()
