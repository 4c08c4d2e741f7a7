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
from relaykit.models.registry import from_string
from relaykit.models.scripted import ScriptedModel

if TYPE_CHECKING:
    from relaykit.models._retry import ProviderModel
    from relaykit.models.anthropic import AnthropicModel
    from relaykit.models.gemini import GeminiModel
    from relaykit.models.openai import OpenAIModel

__all__ = [
    "AnthropicModel",
    "ChatModel",
    "FailoverModel",
    "GeminiModel",
    "LiveConfig",
    "LiveConnection",
    "LiveModel",
    "LiveResponse",
    "LiveRunConfig",
    "ModelRequest",
    "OpenAIModel",
    "ScriptedLiveModel",
    "ScriptedModel",
    "ToolSpec",
    "default_should_fail_over",
    "from_string",
    "usage_metadata",
]

_PROVIDER_CLASSES = {
    "OpenAIModel": "openai",
    "AnthropicModel": "anthropic",
    "GeminiModel": "gemini",
}


def __getattr__(name: str) -> "type[ProviderModel]":
    """Provider classes load on first use, so the SDKs stay optional."""
    provider = _PROVIDER_CLASSES.get(name)
    if provider is None:
        raise AttributeError(f"module 'relaykit.models' has no attribute {name!r}")
    from relaykit.models.registry import load_model_class

    return load_model_class(provider)
