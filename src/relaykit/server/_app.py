"""``create_app``: the FastAPI application serving a session-mode Runner (docs/http-server.md)."""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import math
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse

from relaykit.cancel import CancelMode, CancelOutcome, RunHandle
from relaykit.errors import (
    ConfigurationError,
    SerializationError,
    SessionStoreError,
)
from relaykit.runner import Runner
from relaykit.server._errors import ERRORS, ApiError, from_exception, install_handlers, refused
from relaykit.server._models import (
    AgentOut,
    CancelIn,
    CancelOut,
    CreateSessionIn,
    EventOut,
    HealthOut,
    ResumeIn,
    SessionDetailOut,
    SessionOut,
    TurnIn,
    TurnResultOut,
    agent_tree,
)
from relaykit.server._openapi import TURN_RESPONSES, openapi_document
from relaykit.server._turns import KEEPALIVE_SECONDS, Head, Heads, Turn
from relaykit.sessions.base import (
    APP_PREFIX,
    Session,
    SessionService,
    validate_session_name,
    validate_state_key,
)

__all__ = ["DEV_USER", "ApiError", "create_app"]

logger = logging.getLogger("relaykit.server")

#: The user of every request when the server has no API keys (single-user dev mode).
DEV_USER = "dev"
#: The default of ``create_app(shutdown_grace=...)``: seconds running turns get at shutdown.
SHUTDOWN_GRACE = 30.0
#: How long cancelled turns get to close (release their session, store their error).
_CANCEL_GRACE = 10.0


async def _caller(request: Request) -> str:
    """The user a request is from: its API key's (401 without a known one), else ``dev``."""
    keys: dict[str, str] | None = request.app.state.api_keys
    if keys is None:
        return DEV_USER
    scheme, _, key = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not key.strip():
        raise ApiError(401, "unauthorized", "send Authorization: Bearer <api key>")
    given = key.strip().encode()
    found = None
    for known, user in keys.items():  # every key compared: the time says nothing of which
        if hmac.compare_digest(given, known.encode()):
            found = user
    if found is None:
        raise ApiError(401, "unauthorized", "unknown API key")
    return found


#: The caller's user id, as a route parameter.
User = Annotated[str, Depends(_caller)]


def _query(*known: str) -> Any:
    """A route dependency refusing query parameters other than ``known`` (422), as the bodies
    refuse unknown fields: a typo (``?afer=``) is an error, not an ignored option."""

    async def check(request: Request) -> None:
        unknown = sorted(set(request.query_params) - set(known))
        if unknown:
            names = ", ".join(repr(name[:50]) for name in unknown[:5])
            raise ApiError(422, "validation_error", f"unknown query parameter(s): {names}")

    return Depends(check)


_NO_QUERY = _query()


