"""Importing the module an ``APP`` argument names: a file, a package folder or a module name."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from ._errors import USAGE, CliError

__all__ = ["AppModule", "import_app_module"]

#: The file an app folder without ``__init__.py`` holds its agent in (Google ADK's layout).
AGENT_FILE = "agent.py"


@dataclass(slots=True)
class AppModule:
    """An imported app module and where it came from."""

    #: The module (or package).
    module: ModuleType
    #: The folder the app lives in: the file's folder, a package's own folder.
    folder: Path
    #: The name the app's sessions are stored under unless the app names one: the last part
    #: of the module's name, or the folder's name for an ``agent.py`` found in a folder.
    default_name: str


def import_app_module(target: str) -> AppModule:
    """Import ``target``: an existing path (``app.py``, ``my-app.py``, a package folder, a
    folder holding ``agent.py``), a path without its ``.py`` (``examples/support_desk``), or a
    dotted module name found from the current folder and the installed packages.

    >>> import_app_module("no/such/app.py")
    Traceback (most recent call last):
    ...
    relaykit.cli._errors.CliError: no app file or folder no/such/app.py
    """
    path = _existing_path(target)
    if path is not None:
        return _import_path(path)
    if _looks_like_path(target):
        also = "" if target.endswith(".py") else f" (nor {target}.py)"
        raise CliError(f"no app file or folder {target}{also}", USAGE)
    if not all(part.isidentifier() for part in target.split(".")):
        raise CliError(f"{target!r} is neither an existing file nor a module name", USAGE)
    if "" not in sys.path and str(Path.cwd()) not in sys.path:
        sys.path.insert(0, str(Path.cwd()))
    module = _import_name(target, target)
    return AppModule(module, _folder_of(module), target.rpartition(".")[2])


def _existing_path(target: str) -> Path | None:
    path = Path(target)
    if path.exists():
        return path
    if path.suffix != ".py" and path.name:
        with_suffix = path.with_name(path.name + ".py")
        if with_suffix.is_file():
            return with_suffix
    return None


def _looks_like_path(target: str) -> bool:
    return target.endswith(".py") or "/" in target or "\\" in target


def _folder_of(module: ModuleType) -> Path:
    file = getattr(module, "__file__", None)
    return Path(file).resolve().parent if file else Path.cwd()


def _import_path(path: Path) -> AppModule:
    """Import a file or a folder. Inside packages (folders with ``__init__.py``) the module
    gets its dotted name, so that its relative and absolute imports work as in the project; a
    name that is no identifier (``my-app.py``) is loaded from its file under that name."""
    path = path.resolve()
    if path.name == "__init__.py":
        path = path.parent
    default_name = path.name if path.is_dir() else path.stem
    if path.is_dir() and not (path / "__init__.py").is_file():
        if not (path / AGENT_FILE).is_file():
            raise CliError(
                f"{path} is a folder but not an app: it has no __init__.py (a Python package "
                f"exposing root_agent) and no {AGENT_FILE}",
                USAGE,
            )
        default_name = path.name
        path = path / AGENT_FILE
    if path.is_file() and path.suffix != ".py":
        raise CliError(f"{path} is not a Python file (.py)", USAGE)
    # The packages around the module: their names, and the folder above the outermost one.
    packages: list[str] = []
    root = path.parent
    while (root / "__init__.py").is_file() and root.name.isidentifier() and root.parent != root:
        packages.insert(0, root.name)
        root = root.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    stem = path.name if path.is_dir() else path.stem
    module = _import_located(stem, path, packages)
    if path.is_dir() and not hasattr(module, "root_agent") and (path / AGENT_FILE).is_file():
        # A package in Google ADK's layout: its agent.py holds the agent.
        module = _import_name(f"{module.__name__}.agent", str(path / AGENT_FILE))
    folder = path if path.is_dir() else path.parent
    return AppModule(module, folder, default_name)


def _import_located(stem: str, path: Path, packages: list[str]) -> ModuleType:
    """The module ``stem`` (inside ``packages``) whose source is ``path``: imported by name
    when that is a valid module name, else loaded from the file under that name, after its
    packages (so that its relative imports work)."""
    name = ".".join([*packages, stem])
    source = path / "__init__.py" if path.is_dir() else path
    loaded = sys.modules.get(name)
    if loaded is not None:
        where = getattr(loaded, "__file__", None)
        if where is not None and Path(where).resolve() == source:
            return loaded
    if loaded is not None or not stem.isidentifier():
        if packages:
            _import_name(".".join(packages), str(path.parent))
        if loaded is not None:
            # Another module holds the name (a second app.py, say): this one gets its own.
            name = ".".join([*packages, f"{stem}_{abs(hash(str(source))):x}"])
        return _load_file(name, path)
    module = _import_name(name, str(path))
    where = getattr(module, "__file__", None)
    if where is not None and Path(where).resolve() != source:
        raise CliError(
            f"importing {path} as {name!r} found {where} instead: another module of that name "
            "comes first on sys.path; rename the app or run from another folder",
            USAGE,
        )
    return module


def _load_file(name: str, path: Path) -> ModuleType:
    """Load a module (``path`` a file) or package (``path`` a folder) from its source."""
    if path.is_dir():
        spec = importlib.util.spec_from_file_location(
            name, path / "__init__.py", submodule_search_locations=[str(path)]
        )
    else:
        spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise CliError(f"cannot import {path}", USAGE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # before running it: dataclasses and pickling look it up
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        sys.modules.pop(name, None)
        raise CliError(f"importing {path} failed: {type(exc).__name__}: {exc}") from exc
    return module


def _import_name(name: str, shown: str) -> ModuleType:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise CliError(f"no module named {name!r} (from {shown})", USAGE) from exc
        raise CliError(f"importing {shown} failed: {exc}") from exc
    except Exception as exc:
        raise CliError(f"importing {shown} failed: {type(exc).__name__}: {exc}") from exc
