"""Schemathesis fuzzes the HTTP API's OpenAPI document in process (ASGI, the support desk).

Every operation gets generated requests, valid and invalid; each response must be one the
document declares (status, content type, body schema), never a 5xx, and every 4xx must be an
``ErrorOut`` with a message. With API keys (fewer examples: the bodies are fuzzed in dev mode
already) Schemathesis also checks that requests without the key, or with a wrong one, fail.
Half of the requests naming a session name one that exists (``s1``, created again before
each request), so turns, resumes and reads run for real.
"""

from __future__ import annotations

import json
from typing import Any

import hypothesis.strategies as st
import schemathesis
from examples.support_desk import build_desk
from hypothesis import HealthCheck, settings
from schemathesis import Case
from schemathesis.config import SchemathesisConfig
from schemathesis.openapi.checks import RejectedPositiveData
from schemathesis.python import asgi

import relaykit as rk
from relaykit.server import create_app

EXAMPLES = 30  # per operation: enough to hit every branch of the bodies, quick in make test
KEYED_EXAMPLES = 10
KEY = "fuzz-key"
SESSION = "s1"


def _app(api_keys: dict[str, str] | None) -> Any:
    runner = rk.Runner(
        build_desk(),
        app_name="desk",
        session_service=rk.InMemorySessionService(),
        streaming=True,
        session_lock_timeout=0,
    )
    return create_app(runner, api_keys=api_keys)


DEV_APP = _app(None)
KEYED_APP = _app({KEY: "ana"})
dev_schema = schemathesis.openapi.from_asgi("/openapi.json", DEV_APP)
keyed_schema = schemathesis.openapi.from_asgi(
    "/openapi.json",
    KEYED_APP,
    # The key for the scheme the document declares: Schemathesis also checks that requests
    # without it, or with a wrong one, are refused.
    config=SchemathesisConfig.from_dict({"auth": {"openapi": {"apiKey": {"bearer": KEY}}}}),
)


def _known_session(context: Any, path_parameters: dict[str, Any]) -> st.SearchStrategy[Any]:
    """The generated session id, or the one that exists."""
    if not path_parameters or "session_id" not in path_parameters:
        return st.just(path_parameters)
    return st.sampled_from([path_parameters, {**path_parameters, "session_id": SESSION}])


def _keep_failure(context: Any, failure: Any, case: Case, response: Any) -> bool:
    """Every failure but the refusal of a body the schema cannot rule out: two tool responses
    to the same call (JSON Schema cannot say that the items' ``tool_call_id`` differ)."""
    if isinstance(failure, RejectedPositiveData) and response.status_code == 422:
        error = json.loads(response.content)["error"]
        duplicate = "two tool responses answer call" in error["message"]
        return not (error["type"] == "ConfigurationError" and duplicate)
    return True


for _schema in (dev_schema, keyed_schema):
    _schema.hook("flatmap_path_parameters")(_known_session)
    _schema.hook("filter_failure")(_keep_failure)


def _every_4xx_is_an_error_out(ctx: Any, response: Any, case: Case) -> bool | None:
    if 400 <= response.status_code < 500:
        assert response.headers.get("content-type", [""])[0].startswith("application/json"), (
            response.headers
        )
        body = json.loads(response.content)
        assert set(body) == {"error"}, body
        assert isinstance(body["error"]["type"], str) and body["error"]["type"], body
        assert isinstance(body["error"]["message"], str) and body["error"]["message"], body
    return None


def _fuzz(case: Case, app: Any, headers: dict[str, str]) -> None:
    with asgi.get_client(app) as client:  # the session the known-id requests name
        client.post("/sessions", json={"session_id": SESSION}, headers=headers)
    case.call_and_validate(additional_checks=[_every_4xx_is_an_error_out])


def _fuzzing(examples: int) -> Any:
    return settings(
        max_examples=examples,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )


@dev_schema.parametrize()
@_fuzzing(EXAMPLES)
def test_the_api_in_dev_mode(case: Case) -> None:
    _fuzz(case, DEV_APP, {})


@keyed_schema.parametrize()
@_fuzzing(KEYED_EXAMPLES)
def test_the_api_with_api_keys(case: Case) -> None:
    _fuzz(case, KEYED_APP, {"Authorization": f"Bearer {KEY}"})
