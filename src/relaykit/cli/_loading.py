"""What the CLI takes from an app: its agent, ``runner_config`` or ``make_runner``; and the
Runner built from them."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from relaykit.agent import Agent
from relaykit.errors import ConfigurationError
from relaykit.models.registry import PROVIDERS
from relaykit.runner import Runner
from relaykit.sessions.base import SessionService

from ._errors import USAGE, CliError
from ._importing import import_app_module

__all__ = [
    "DEFAULT_ATTRIBUTE",
    "DEFAULT_USER",
    "LoadedApp",
    "build_runner",
    "check_model",
    "check_model_spec",
    "load_app",
]

#: The attribute an app exposes when ``APP`` names no other.
DEFAULT_ATTRIBUTE = "root_agent"
#: The user the commands act for unless ``--user`` names another.
DEFAULT_USER = "dev"
#: What the CLI passes to every Runner itself: an app's ``runner_config`` cannot set them.
_CLI_OWNED = frozenset({"agent", "session_service"})


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
    #: The app's name in the session store: ``runner_config["app_name"]``, else the module's
    #: ``APP_NAME``, else the module's (or its folder's) name.
    app_name: str
    #: The module's ``runner_config``: keyword arguments of the ``Runner`` the CLI builds when
    #: the app has no ``make_runner`` (plugins, compaction, streaming...).
    runner_config: Mapping[str, Any] = field(default_factory=dict)


def _split(spec: str) -> tuple[str, str | None]:
    """``APP`` as (path or module, attribute or None); a Windows drive letter is no attribute."""
    head, sep, tail = spec.rpartition(":")
    if not sep or not tail or "/" in tail or "\\" in tail or not head or len(head) == 1:
        return spec, None
    return head, tail


def load_app(spec: str) -> LoadedApp:
    """Import the app ``APP`` names: ``path.py``, ``path`` (without ``.py``), ``package/``,
    ``module``, each optionally followed by ``:attribute`` (default ``root_agent``).

    >>> load_app("no/such/app.py")
    Traceback (most recent call last):
    ...
    relaykit.cli._errors.CliError: no app file or folder no/such/app.py
    """
    target, attribute = _split(spec)
    found = import_app_module(target)
    module = found.module
    name = attribute or DEFAULT_ATTRIBUTE
    value: Any = module
    for part in name.split("."):
        if not hasattr(value, part):
            shown = getattr(module, "__file__", None) or module.__name__
            hint = "" if attribute else " (define it, or name another agent with APP:attribute)"
            raise CliError(f"app {shown} has no {name!r}{hint}", USAGE)
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
            f"{name!r} of {module.__name__} is of type {type(value).__name__}, not an agent", USAGE
        )
    make_runner = (
        None if attribute not in (None, DEFAULT_ATTRIBUTE) else module.__dict__.get("make_runner")
    )
    if make_runner is not None and not callable(make_runner):
        raise CliError(f"make_runner of {module.__name__} is not callable", USAGE)
    config = _runner_config(module)
    app_name = config.get("app_name") or module.__dict__.get("APP_NAME") or found.default_name
    if not isinstance(app_name, str):
        raise CliError(f"the app name of {module.__name__} must be a str", USAGE)
    return LoadedApp(module, value, make_runner, found.folder, app_name, config)


def _runner_config(module: ModuleType) -> Mapping[str, Any]:
    """The module's ``runner_config``, checked against the Runner's keyword arguments."""
    config = module.__dict__.get("runner_config")
    if config is None:
        return {}
    if not isinstance(config, Mapping):
        raise CliError(
            f"runner_config of {module.__name__} must be a dict of Runner keyword arguments, "
            f"not a {type(config).__name__}",
            USAGE,
        )
    accepted = [
        p.name
        for p in inspect.signature(Runner).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in _CLI_OWNED
    ]
    for key in config:
        if key in _CLI_OWNED:
            raise CliError(
                f"runner_config of {module.__name__} sets {key!r}, which the CLI passes itself "
                "(the sessions live in the --db database)",
                USAGE,
            )
        if key not in accepted:
            raise CliError(
                f"runner_config of {module.__name__} has {key!r}, which is no Runner "
                f"argument; it takes {', '.join(accepted)}",
                USAGE,
            )
    return config


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
            USAGE,
        )
    if provider.strip().lower() not in PROVIDERS:
        raise CliError(
            f"--model {spec!r}: unknown provider {provider.strip()!r}; known providers: {known}",
            USAGE,
        )


def check_model(app: LoadedApp, model: str | None) -> None:
    """Refuse a ``--model`` that cannot be used, before anything opens: a bad spec, or an app
    whose ``make_runner`` cannot take it (or that has none)."""
    if model is None:
        return
    check_model_spec(model)
    if app.make_runner is None:
        raise CliError(
            f"--model needs the app to define make_runner(*, session_service, model=None); "
            f"{app.module.__name__} only has an agent, which keeps its own models",
            USAGE,
        )
    if not _accepts(app.make_runner, "model"):
        raise CliError(
            f"--model: make_runner of {app.module.__name__} takes no model argument "
            "(define it as make_runner(*, session_service, model=None))",
            USAGE,
        )


def _accepts(function: Callable[..., Any], name: str) -> bool:
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin or C callable: assume it does
        return True
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return True
    found = parameters.get(name)
    return found is not None and found.kind is not inspect.Parameter.POSITIONAL_ONLY


def build_runner(app: LoadedApp, service: SessionService, model: str | None) -> Runner:
    """The app's Runner: ``make_runner(session_service=..., model=...)`` when the app has one,
    else a streaming session-mode Runner of its agent with the app's ``runner_config``."""
    check_model(app, model)
    where = app.module.__name__
    if app.make_runner is None:
        options: dict[str, Any] = {"app_name": app.app_name, "streaming": True}
        options.update(app.runner_config)
        try:
            return Runner(app.agent, session_service=service, **options)
        except ConfigurationError as exc:
            raise CliError(f"cannot run {where}: {exc}") from exc
        except (TypeError, ValueError) as exc:  # a runner_config value of the wrong kind
            raise CliError(f"cannot run {where}: runner_config: {exc}") from exc
    if not _accepts(app.make_runner, "session_service"):
        raise CliError(
            f"make_runner of {where} must take session_service (the CLI's session store): "
            "make_runner(*, session_service, model=None)",
            USAGE,
        )
    arguments: dict[str, Any] = {"session_service": service}
    if _accepts(app.make_runner, "model"):
        arguments["model"] = model
    try:
        runner = app.make_runner(**arguments)
    except ConfigurationError as exc:
        raise CliError(f"make_runner of {where} failed: {exc}") from exc
    except Exception as exc:
        raise CliError(f"make_runner of {where} failed: {type(exc).__name__}: {exc}") from exc
    if not isinstance(runner, Runner):
        raise CliError(
            f"make_runner of {where} returned a {type(runner).__name__}, not a relaykit Runner"
        )
    if runner.session_service is not service:
        raise CliError(
            f"make_runner of {where} returned a Runner that does not keep its "
            "sessions in the session_service it was given: pass it on, "
            "Runner(agent, session_service=session_service)"
        )
    return runner
