"""Every error answer is a typed JSON body: ``{"error": {"type": ..., "message": ...}}``.

A request that does not validate adds ``details`` (where and why, never the input).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException

from .._errors import ApprovalNotPendingError, NbdurableError
from ._errors import NotAuthenticatedError, status_of

__all__ = [
    "ERROR_RESPONSES",
    "ErrorBody",
    "ErrorDetail",
    "error_response",
    "error_responses",
    "install_error_handlers",
]


class ErrorDetail(BaseModel):
    """What went wrong.

    ``verdict`` comes with an ``ApprovalNotPendingError``: the verdict that was
    recorded on the approval (``approved``, ``denied`` or ``replied``), when one was.
    """

    type: str
    message: str
    details: list[dict[str, Any]] | None = None
    verdict: Literal["approved", "denied", "replied"] | None = None


class ErrorBody(BaseModel):
    """The body of every error answer."""

    error: ErrorDetail


def error_responses(described: Mapping[int, str]) -> dict[int | str, dict[str, Any]]:
    """OpenAPI ``responses`` for error answers: each status, its description, :class:`ErrorBody`."""
    return {status: {"model": ErrorBody, "description": text} for status, text in described.items()}


def error_response(
    status: int,
    type_: str,
    message: str,
    *,
    details: list[dict[str, Any]] | None = None,
    headers: Mapping[str, str] | None = None,
    verdict: Literal["approved", "denied", "replied"] | None = None,
) -> JSONResponse:
    """A typed JSON error answer."""
    body = ErrorBody(
        error=ErrorDetail(type=type_, message=message, details=details, verdict=verdict)
    )
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


_HTTP_TYPES = {
    404: "NotFoundError",
    405: "MethodNotAllowedError",
    413: "PayloadTooLargeError",
}


def _json_safe(errors: Any) -> list[dict[str, Any]]:
    """Validation errors without their inputs and contexts (they may not be JSON)."""
    return [
        {"loc": [str(part) for part in e.get("loc", ())], "msg": str(e.get("msg", ""))}
        for e in errors
    ]


def install_error_handlers(app: FastAPI) -> None:
    """Answer every error of ``app`` with a typed JSON body."""

    async def ours(request: Request, exc: Exception) -> JSONResponse:
        headers = {"WWW-Authenticate": "Bearer"} if isinstance(exc, NotAuthenticatedError) else None
        verdict = (
            getattr(exc, "verdict", None) if isinstance(exc, ApprovalNotPendingError) else None
        )
        return error_response(
            status_of(exc),
            type(exc).__name__,
            str(exc),
            headers=headers,
            verdict=verdict if verdict in ("approved", "denied", "replied") else None,
        )

    async def invalid(request: Request, exc: Exception) -> JSONResponse:
        errors = exc.errors() if isinstance(exc, RequestValidationError) else []
        return error_response(
            422, "ValidationError", "the request does not validate", details=_json_safe(errors)
        )

    async def http(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        type_ = _HTTP_TYPES.get(exc.status_code, "HTTPError")
        return error_response(exc.status_code, type_, str(exc.detail), headers=exc.headers)

    async def unexpected(request: Request, exc: Exception) -> JSONResponse:
        return error_response(500, "InternalServerError", "internal error")

    app.add_exception_handler(NbdurableError, ours)
    app.add_exception_handler(RequestValidationError, invalid)
    app.add_exception_handler(StarletteHTTPException, http)
    app.add_exception_handler(Exception, unexpected)


ERROR_RESPONSES = error_responses(
    {
        401: "Missing or wrong bearer token",
        408: "Request body not received within body_timeout (the connection is closed)",
        413: "Request body over max_body_bytes, or a prompt over max_payload_bytes",
        422: "The request does not validate",
    }
)
"""Error answers every API route may give (documented in the OpenAPI schema)."""
