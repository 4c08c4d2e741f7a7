"""The HTTP API's OpenAPI document: FastAPI's, plus what FastAPI cannot see.

The event stream's events (each an ``event:`` name and JSON ``data:`` of a named schema), the
models only the stream sends, and the API key as an HTTP bearer scheme on every route but
``/health``.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from relaykit.server._errors import ERRORS
from relaykit.server._models import ChunkOut, DiscardOut, EventOut, RunResultOut, TurnResultOut

__all__ = ["TURN_RESPONSES", "openapi_document"]

#: The responses of a turn and of a resume.
TURN_RESPONSES: dict[int | str, dict[str, Any]] = {
    **ERRORS,
    200: {
        "model": TurnResultOut,
        "description": (
            "`text/event-stream` by default: `agent_event` (an EventOut), `chunk` (a ChunkOut), "
            "`discard` (a DiscardOut: drop those chunks), then `done` (a RunResultOut). With "
            '`"stream": false`: one TurnResultOut.'
        ),
        "content": {
            "text/event-stream": {
                "schema": {  # one event of the stream (OpenAPI 3.1: ``schema`` is per event)
                    "description": "One event: its `event:` name and its `data:`, a JSON object.",
                    "oneOf": [
                        {
                            "type": "object",
                            "properties": {
                                "event": {"const": name},
                                "data": {
                                    "type": "string",
                                    "contentMediaType": "application/json",
                                    "contentSchema": {
                                        "$ref": f"#/components/schemas/{model.__name__}"
                                    },
                                },
                            },
                            "required": ["event", "data"],
                        }
                        for name, model in (
                            ("agent_event", EventOut),
                            ("chunk", ChunkOut),
                            ("discard", DiscardOut),
                            ("done", RunResultOut),
                        )
                    ],
                }
            }
        },
    },
}


def openapi_document(app: FastAPI, *, bearer: bool) -> dict[str, Any]:
    """``app``'s document; with ``bearer``, its routes but ``/health`` take the API key."""
    document = get_openapi(
        title=app.title, version=app.version, description=app.description, routes=app.routes
    )
    components = document.setdefault("components", {})
    schemas = components.setdefault("schemas", {})
    for model in (EventOut, ChunkOut, DiscardOut, RunResultOut):
        found = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(found.pop("$defs", {}))
        schemas.setdefault(model.__name__, found)
    if bearer:
        components["securitySchemes"] = {
            "apiKey": {"type": "http", "scheme": "bearer", "description": "An API key."}
        }
        for path, operations in document.get("paths", {}).items():
            if path != "/health":
                for operation in operations.values():
                    operation["security"] = [{"apiKey": []}]
    return document
