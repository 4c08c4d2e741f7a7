"""relaykit's HTTP API: ``create_app(runner)`` serves a session-mode Runner (docs/http-server.md).

Needs the ``server`` extra (FastAPI). ``import relaykit`` never imports this package.
"""

from __future__ import annotations

from relaykit.server._app import DEV_USER, ApiError, create_app

__all__ = ["DEV_USER", "ApiError", "create_app"]
