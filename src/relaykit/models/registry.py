"""``from_string``: build a provider model from a ``"provider:model"`` spec.

Provider modules (and so their SDKs) are imported only when a spec names them.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from relaykit.errors import ConfigurationError
from relaykit.models.base import ChatModel

if TYPE_CHECKING:
    # Imported by the provider modules, which load their SDKs: a type only.
    from relaykit.models._retry import ProviderModel

__all__ = ["PROVIDERS", "from_string", "load_model_class"]


@dataclass(frozen=True, slots=True)
class _Provider:
    module: str
    cls: str
    extra: str  # the pip extra that installs the SDK
    sdk: str  # the top-level package of the SDK


PROVIDERS: dict[str, _Provider] = {
    "anthropic": _Provider("relaykit.models.anthropic", "AnthropicModel", "anthropic", "anthropic"),
    "gemini": _Provider("relaykit.models.gemini", "GeminiModel", "gemini", "google"),
    "openai": _Provider("relaykit.models.openai", "OpenAIModel", "openai", "openai"),
    "openai-compatible": _Provider("relaykit.models.openai", "OpenAIModel", "openai", "openai"),
}
"""The providers ``from_string`` knows, by spec prefix."""

_COMPATIBLE = re.compile(r"(?P<model>.+?)@(?P<url>https?://\S+)")


def _known() -> str:
    return ", ".join(sorted(PROVIDERS))


def load_model_class(provider: str) -> type[ProviderModel]:
    """The model class of ``provider``, importing its module (and SDK) now.

    Raises ``ConfigurationError`` for an unknown provider or a missing SDK.

    >>> load_model_class("openai").__name__
    'OpenAIModel'
    """
    entry = PROVIDERS.get(provider)
    if entry is None:
        raise ConfigurationError(
            f"unknown model provider {provider!r}; known providers: {_known()}"
        )
    try:
        module = importlib.import_module(entry.module)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing != entry.sdk:
            raise
        raise ConfigurationError(
            f"the {provider!r} model provider needs the {missing!r} package, which is not "
            f"installed: pip install 'relaykit[{entry.extra}]'"
        ) from exc
    return cast("type[ProviderModel]", getattr(module, entry.cls))


def from_string(spec: str, **kwargs: Any) -> ChatModel:
    """A chat model from a spec string; ``kwargs`` (provider-specific, hence ``Any``) go to the
    model class.

    So every constructor option works here too: ``api_key``, ``base_url``, ``timeout``, the
    retry settings ``max_retries``, ``backoff_base`` and ``max_backoff``, and request defaults
    such as ``temperature``.

    ``"openai:gpt-4o-mini"``, ``"anthropic:<model>"``, ``"gemini:<model>"`` or
    ``"openai-compatible:<model>@<base_url>"`` (vLLM, Ollama, llama.cpp...).

    >>> from_string("mistral:large")
    Traceback (most recent call last):
    ...
    relaykit.errors.ConfigurationError: unknown model provider 'mistral' in 'mistral:large'; \
known providers: anthropic, gemini, openai, openai-compatible
    """
    provider, sep, rest = spec.partition(":")
    provider = provider.strip().lower()
    rest = rest.strip()
    if not sep or not provider or not rest:
        raise ConfigurationError(
            f"model spec {spec!r} should look like '<provider>:<model>', e.g. "
            f"'openai:gpt-4o-mini' (known providers: {_known()})"
        )
    if provider not in PROVIDERS:
        raise ConfigurationError(
            f"unknown model provider {provider!r} in {spec!r}; known providers: {_known()}"
        )
    if provider == "openai-compatible":
        match = _COMPATIBLE.fullmatch(rest)
        if match is None:
            raise ConfigurationError(
                f"model spec {spec!r} should look like 'openai-compatible:<model>@<base_url>', "
                "e.g. 'openai-compatible:llama3.2@http://localhost:11434/v1'"
            )
        # The provider classes take the model name and keyword options; ProviderModel itself
        # declares no constructor, hence the callable's loose signature.
        compatible: Callable[..., ChatModel] = load_model_class(provider)
        kwargs.setdefault("provider_name", provider)
        return compatible(match["model"], base_url=match["url"], **kwargs)
    model_class: Callable[..., ChatModel] = load_model_class(provider)
    return model_class(rest, **kwargs)
