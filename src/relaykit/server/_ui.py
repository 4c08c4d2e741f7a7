"""The web dev UI: plain ES modules and a stylesheet, served at ``/ui/`` (docs/web-ui.md).

The files live in ``relaykit/server/ui/`` and ship in the wheel; nothing is built. They are read
once, when the app is created, and served with their exact content types, an ETag, and a
Content-Security-Policy that allows only the page's own scripts, styles and API calls. The UI
pages need no API key: they hold no data, and every API call they make sends the key the user
typed in (``Authorization: Bearer``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from importlib import resources

from fastapi import FastAPI, Request, Response
from fastapi.responses import RedirectResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from relaykit.errors import ConfigurationError

__all__ = ["CONTENT_SECURITY_POLICY", "UiFile", "add_ui", "ui_files"]

#: The content type of each kind of file the UI folder may hold; other files are not served.
CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
}

#: Scripts, styles and API calls from the server itself only; no inline script, no framing.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


@dataclass(frozen=True, slots=True)
class UiFile:
    """One file of the UI, read into memory."""

    #: The bytes served.
    content: bytes
    #: Its ``Content-Type``.
    content_type: str
    #: Its entity tag (a hash of the content, quoted).
    etag: str


def ui_files() -> dict[str, UiFile]:
    """The UI's files by path under ``ui/`` (``app.js``, ``index.html``...).

    >>> files = ui_files()
    >>> files["index.html"].content_type, files["app.js"].content_type
    ('text/html; charset=utf-8', 'text/javascript; charset=utf-8')
    """
    root = resources.files("relaykit.server") / "ui"
    found: dict[str, UiFile] = {}
    pending = [(root, "")]
    while pending:
        folder, prefix = pending.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                pending.append((entry, f"{prefix}{entry.name}/"))
                continue
            suffix = "." + entry.name.rpartition(".")[2]
            content_type = CONTENT_TYPES.get(suffix)
            if content_type is None:
                continue
            content = entry.read_bytes()
            etag = '"' + hashlib.sha256(content).hexdigest()[:20] + '"'
            found[prefix + entry.name] = UiFile(content, content_type, etag)
    if "index.html" not in found:
        raise ConfigurationError(
            "the web UI's files are missing from this installation (relaykit/server/ui/); "
            "reinstall relaykit, or create the app with ui=False"
        )
    return found


def add_ui(app: FastAPI) -> None:
    """Serve the UI at ``/ui/`` (``/ui`` and ``/`` redirect there); not in the OpenAPI document."""
    files = ui_files()

    @app.get("/", include_in_schema=False)
    async def root() -> RedirectResponse:
        return RedirectResponse("ui/", status_code=307)

    @app.get("/ui/{path:path}", include_in_schema=False)
    async def ui(path: str, request: Request) -> Response:
        found = files.get(path or "index.html")
        if found is None:
            raise StarletteHTTPException(404, "no such file in the web UI")
        headers = {
            "ETag": found.etag,
            "Cache-Control": "no-cache",
            "X-Content-Type-Options": "nosniff",
            "Content-Security-Policy": CONTENT_SECURITY_POLICY,
            "Referrer-Policy": "no-referrer",
        }
        if request.headers.get("if-none-match") == found.etag:
            return Response(status_code=304, headers=headers)
        return Response(found.content, media_type=found.content_type, headers=headers)
