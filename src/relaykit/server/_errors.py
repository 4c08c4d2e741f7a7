"""The HTTP API's errors: one JSON shape, a closed set of types, the status of each.

Every error response is ``{"error": {"type", "message"}}`` (``ErrorOut``), whatever raised it:
a relaykit error, a request that does not match the schema, an unknown route, a bug. The types
are the ``ErrorType`` values (docs/http-server.md#errors); the OpenAPI document lists them.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, get_args

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from relaykit.errors import (
    CheckpointBusyError,
    CheckpointNotFoundError,
    ConfigurationError,
    RelayKitError,
    ResumeTargetError,
    SerializationError,
    SessionBusyError,
    SessionExistsError,
    SessionNotFoundError,
    SessionStoreError,
)
from relaykit.server._models import ErrorOut, ErrorType

__all__ = [
    "ERRORS",
    "ApiError",
    "error_response",
    "from_exception",
    "install_handlers",
    "refused",
]

logger = logging.getLogger("relaykit.server")

#: HTTP status of each relaykit error a request can cause (its class name is the type).
_STATUS: dict[type[RelayKitError], int] = {
    SessionNotFoundError: 404,
    SessionBusyError: 409,
    SessionExistsError: 409,
    CheckpointNotFoundError: 409,
    CheckpointBusyError: 409,
    ResumeTargetError: 409,
    ConfigurationError: 422,
    SerializationError: 422,
    SessionStoreError: 503,
}

#: The type of a Starlette HTTP error (an unknown route, a wrong method...) by status.
_HTTP_TYPES: dict[int, ErrorType] = {
    400: "bad_request",
    404: "not_found",
    405: "method_not_allowed",
    415: "unsupported_media_type",
}

_STATUS_TEXT = {
    400: "the request is malformed",
    401: "no API key, or an unknown one",
    404: "an unknown session (another user's too), or an unknown path",
    409: "the session is busy, exists already, its pause does not wait for that answer, or "
    "(a cancel) no turn of it runs in this server",
    415: "the body is not sent as JSON (Content-Type: application/json)",
    422: "the body or a parameter is invalid, or the Runner refused the call",
    500: "a bug in the server or the app (the message says no more: see the server log)",
    503: "the session store failed, or the server is shutting down",
}

#: OpenAPI ``responses`` for the error statuses every authenticated route may answer.
ERRORS: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorOut, "description": text} for status, text in _STATUS_TEXT.items()
}


class ApiError(Exception):
    """An error response: ``{"error": {"type", "message"}}`` with ``status``.

    >>> ApiError(404, "SessionNotFoundError", "no session 's1'").status
    404
    """

    def __init__(self, status: int, type_: ErrorType, message: str) -> None:
        super().__init__(message)
        if type_ not in get_args(ErrorType):
            raise ValueError(f"unknown error type {type_!r}")
        #: The HTTP status.
        self.status = status
        #: The error's type: a relaykit error class name, or the API's own kind.
        self.type: ErrorType = type_
        #: What went wrong.
        self.message = message


def error_response(status: int, type_: ErrorType, message: str, **headers: str) -> JSONResponse:
    """The JSON response of an error."""
    body = ErrorOut.model_validate({"error": {"type": type_, "message": message}})
    return JSONResponse(body.model_dump(), status_code=status, headers=headers or None)


def from_exception(exc: BaseException, *, log: bool = True) -> ApiError:
    """The response for an exception a request raised (or a turn, before any event); an
    unexpected one is logged (``log``) and its message kept out of the response."""
    if isinstance(exc, ApiError):
        return exc
    for kind, status in _STATUS.items():
        if isinstance(exc, kind):
            name: ErrorType = kind.__name__  # type: ignore[assignment]  # the _STATUS keys
            return ApiError(status, name, str(exc) or name)
    if isinstance(exc, asyncio.CancelledError):
        return ApiError(503, "unavailable", "the server is shutting down; retry the request")
    # A bug: its message may hold anything (stored content too), so it goes to the log only.
    if log:
        logger.error("request failed", exc_info=exc)
    what = type(exc).__name__ if isinstance(exc, RelayKitError) else "an unexpected error"
    return ApiError(500, "internal_error", f"the server failed ({what}); see the server log")


def refused(exc: Exception) -> ApiError:
    """The 422 of a call the Runner refused before it started (bad arguments)."""
    kinds: tuple[tuple[type[Exception], ErrorType], ...] = (
        (ConfigurationError, "ConfigurationError"),
        (SerializationError, "SerializationError"),
        (SessionStoreError, "SessionStoreError"),
    )
    kind: ErrorType = "validation_error"
    for cls, name in kinds:
        if isinstance(exc, cls):
            kind = name
            break
    return ApiError(422, kind, str(exc) or kind)


def _allowed_methods(request: Request) -> list[str]:
    """Every method some route of the request's path answers."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches({**request.scope, "method": "GET"})
        if match != Match.NONE:
            methods |= getattr(route, "methods", None) or set()
    return sorted(methods)


def install_handlers(app: FastAPI) -> None:
    """Make every error ``app`` answers an ``ErrorOut``."""

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        extra = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else {}
        return error_response(exc.status, exc.type, exc.message, **extra)

    @app.exception_handler(RelayKitError)
    async def _relaykit_error(_: Request, exc: RelayKitError) -> JSONResponse:
        err = from_exception(exc)
        return error_response(err.status, err.type, err.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = list(exc.errors())
        if any(p.get("type") == "json_invalid" for p in problems):
            return error_response(400, "validation_error", "the request body is not valid JSON")
        media_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        if await request.body() and not (
            media_type == "application/json" or media_type.endswith("+json")
        ):  # FastAPI reads a body as JSON only when it says it is
            return error_response(
                415,
                "unsupported_media_type",
                "send the body as JSON, with the header Content-Type: application/json",
            )
        text = "; ".join(
            f"{'.'.join(str(x) for x in p.get('loc', ()))}: {p.get('msg', '')}" for p in problems
        )
        return error_response(422, "validation_error", text or "invalid request")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        status = exc.status_code
        kind = _HTTP_TYPES.get(status, "bad_request" if status < 500 else "internal_error")
        headers = dict(exc.headers or {})
        if status == 405:  # Starlette names the methods of one route of the path, not all
            headers["Allow"] = ", ".join(_allowed_methods(request))
        return error_response(status, kind, str(exc.detail), **headers)

    @app.exception_handler(Exception)
    async def _bug(_: Request, exc: Exception) -> JSONResponse:
        # Starlette's outermost handler: the response is sent, then the exception re-raised
        # for the ASGI server to log.
        err = from_exception(exc, log=False)
        return error_response(err.status, err.type, err.message)
