"""Chat models: the protocol, the scripted model and provider adapters (optional extras)."""

from typing import TYPE_CHECKING

from relaykit.models.base import ChatModel, ModelRequest, ToolSpec, usage_metadata
from relaykit.models.failover import FailoverModel, default_should_fail_over
from relaykit.models.live import (
    LiveConfig,
    LiveConnection,
    LiveModel,
    LiveResponse,
    LiveRunConfig,
    ScriptedLiveModel,
)
from relaykit.models.registry import from_string, live_from_string
from relaykit.models.scripted import ScriptedModel

if TYPE_CHECKING:
    from relaykit.models._retry import ProviderModel
    from relaykit.models.anthropic import AnthropicModel
    from relaykit.models.gemini import GeminiModel
    from relaykit.models.gemini_live import GeminiLiveModel
    from relaykit.models.openai import OpenAIModel
    from relaykit.models.openai_realtime import OpenAIRealtimeModel

__all__ = [
    "AnthropicModel",
    "ChatModel",
    "FailoverModel",
    "GeminiLiveModel",
    "GeminiModel",
    "LiveConfig",
    "LiveConnection",
    "LiveModel",
    "LiveResponse",
    "LiveRunConfig",
    "ModelRequest",
    "OpenAIModel",
    "OpenAIRealtimeModel",
    "ScriptedLiveModel",
    "ScriptedModel",
    "ToolSpec",
    "default_should_fail_over",
    "from_string",
    "live_from_string",
    "usage_metadata",
]

_PROVIDER_CLASSES = {
    "OpenAIModel": "openai",
    "AnthropicModel": "anthropic",
    "GeminiModel": "gemini",
}
_LIVE_PROVIDER_CLASSES = {
    "GeminiLiveModel": "gemini",
    "OpenAIRealtimeModel": "openai",
}


def __getattr__(name: str) -> "type[ProviderModel] | type[LiveModel]":
    """Provider classes load on first use, so the SDKs stay optional."""
    from relaykit.models.registry import load_live_model_class, load_model_class

    if name in _PROVIDER_CLASSES:
        return load_model_class(_PROVIDER_CLASSES[name])
    if name in _LIVE_PROVIDER_CLASSES:
        return load_live_model_class(_LIVE_PROVIDER_CLASSES[name])
    raise AttributeError(f"module 'relaykit.models' has no attribute {name!r}")
