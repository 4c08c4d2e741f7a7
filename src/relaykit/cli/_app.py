"""The ``relaykit`` command: its subcommands and how failures become exit codes."""

from __future__ import annotations

import asyncio
import os
import shlex
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape

from relaykit.errors import RelayKitError
from relaykit.runner import Runner
from relaykit.sessions.base import Session, SessionService

from ._chat import Chat
from ._database import missing_database, open_sessions, shown_database
from ._errors import CliError
from ._loading import DEFAULT_USER, LoadedApp, build_runner, check_model, load_app
from ._views import agent_tree, session_table, show_session

__all__ = ["app"]

T = TypeVar("T")

app = typer.Typer(
    name="relaykit",
    help="Run, inspect and serve relaykit apps: a module or package exposing root_agent.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
sessions_app = typer.Typer(
    help="The stored sessions of an app: list, show, delete.", no_args_is_help=True
)
app.add_typer(sessions_app, name="sessions")

APP_HELP = (
    "The app: a file (app.py, or app without .py), a package folder or a module name, "
    "optionally followed by :attribute (default root_agent)."
)
AppArg = Annotated[str, typer.Argument(help=APP_HELP, metavar="APP", show_default=False)]
UserOpt = Annotated[str, typer.Option("--user", help="The user whose sessions these are.")]
DbOpt = Annotated[
    str | None,
    typer.Option(
        "--db",
        help="The session database: a SQLite file (sessions.db) or a URL "
        "(sqlite+aiosqlite:///file.db, postgresql+asyncpg://user@host/db); default: "
        ".relaykit/sessions.db in the app's folder.",
        show_default=False,
    ),
]
ModelOpt = Annotated[
    str | None,
    typer.Option(
        "--model",
        help="The model, as provider:model (openai:gpt-4o-mini, anthropic:..., gemini:..., "
        "openai-compatible:model@url), passed to the app's make_runner.",
        show_default=False,
    ),
]
HostOpt = Annotated[str, typer.Option("--host", help="The address to listen on.")]
PortOpt = Annotated[
    int, typer.Option("--port", min=0, max=65535, help="The port to listen on (0-65535).")
]


def _fail(message: str, code: int) -> typer.Exit:
    Console(stderr=True, highlight=False).print(
        f"[bold red]relaykit: error:[/] {escape(message)}", soft_wrap=True
    )
    return typer.Exit(code)


def _run(work: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run ``work`` on a fresh event loop; a ``CliError`` (or an unexpected relaykit error)
    becomes a one-line message and its exit code."""
    try:
        return asyncio.run(work())
    except CliError as exc:
        raise _fail(str(exc), exc.code) from None
    except RelayKitError as exc:
        raise _fail(f"{type(exc).__name__}: {exc}", 1) from None
    # Ctrl-C outside a chat, a second Ctrl-C while a chat's turn stops, or Ctrl-C where the
    # chat cannot take it (the first one stops the turn; at a prompt, it ends the chat).
    except KeyboardInterrupt:
        Console(stderr=True, highlight=False).print("\nrelaykit: interrupted")
        raise typer.Exit(130) from None


def _load(spec: str) -> LoadedApp:
    try:
        return load_app(spec)
    except CliError as exc:
        raise _fail(str(exc), exc.code) from None


async def _with_runner(
    loaded: LoadedApp,
    db: str | None,
    model: str | None,
    use: Callable[[Runner, SessionService], Awaitable[None]],
) -> None:
    """Open the sessions, build the Runner, ``use`` them, and close both."""
    check_model(loaded, model)  # a bad --model is refused before the database opens
    service = await open_sessions(loaded, db)
    try:
        runner = build_runner(loaded, service, model)
        try:
            await use(runner, service)
        finally:
            await runner.aclose()
    finally:
        aclose: Any = getattr(service, "aclose", None)
        if aclose is not None:
            await aclose()


@app.command()
def run(
    app_spec: AppArg,
    session: Annotated[
        str | None,
        typer.Option(
            "--session",
            help="Continue this stored session (default: a new one).",
            show_default=False,
        ),
    ] = None,
    user: UserOpt = DEFAULT_USER,
    model: ModelOpt = None,
    db: DbOpt = None,
) -> None:
    """Chat with an app in the terminal.

    Each event is shown as it comes: who speaks, transfers, tool calls and results, a reply's
    tokens as they stream, a spinner while a model or a tool works. A pause (an approval, a
    long-running tool) asks for its answer, which resumes the run. Ctrl-C stops a running
    turn: it pauses, and Enter continues it (a new message abandons it); a second Ctrl-C
    while it stops ends the chat. Type exit (or Ctrl-D) to leave; the session stays stored,
    with a pause still waiting, for --session ID. Lines are read from stdin when it is not a
    terminal.
    """
    loaded = _load(app_spec)
    console = Console(highlight=False)
    again = ["relaykit", "run", app_spec]
    if db is not None:
        again += ["--db", shown_database(db)]
    if user != DEFAULT_USER:
        again += ["--user", user]

    async def chat(runner: Runner, service: SessionService) -> None:
        talk = Chat(runner, service, console, user, shlex.join(again))
        await talk.loop(await talk.start(session))

    _run(lambda: _with_runner(loaded, db, model, chat))


@app.command()
def tree(app_spec: AppArg) -> None:
    """Draw the app's agent tree.

    Each agent's name, kind and description, its tools (an agent tool's agent below it) and
    its sub-agents.
    """
    loaded = _load(app_spec)
    Console(highlight=False).print(agent_tree(loaded.agent))


async def _app_name(loaded: LoadedApp, service: SessionService) -> str:
    """The app name sessions are stored under (a make_runner's Runner may choose its own)."""
    if loaded.make_runner is None:
        return loaded.app_name
    runner = build_runner(loaded, service, None)
    await runner.aclose()
    return runner.app_name


def _no_database(loaded: LoadedApp, db: str | None, session_id: str, user: str) -> None:
    """Refuse to show or delete a session when the session database does not exist."""
    missing = missing_database(loaded, db)
    if missing is not None:
        raise _fail(
            f"no session {session_id!r} of user {user!r} in app {loaded.app_name!r}: "
            f"no session database at {missing}",
            1,
        )


async def _with_sessions(
    loaded: LoadedApp, db: str | None, use: Callable[[SessionService, str], Awaitable[None]]
) -> None:
    service = await open_sessions(loaded, db)
    try:
        await use(service, await _app_name(loaded, service))
    finally:
        aclose: Any = getattr(service, "aclose", None)
        if aclose is not None:
            await aclose()


@sessions_app.command("list")
def sessions_list(app_spec: AppArg, user: UserOpt = DEFAULT_USER, db: DbOpt = None) -> None:
    """List the user's sessions: id, last update, number of events."""
    loaded = _load(app_spec)
    console = Console(highlight=False)
    missing = missing_database(loaded, db)
    if missing is not None:
        console.print(
            f"no sessions of user {escape(user)} in app {escape(loaded.app_name)} "
            f"(no session database at {escape(str(missing))})",
            soft_wrap=True,
        )
        return

    async def show(service: SessionService, app_name: str) -> None:
        table, count = await session_table(service, app_name, user)
        if count == 0:
            console.print(f"no sessions of user {escape(user)} in app {escape(app_name)}")
        else:
            console.print(table)

    _run(lambda: _with_sessions(loaded, db, show))


SessionArg = Annotated[str, typer.Argument(help="The session id.", show_default=False)]


async def _stored_session(
    service: SessionService, app_name: str, user: str, session_id: str
) -> Session:
    """The stored session, or the CLI's error naming what was looked for."""
    found = await service.get_session(app_name, user, session_id)
    if found is None:
        raise CliError(f"no session {session_id!r} of user {user!r} in app {app_name!r}")
    return found


@sessions_app.command("show")
def sessions_show(
    app_spec: AppArg, session_id: SessionArg, user: UserOpt = DEFAULT_USER, db: DbOpt = None
) -> None:
    """Show one session: its events (author, text, tool calls and results) and its state."""
    loaded = _load(app_spec)
    console = Console(highlight=False)
    _no_database(loaded, db, session_id, user)

    async def show(service: SessionService, app_name: str) -> None:
        found = await _stored_session(service, app_name, user, session_id)
        paused = await service.get_checkpoint(app_name, user, session_id) is not None
        show_session(console, found, paused)

    _run(lambda: _with_sessions(loaded, db, show))


@sessions_app.command("delete")
def sessions_delete(
    app_spec: AppArg, session_id: SessionArg, user: UserOpt = DEFAULT_USER, db: DbOpt = None
) -> None:
    """Delete one session, its events, state and pause."""
    loaded = _load(app_spec)
    console = Console(highlight=False)
    _no_database(loaded, db, session_id, user)

    async def delete(service: SessionService, app_name: str) -> None:
        await _stored_session(service, app_name, user, session_id)
        await service.delete_session(app_name, user, session_id)
        console.print(f"deleted session {escape(session_id)}")

    _run(lambda: _with_sessions(loaded, db, delete))


def _serve(
    app_spec: str, host: str, port: int, db: str | None, model: str | None, *, ui: bool
) -> None:
    loaded = _load(app_spec)
    try:
        from relaykit.server import create_app
        from relaykit.server._app import SHUTDOWN_GRACE
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        if missing == "relaykit.server":
            raise _fail("relaykit.server is not available in this installation", 1) from None
        raise _fail(f"the server cannot start: {exc} (pip install 'relaykit[server]')", 1) from None
    try:
        import uvicorn
    except ImportError:
        raise _fail("uvicorn is not installed (pip install 'relaykit[server]')", 1) from None

    async def serve(runner: Runner, service: SessionService) -> None:
        config = uvicorn.Config(
            create_app(runner, ui=ui),
            host=host,
            port=port,
            # On Ctrl-C uvicorn first waits for open connections, an event stream included,
            # without a bound unless told; then the app gives running turns their own grace.
            timeout_graceful_shutdown=int(SHUTDOWN_GRACE),
        )
        listener = _listen(host, port)  # a port in use is our one-line error, not uvicorn's
        try:
            where = f"[{host}]" if ":" in host else host
            url = f"http://{where}:{listener.getsockname()[1]}"  # the real port, also for 0
            shown = f"relaykit web UI: {url}/ui/" if ui else f"relaykit API: {url}/ ({url}/docs)"
            Console(highlight=False).print(shown)
            await uvicorn.Server(config).serve(sockets=[listener])
        finally:
            listener.close()

    _run(lambda: _with_runner(loaded, db, model, serve))


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port`` for the server; a CliError when it cannot be
    (the port is in use, the host does not resolve or is not this machine's)."""
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        # A name with both (localhost) is served on IPv4, where http://127.0.0.1 finds it.
        found.sort(key=lambda info: info[0] != socket.AF_INET)
        family, kind, _, _, address = found[0]
        listener = socket.socket(family, kind)
    except OSError as exc:
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    try:
        if os.name == "posix":  # as asyncio does: a restart need not wait for TIME_WAIT
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(address)
        listener.listen(2048)
    except OSError as exc:
        listener.close()
        raise CliError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    return listener


@app.command()
def web(
    app_spec: AppArg,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    db: DbOpt = None,
    model: ModelOpt = None,
) -> None:
    """Serve the app's HTTP API and its web dev UI at /ui/ (relaykit.server, uvicorn)."""
    _serve(app_spec, host, port, db, model, ui=True)


@app.command()
def api(
    app_spec: AppArg,
    host: HostOpt = "127.0.0.1",
    port: PortOpt = 8000,
    db: DbOpt = None,
    model: ModelOpt = None,
) -> None:
    """Serve the app's HTTP API (relaykit.server, uvicorn)."""
    _serve(app_spec, host, port, db, model, ui=False)
