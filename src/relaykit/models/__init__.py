"""Chat models: the protocol, the scripted model and provider adapters (optional extras)."""

from relaykit.models.base import ChatModel, ModelRequest, ToolSpec, usage_metadata
from relaykit.models.scripted import ScriptedModel

__all__ = ["ChatModel", "ModelRequest", "ScriptedModel", "ToolSpec", "usage_metadata"]
