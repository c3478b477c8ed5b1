"""Restate's HTTP APIs as nbdurable uses them: register a deployment, send, cancel, find.

Blocking calls (``urllib``: no HTTP client in the core install); the engine runs them
off the event loop. Every failure is one line naming what and where: the server
not reachable (:class:`RestateUnavailableError`), a deployment it refused
(:class:`RestateDeploymentError`).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

from ._errors import RestateDeploymentError, RestateUnavailableError

__all__ = [
    "answers",
    "cancel",
    "deployments",
    "move_deployment",
    "register",
    "send",
    "unfinished_invocations",
]

TIMEOUT = 10.0
"""Seconds one request to the server may take."""


def _request(url: str, body: Any | None, *, method: str = "POST", **headers: str) -> Any:
    """One JSON request; the decoded answer (None when empty).

    Raises:
        RestateUnavailableError: Nothing answers at ``url``.
        urllib.error.HTTPError: The server answered with an error status.
    """
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("content-type", "application/json")
    for name, value in headers.items():
        request.add_header(name.replace("_", "-"), value)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            text = response.read()
    except urllib.error.HTTPError:
        raise
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise RestateUnavailableError(f"no Restate server answers at {url}: {reason}") from None
    return json.loads(text) if text else None


def _refusal(error: urllib.error.HTTPError) -> str:
    """The server's own words for an error answer."""
    try:
        body = json.loads(error.read() or b"{}")
    except ValueError:
        body = {}
    return str(body.get("message") or f"HTTP {error.code}").splitlines()[0]


def register(admin: str, uri: str) -> str:
    """Register (again: ``force``) the SDK endpoint at ``uri`` with the server at ``admin``.

    Returns:
        The deployment's id.

    Raises:
        RestateUnavailableError: No admin API answers at ``admin``.
        RestateDeploymentError: The server refused the deployment (it could not
            reach ``uri``, or found no Restate endpoint there).
    """
    try:
        answer = _request(f"{admin.rstrip('/')}/deployments", {"uri": uri, "force": True})
    except urllib.error.HTTPError as exc:
        raise RestateDeploymentError(
            f"the Restate server at {admin} refused the deployment {uri}: {_refusal(exc)}"
        ) from None
    return str(answer["id"])


def send(ingress: str, target: str, body: Any, idempotency_key: str) -> str | None:
    """Send an invocation of ``target`` (``Service/key/handler``) without waiting; its id.

    The same ``idempotency_key`` twice starts one invocation. None: no deployment
    registered the service (no endpoint serves it yet).

    Raises:
        RestateUnavailableError: No ingress answers at ``ingress``, or it refused the call.
    """
    url = f"{ingress.rstrip('/')}/{target}/send"
    try:
        answer = _request(url, body, idempotency_key=idempotency_key)
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return None
        raise RestateUnavailableError(
            f"the Restate ingress at {ingress} refused {target}: {_refusal(exc)}"
        ) from None
    return str(answer["invocationId"])


def cancel(admin: str, invocation_id: str) -> None:
    """Cancel an invocation (gone already: nothing to do)."""
    url = f"{admin.rstrip('/')}/invocations/{invocation_id}/cancel"
    try:
        _request(url, None, method="PATCH")
    except urllib.error.HTTPError as exc:
        if exc.code != 404:
            raise RestateUnavailableError(
                f"the Restate server at {admin} refused to cancel {invocation_id}: {_refusal(exc)}"
            ) from None


def unfinished_invocations(admin: str, service: str, key: str) -> list[str]:
    """The ids of the invocations of the virtual object ``service/key`` not completed yet."""
    query = (
        "SELECT id FROM sys_invocation WHERE target_service_name = "
        f"'{_quoted(service)}' AND target_service_key = '{_quoted(key)}' AND status != 'completed'"
    )
    answer = _request(f"{admin.rstrip('/')}/query", {"query": query}, accept="application/json")
    return [str(row["id"]) for row in (answer or {}).get("rows", [])]


def _quoted(value: str) -> str:
    return value.replace("'", "''")


def deployments(admin: str) -> list[dict[str, Any]]:
    """The deployments the server knows: id, uri and services of each."""
    return list(
        (_request(f"{admin.rstrip('/')}/deployments", None, method="GET") or {}).get(
            "deployments", []
        )
    )


def move_deployment(admin: str, deployment: str, uri: str) -> None:
    """Point ``deployment`` at the endpoint at ``uri``: its invocations continue there.

    Raises:
        RestateDeploymentError: The server refused (it could not reach ``uri``).
    """
    try:
        _request(f"{admin.rstrip('/')}/deployments/{deployment}", {"uri": uri}, method="PATCH")
    except urllib.error.HTTPError as exc:
        raise RestateDeploymentError(
            f"the Restate server at {admin} refused to move {deployment} to {uri}: {_refusal(exc)}"
        ) from None


def answers(uri: str, timeout: float = 1.0) -> bool:
    """Whether an SDK endpoint answers at ``uri`` (its ``/health``)."""
    try:
        with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False
