"""Finding the app a command names, and building its Runner and session service."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from relaykit.agent import Agent
from relaykit.errors import ConfigurationError, SessionStoreError
from relaykit.models.registry import PROVIDERS
from relaykit.runner import Runner
from relaykit.sessions.base import SessionService

__all__ = [
    "DEFAULT_ATTRIBUTE",
    "DEFAULT_USER",
    "CliError",
    "LoadedApp",
    "build_runner",
    "check_model_spec",
    "default_database",
    "load_app",
    "open_sessions",
]

#: The attribute an app exposes when ``APP`` names no other.
DEFAULT_ATTRIBUTE = "root_agent"
#: The user the commands act for unless ``--user`` names another.
DEFAULT_USER = "dev"
#: Exit code of a command used wrongly (a missing app, a bad option value).
USAGE = 2
#: Exit code of a failure while the command ran (a database that cannot be opened).
RUNTIME = 1


class CliError(Exception):
    """A failure the CLI reports as one line (no traceback) and exit code ``code``.

    >>> CliError("no such file", 2).code
    2
    """

    def __init__(self, message: str, code: int = RUNTIME) -> None:
        super().__init__(message)
        #: The process exit code: 2 for a usage error, 1 for a runtime failure.
        self.code = code


@dataclass(slots=True)
class LoadedApp:
    """An app module and what the CLI takes from it."""

    #: The imported module (or package).
    module: ModuleType
    #: The agent at ``module:attribute``.
    agent: Agent
    #: The module's ``make_runner(*, session_service, model=None)``, when it has one and the
    #: default attribute was asked for (an explicit ``:attribute`` picks that agent instead).
    make_runner: Callable[..., Any] | None
    #: The folder the app lives in (a package's own folder); the default database is there.
    folder: Path
    #: The app's name in the session store: the module's ``APP_NAME``, else its last name part.
    app_name: str


def _split(spec: str) -> tuple[str, str | None]:
    """``APP`` as (path or module, attribute or None); a Windows drive letter is no attribute."""
    head, sep, tail = spec.rpartition(":")
    if not sep or not tail or "/" in tail or "\\" in tail or not head or len(head) == 1:
        return spec, None
    return head, tail


def _looks_like_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target or Path(target).exists()


def _import_path(path: Path) -> ModuleType:
    """Import a ``.py`` file or a package folder, by its dotted name when it sits in packages
    (so its relative and absolute imports work), else by its file name."""
    path = path.resolve()
    if path.is_dir():
        if not (path / "__init__.py").is_file():
            raise CliError(f"{path} is a folder but not a Python package (no __init__.py)", 2)
        parts = [path.name]
        root = path.parent
    else:
        parts = [path.stem] if path.name != "__init__.py" else []
        root = path.parent
    while (root / "__init__.py").is_file() and root.parent != root:
        parts.insert(0, root.name)
        root = root.parent
    if not parts or not all(part.isidentifier() for part in parts):
        raise CliError(f"cannot import {path}: its name is not a valid Python module name", 2)
    name = ".".join(parts)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        expected = path / "__init__.py" if path.is_dir() else path
        if where is not None and Path(where).resolve() == expected:
            return loaded
        if where is not None:  # another module of that name: load this file under its own
            return _import_file(expected, f"relaykit_app_{abs(hash(str(expected)))}")
    return _import(name, str(path))


def _import_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import {path}", 2)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CliError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def _import(name: str, shown: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise CliError(f"no module named {name!r} (from {shown})", 2) from exc
        raise CliError(f"importing {shown} failed: {exc}") from exc
    except Exception as exc:
        raise CliError(f"importing {shown} failed: {type(exc).__name__}: {exc}") from exc


def load_app(spec: str) -> LoadedApp:
    """Import the app ``APP`` names: ``path.py``, ``package/``, ``module``, each optionally
    followed by ``:attribute`` (default ``root_agent``).

    >>> load_app("no/such/app.py")
    Traceback (most recent call last):
    ...
    relaykit.cli._loading.CliError: no app file no/such/app.py
    """
    target, attribute = _split(spec)
    if _looks_like_path(target):
        path = Path(target)
        if not path.exists():
            raise CliError(f"no app file {target}", 2)
        module = _import_path(path)
    else:
        if not all(part.isidentifier() for part in target.split(".")):
            raise CliError(f"{target!r} is neither an existing file nor a module name", 2)
        if "" not in sys.path and str(Path.cwd()) not in sys.path:
            sys.path.insert(0, str(Path.cwd()))
        module = _import(target, target)
    name = attribute or DEFAULT_ATTRIBUTE
    value: Any = module
    for part in name.split("."):
        if not hasattr(value, part):
            shown = getattr(module, "__file__", None) or module.__name__
            hint = "" if attribute else " (define it, or name another agent with APP:attribute)"
            raise CliError(f"app {shown} has no {name!r}{hint}", 2)
        value = getattr(value, part)
    if not isinstance(value, Agent) and callable(value) and not isinstance(value, type):
        try:
            value = value()  # a factory: build_desk, say
        except Exception as exc:
            raise CliError(
                f"calling {name}() of {module.__name__} failed: {type(exc).__name__}: {exc}"
            ) from exc
    if not isinstance(value, Agent):
        raise CliError(
            f"{name!r} of {module.__name__} is a {type(value).__name__}, not an agent", 2
        )
    make_runner = (
        None if attribute not in (None, DEFAULT_ATTRIBUTE) else module.__dict__.get("make_runner")
    )
    if make_runner is not None and not callable(make_runner):
        raise CliError(f"make_runner of {module.__name__} is not callable", 2)
    file = getattr(module, "__file__", None)
    folder = Path(file).resolve().parent if file else Path.cwd()
    app_name = module.__dict__.get("APP_NAME") or module.__name__.rpartition(".")[2]
    if not isinstance(app_name, str):
        raise CliError(f"APP_NAME of {module.__name__} must be a str", 2)
    return LoadedApp(module, value, make_runner, folder, app_name)


def check_model_spec(spec: str) -> None:
    """Raise a usage ``CliError`` unless ``spec`` looks like ``<provider>:<model>`` with a
    provider relaykit knows (the model itself is built by the app's ``make_runner``).

    >>> try:
    ...     check_model_spec("mistral:large")
    ... except CliError as exc:
    ...     print(exc.code, exc)  # doctest: +ELLIPSIS
    2 --model 'mistral:large': unknown provider 'mistral'; known providers: anthropic, ...
    """
    provider, sep, rest = spec.partition(":")
    known = ", ".join(sorted(PROVIDERS))
    if not sep or not provider.strip() or not rest.strip():
        raise CliError(
            f"--model {spec!r} should look like '<provider>:<model>', e.g. 'openai:gpt-4o-mini' "
            f"(known providers: {known})",
            2,
        )
    if provider.strip().lower() not in PROVIDERS:
        raise CliError(
            f"--model {spec!r}: unknown provider {provider.strip()!r}; known providers: {known}",
            2,
        )


def default_database(app: LoadedApp) -> str:
    """``sqlite+aiosqlite:///<app folder>/.relaykit/sessions.db``."""
    return f"sqlite+aiosqlite:///{app.folder / '.relaykit' / 'sessions.db'}"


async def open_sessions(app: LoadedApp, db: str | None) -> SessionService:
    """The app's session service, opened (tables created): ``CliError`` when it cannot be."""
    from relaykit.sessions.database import DatabaseSessionService

    url = db or default_database(app)
    if db is None:
        (app.folder / ".relaykit").mkdir(parents=True, exist_ok=True)
    try:
        service = DatabaseSessionService(url)
    except ConfigurationError as exc:
        raise CliError(f"--db: {exc}", 2) from exc
    try:
        await service.open()
    except (SessionStoreError, OSError) as exc:
        await service.aclose()
        raise CliError(f"cannot open the session database: {exc}") from exc
    return service


def build_runner(app: LoadedApp, service: SessionService, model: str | None) -> Runner:
    """The app's Runner: ``make_runner(session_service=..., model=...)`` when the app has one,
    else a streaming session-mode Runner of its agent."""
    if app.make_runner is None:
        if model is not None:
            raise CliError(
                f"--model needs the app to define make_runner(*, session_service, model=None); "
                f"{app.module.__name__} only has an agent, which keeps its own models",
                2,
            )
        try:
            return Runner(app.agent, app_name=app.app_name, session_service=service, streaming=True)
        except ConfigurationError as exc:
            raise CliError(f"cannot run {app.module.__name__}: {exc}") from exc
    if model is not None:
        check_model_spec(model)
    try:
        runner = app.make_runner(session_service=service, model=model)
    except ConfigurationError as exc:
        raise CliError(f"make_runner of {app.module.__name__} failed: {exc}") from exc
    except Exception as exc:
        raise CliError(
            f"make_runner of {app.module.__name__} failed: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(runner, Runner):
        raise CliError(
            f"make_runner of {app.module.__name__} returned a {type(runner).__name__}, "
            "not a relaykit Runner"
        )
    if runner.session_service is not service:
        raise CliError(
            f"make_runner of {app.module.__name__} returned a Runner that does not keep its "
            "sessions in the session_service it was given: pass it on, "
            "Runner(agent, session_service=session_service)"
        )
    return runner
