"""The ``relaykit`` command line (extra ``cli``): ``run``, ``tree``, ``sessions``, ``web``,
``api``. See docs/cli.md.

Importing ``relaykit`` never imports this package: Typer and Rich load only when the command
runs.
"""

from __future__ import annotations

__all__ = ["main"]


def main() -> None:
    """The ``relaykit`` console script."""
    try:
        from relaykit.cli._app import app
    except ImportError as exc:  # typer or rich missing
        raise SystemExit(
            f"relaykit: error: the command line needs the 'cli' extra "
            f"(pip install 'relaykit[cli]'): {exc}"
        ) from None
    app()
