"""models.live_from_string and the lazily loaded live adapter classes."""

from __future__ import annotations

import subprocess
import sys

import pytest

import relaykit.models as models
from relaykit.errors import ConfigurationError
from relaykit.models import live_from_string
from relaykit.models.gemini_live import GeminiLiveModel
from relaykit.models.openai_realtime import OpenAIRealtimeModel


def test_specs_build_the_live_classes_with_their_options() -> None:
    gemini = live_from_string("Gemini: gemini-live-x ", api_key="k", connect_timeout=5)
    openai = live_from_string("openai:gpt-realtime", api_key="k", max_output_tokens=100)
    assert isinstance(gemini, GeminiLiveModel)
    assert (gemini.model, gemini.connect_timeout) == ("gemini-live-x", 5)
    assert isinstance(openai, OpenAIRealtimeModel)
    assert openai.default_options == {"max_output_tokens": 100}
    assert (models.GeminiLiveModel, models.OpenAIRealtimeModel) == (
        GeminiLiveModel,
        OpenAIRealtimeModel,
    )


@pytest.mark.parametrize("spec", ["gpt-realtime", "openai:", ":gpt-realtime", ""])
def test_malformed_spec(spec: str) -> None:
    with pytest.raises(ConfigurationError, match=r"live model spec .* '<provider>:<model>'"):
        live_from_string(spec)


def test_unknown_provider_is_named_with_the_known_ones() -> None:
    with pytest.raises(ConfigurationError, match=r"known providers: gemini, openai$"):
        live_from_string("anthropic:claude")


def test_missing_sdk_names_the_live_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` fail
    monkeypatch.delitem(sys.modules, "relaykit.models.openai_realtime", raising=False)
    monkeypatch.delitem(sys.modules, "relaykit.models.openai", raising=False)
    with pytest.raises(ConfigurationError, match=r"pip install 'relaykit\[live\]'"):
        live_from_string("openai:gpt-realtime", api_key="k")


def test_importing_relaykit_models_loads_no_websocket_library() -> None:
    code = (
        "import sys, relaykit, relaykit.models\n"
        "loaded = [m for m in ('websockets', 'openai', 'google.genai') if m in sys.modules]\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
