"""from_string: provider specs, lazy SDK imports, configuration errors."""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

from relaykit.errors import ConfigurationError, ModelError
from relaykit.messages import Message
from relaykit.models.base import ChatModel, ModelRequest
from relaykit.models.registry import from_string

if TYPE_CHECKING:
    from conftest import MockServer


def completion(text: str) -> dict[str, object]:
    return {
        "id": "c1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


async def test_provider_specs_build_the_provider_classes() -> None:
    from relaykit.models.anthropic import AnthropicModel
    from relaykit.models.gemini import GeminiModel
    from relaykit.models.openai import OpenAIModel

    cases = [
        ("openai:gpt-4o-mini", OpenAIModel, "gpt-4o-mini"),
        ("anthropic:claude-sonnet-4-5", AnthropicModel, "claude-sonnet-4-5"),
        ("gemini:gemini-2.5-flash", GeminiModel, "gemini-2.5-flash"),
        (" OpenAI : gpt-4o ", OpenAIModel, "gpt-4o"),
    ]
    for spec, cls, name in cases:
        model = from_string(spec, api_key="k", base_url="http://127.0.0.1:9")
        assert isinstance(model, cls) and isinstance(model, ChatModel)
        assert model.model == name
        await model.aclose()


async def test_openai_compatible_spec_talks_to_its_base_url(
    server: MockServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # local servers need no key
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    server.enqueue_json(completion("hi from llama"))
    model = from_string(f"openai-compatible:qwen2.5:7b@{server.base_url}/v1")
    try:
        reply = await model.generate(ModelRequest([Message.user("hi")]))
        assert reply.content == "hi from llama"
        assert server.requests[0].path == "/v1/chat/completions"
        assert server.requests[0].body["model"] == "qwen2.5:7b"

        server.enqueue_json({"error": {"message": "no such model"}}, 404)
        with pytest.raises(ModelError) as info:
            await model.generate(ModelRequest([Message.user("hi")]))
        assert str(info.value).startswith("openai-compatible: HTTP 404 from model 'qwen2.5:7b'")
        assert info.value.provider == "openai-compatible"
    finally:
        await model.aclose()


async def test_retry_options_pass_through_to_the_model(
    server: MockServer, retry_delays: list[float]
) -> None:
    server.enqueue_json({"error": {"message": "busy"}}, 503, headers={"retry-after": "2"})
    server.enqueue_json({"error": {"message": "busy"}}, 503, headers={"retry-after": "20"})
    model = from_string(
        f"openai-compatible:llama3@{server.base_url}/v1",
        max_retries=5,
        backoff_base=0.25,
        max_backoff=10,
    )
    try:
        with pytest.raises(ModelError, match=r"asked to wait 20 s .* max_backoff=10 s"):
            await model.generate(ModelRequest([Message.user("hi")]))
    finally:
        await model.aclose()
    assert retry_delays == [2]  # the first hint is waited; the second is above max_backoff
    assert len(server.requests) == 2


@pytest.mark.parametrize(
    "spec",
    [
        "openai-compatible:llama3",
        "openai-compatible:@http://x",
        "openai-compatible:llama3@localhost:8000",
    ],
)
def test_openai_compatible_needs_model_and_url(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="<model>@<base_url>"):
        from_string(spec)


def test_unknown_provider_is_named_with_the_known_ones() -> None:
    with pytest.raises(ConfigurationError) as info:
        from_string("mistral:large")
    message = str(info.value)
    assert "'mistral'" in message
    for known in ("openai", "anthropic", "gemini", "openai-compatible"):
        assert known in message


@pytest.mark.parametrize("spec", ["gpt-4o", "openai:", ":gpt-4o", ""])
def test_malformed_spec(spec: str) -> None:
    with pytest.raises(ConfigurationError, match="<provider>:<model>"):
        from_string(spec)


def test_missing_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "anthropic", None)  # makes `import anthropic` fail
    monkeypatch.delitem(sys.modules, "relaykit.models.anthropic", raising=False)
    with pytest.raises(ConfigurationError, match=r"pip install 'relaykit\[anthropic\]'"):
        from_string("anthropic:claude-sonnet-4-5", api_key="k")


def test_core_import_does_not_import_provider_sdks() -> None:
    code = (
        "import sys, relaykit, relaykit.models, relaykit.models.registry\n"
        "loaded = [m for m in ('openai', 'anthropic', 'google.genai') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