def create_app(
    runner: Runner,
    *,
    api_keys: Mapping[str, str] | None = None,
    ui: bool = False,
    shutdown_grace: float = SHUTDOWN_GRACE,
    delete_timeout: float = 0.0,
) -> FastAPI:
    """The HTTP API of ``runner``, a FastAPI (ASGI) application.

    Serve it with any ASGI server (``uvicorn module:app``). Running turns are kept in
    ``app.state.turns`` (a set of tasks); when the app shuts down they get ``shutdown_grace``
    seconds to end, then they are cancelled (docs/http-server.md#shutdown).

    Args:
        runner: a session-mode Runner (``Runner(..., session_service=...)``), else
            ``ConfigurationError``.
        api_keys: API key to user id; a request sends ``Authorization: Bearer <key>``. None:
            single-user dev mode, every request is user ``dev``.
        shutdown_grace: seconds the running turns get to end when the app shuts down.
        delete_timeout: seconds ``DELETE /sessions/{id}`` waits for a running turn of the
            session to end (0: it answers 409 at once).
        ui: also serve the web dev UI at ``/ui/`` (``/`` redirects there): docs/web-ui.md.

    >>> import relaykit as rk
    >>> agent = rk.ChatModelAgent("helper", model=rk.ScriptedModel([]))
    >>> app = create_app(rk.Runner(agent, session_service=rk.InMemorySessionService()))
    >>> sorted(r.path for r in app.routes if r.path.startswith("/sessions"))[:2]
    ['/sessions', '/sessions']
    """
    if not isinstance(runner, Runner):
        raise ConfigurationError(f"create_app takes a Runner, not {type(runner).__name__}")
    if runner.session_service is None:
        raise ConfigurationError(
            "the HTTP API serves sessions: create_app(Runner(agent, session_service=...))"
        )
    for name, seconds in (("shutdown_grace", shutdown_grace), ("delete_timeout", delete_timeout)):
        if (
            not isinstance(seconds, int | float)
            or isinstance(seconds, bool)
            or not math.isfinite(seconds)
            or seconds < 0
        ):
            raise ConfigurationError(f"{name} must be a number of seconds >= 0, not {seconds!r}")
    keys = dict(api_keys) if api_keys is not None else None
    if keys is not None:
        if not keys:
            raise ConfigurationError("api_keys is empty: give at least one key, or None")
        for key, user in keys.items():
            if not isinstance(key, str) or not key:
                raise ConfigurationError("every API key must be a non-empty str")
            try:
                validate_session_name(user, "the user id of an API key")
            except SessionStoreError as exc:
                raise ConfigurationError(str(exc)) from None
    service: SessionService = runner.session_service
    app_name = runner.app_name
    tasks: set[asyncio.Task[None]] = set()
    # The turns of this process, by (user, session), oldest first, for POST .../cancel: from
    # the moment they are started (one may wait for the session's lock behind another).
    running: dict[tuple[str, str], list[RunHandle]] = {}
    # The cancels in progress (each drives its turn to the safe point): stopped at shutdown
    # with the turns, which would otherwise wait for them.
    cancels: set[asyncio.Task[CancelOutcome]] = set()

    @contextlib.asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        yield
        await _drain(tasks, shutdown_grace, cancels)

    app = FastAPI(
        title=f"relaykit: {app_name}",
        description="Sessions and turns of a relaykit agent tree.",
        lifespan=lifespan,
    )
    app.state.turns = tasks
    app.state.api_keys = keys
    if ui:
        from relaykit.server._ui import add_ui

        add_ui(app)

    heads = Heads(service, app_name)

    def not_found(session_id: str) -> ApiError:
        return ApiError(404, "SessionNotFoundError", f"no session {session_id!r}")

    async def owned(user: str, session_id: str) -> Session:
        """The caller's session with its events, else 404 (another user's is not found
        either)."""
        try:
            validate_session_name(session_id, "session_id")
        except SessionStoreError:
            session = None
        else:
            session = await service.get_session(app_name, user, session_id)
        if session is None:
            raise not_found(session_id)
        return session

    async def head(user: str, session_id: str) -> Head:
        """Where the caller's session ends (a read of what was stored since the last look),
        else 404."""
        found = await heads.read(user, session_id)
        if found is None:
            raise not_found(session_id)
        return found

    install_handlers(app)

    @app.get(
        "/health", response_model=HealthOut, responses={422: ERRORS[422]}, dependencies=[_NO_QUERY]
    )
    async def health() -> HealthOut:
        """Whether the server is up."""
        return HealthOut()

    @app.get("/agent", response_model=AgentOut, responses=ERRORS, dependencies=[_NO_QUERY])
    async def agent(_: User) -> AgentOut:
        """The agent tree the sessions run."""
        return agent_tree(runner.agent)

    @app.post(
        "/sessions",
        status_code=201,
        response_model=SessionOut,
        responses=ERRORS,
        dependencies=[_NO_QUERY],
    )
    async def create_session(body: CreateSessionIn, user: User) -> SessionOut:
        """Create a session (its id generated when not given)."""
        try:
            if body.session_id is not None:
                validate_session_name(body.session_id, "session_id")
            for key in body.state or {}:
                validate_state_key(key)
        except SessionStoreError as exc:
            raise ApiError(422, "validation_error", str(exc)) from None
        _refuse_app_keys(body.state)
        session = await service.create_session(app_name, user, body.session_id, body.state)
        return SessionOut.of(session)

    @app.get(
        "/sessions", response_model=list[SessionOut], responses=ERRORS, dependencies=[_NO_QUERY]
    )
    async def list_sessions(user: User) -> list[SessionOut]:
        """The caller's sessions, oldest first (without events)."""
        return [SessionOut.of(s) for s in await service.list_sessions(app_name, user)]

    @app.get(
        "/sessions/{session_id}",
        response_model=SessionDetailOut,
        responses=ERRORS,
        dependencies=[_NO_QUERY],
    )
    async def get_session(session_id: str, user: User) -> SessionDetailOut:
        """The session with its state, every stored event, and what its pause waits for."""
        session = await owned(user, session_id)
        pause = await runner.pending_interrupt(user_id=user, session_id=session_id)
        return SessionDetailOut.of_full(session, pause)

    @app.delete(
        "/sessions/{session_id}", status_code=204, responses=ERRORS, dependencies=[_NO_QUERY]
    )
    async def delete_session(session_id: str, user: User) -> Response:
        """Delete the session, its events and its pause; 409 while a turn of it runs."""
        await head(user, session_id)
        # The turn lock: a running turn (in any process) keeps its session, and SessionBusyError
        # (409) says so once ``delete_timeout`` has passed.
        async with service.lock(app_name, user, session_id, timeout=delete_timeout):
            await service.delete_session(app_name, user, session_id)
        return Response(status_code=204)

    @app.get(
        "/sessions/{session_id}/events",
        response_model=list[EventOut],
        responses=ERRORS,
        dependencies=[_query("after")],
    )
    async def list_events(
        session_id: str,
        user: User,
        after: Annotated[str | None, Query(description="An event id: the events after it.")] = None,
    ) -> list[EventOut]:
        """The session's stored events, all or those after ``after``."""
        events = (await owned(user, session_id)).events
        if after is not None:
            index = next((i for i, e in enumerate(events) if e.id == after), None)
            if index is None:
                raise ApiError(404, "not_found", "no such event in this session (after)")
            events = events[index + 1 :]
        return [EventOut.of_stored(e) for e in events]

    async def respond(
        session_id: str, user: User, start: Callable[[], Any], stream: bool
    ) -> Response:
        before = await head(user, session_id)
        try:
            events = start()  # a bad call raises here, before anything is stored
        except (ConfigurationError, SessionStoreError, SerializationError, TypeError) as exc:
            raise refused(exc) from None
        turn = Turn(
            events,
            service=service,
            app_name=app_name,
            user_id=user,
            session_id=session_id,
            head=before,
            heads=heads,
            root_name=runner.agent.name,
            tasks=tasks,
        )
        if isinstance(events, RunHandle):
            # Cancellable from now on: also while the turn waits for the session's lock or for
            # its first event (a model call in progress).
            key = (user, session_id)
            handle = events
            running.setdefault(key, []).append(handle)

            def forget(_: asyncio.Task[None]) -> None:
                handles = running.get(key)
                if handles is not None and handle in handles:
                    handles.remove(handle)
                    if not handles:
                        del running[key]

            turn.task.add_done_callback(forget)
        first = await turn.first()
        if first.kind == "failed":
            assert first.error is not None
            raise from_exception(first.error)
        if not stream:
            collected = [first]
            async for batch in turn.batches():
                collected += batch
            last = collected[-1]
            if last.kind == "failed" or last.result is None:
                raise from_exception(last.error or asyncio.CancelledError())
            out = TurnResultOut(
                **last.result.model_dump(),
                events=[i.event for i in collected if i.event is not None],
            )
            return JSONResponse(out.model_dump(mode="json"))

        async def body() -> AsyncIterator[str]:
            yield first.sse()
            async for batch in turn.batches(keepalive=KEEPALIVE_SECONDS):
                if not batch:
                    yield ": keepalive\n\n"
                elif text := "".join(item.sse() for item in batch if item.kind != "failed"):
                    yield text

        return StreamingResponse(
            body(),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.post(
        "/sessions/{session_id}/turns",
        response_model=None,
        responses=TURN_RESPONSES,
        dependencies=[_NO_QUERY],
    )
    async def run_turn(session_id: str, body: TurnIn, user: User) -> Response:
        """Run one turn: the user's text, or messages (tool responses answer a pause)."""
        _refuse_app_keys(body.state_delta)
        messages = body.to_messages()
        return await respond(
            session_id,
            user,
            # Never creates the session: checked above, it may be deleted while the turn
            # waits for its lock (then 404, not a new empty session).
            lambda: runner.run(
                messages,
                user_id=user,
                session_id=session_id,
                state_delta=body.state_delta,
                create_session=False,
            ),
            body.stream,
        )

    @app.post(
        "/sessions/{session_id}/resume",
        response_model=None,
        responses=TURN_RESPONSES,
        dependencies=[_NO_QUERY],
    )
    async def resume(session_id: str, body: ResumeIn, user: User) -> Response:
        """Continue the session's paused invocation (every point, or ``targets``)."""
        return await respond(
            session_id,
            user,
            lambda: runner.resume(user_id=user, session_id=session_id, targets=body.targets),
            body.stream,
        )

    @app.post(
        "/sessions/{session_id}/cancel",
        response_model=CancelOut,
        responses=ERRORS,
        dependencies=[_NO_QUERY],
    )
    async def cancel(session_id: str, body: CancelIn, user: User) -> CancelOut:
        """Stop the session's running turn at a safe point and keep it as the session's pause
        (``resume`` continues it, a new turn abandons it); 409 when no turn of the session
        runs in this server process."""
        await head(user, session_id)
        handles = running.get((user, session_id))
        if not handles:
            raise ApiError(
                409,
                "not_running",
                "no turn of this session is running in this server (it ended, or another "
                "server process runs it)",
            )
        # The oldest: the one holding the session's lock, or the next to take it.
        handle = handles[0]
        # In a task of its own, shielded: a client that goes away does not take the cancel's
        # timeout with it (the run would wait for its safe point with no escalation).
        task = asyncio.ensure_future(handle.cancel(CancelMode(body.mode), timeout=body.timeout))
        cancels.add(task)
        task.add_done_callback(cancels.discard)
        task.add_done_callback(_retrieve)
        try:
            outcome = await asyncio.shield(task)
        except asyncio.CancelledError:
            if not task.cancelled():
                raise  # this request was cancelled, not the cancel
            raise ApiError(
                503, "unavailable", "the server shut down before the turn stopped"
            ) from None
        return CancelOut.of(outcome)

    def openapi() -> dict[str, Any]:
        """FastAPI's document plus the event stream's models and the API key's scheme."""
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(app, bearer=keys is not None)
        return app.openapi_schema

    app.openapi = openapi  # type: ignore[method-assign]
    return app


def _retrieve(task: asyncio.Task[CancelOutcome]) -> None:
    """Retrieve a cancel's exception (its client may have gone): logged, never unretrieved."""
    if not task.cancelled() and (exc := task.exception()) is not None:
        logger.warning("a cancel request failed: %s", type(exc).__name__)


async def _drain(
    tasks: set[asyncio.Task[None]],
    grace: float,
    cancels: set[asyncio.Task[CancelOutcome]] | None = None,
) -> None:
    """Let the running turns end (and be stored) within ``grace`` seconds; cancel the rest
    (and the cancels in progress first: a turn being cancelled waits for its cancel).

    A cancelled turn's Runner releases its session lock and stores nothing more: the events
    stored so far stay, and the next turn of the session runs as usual.
    """
    if not tasks:
        return
    _, pending = await asyncio.wait(set(tasks), timeout=grace)
    if not pending:
        return
    logger.warning("shutdown: cancelling %d turn(s) still running after %gs", len(pending), grace)
    for cancel in list(cancels or ()):
        cancel.cancel()
    for task in pending:
        task.cancel()
    _, stuck = await asyncio.wait(pending, timeout=_CANCEL_GRACE)
    if stuck:
        logger.error("shutdown: %d turn(s) did not stop once cancelled", len(stuck))


def _refuse_app_keys(state: Mapping[str, Any] | None) -> None:
    """A client may not write ``app:`` keys: they are shared by every user of the app."""
    for key in state or {}:
        if isinstance(key, str) and key.startswith(APP_PREFIX):
            raise ApiError(
                422,
                "validation_error",
                f"state key {key!r}: app: keys are shared by every user of the app, and the "
                "HTTP API does not let a client set them (set them on the server)",
            )
