"""``from_string`` / ``live_from_string``: build a provider model from a ``"provider:model"``
spec.

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
    from relaykit.models.live import LiveModel

__all__ = [
    "LIVE_PROVIDERS",
    "PROVIDERS",
    "from_string",
    "live_from_string",
    "load_live_model_class",
    "load_model_class",
]


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

LIVE_PROVIDERS: dict[str, _Provider] = {
    "gemini": _Provider("relaykit.models.gemini_live", "GeminiLiveModel", "live", "google"),
    "openai": _Provider("relaykit.models.openai_realtime", "OpenAIRealtimeModel", "live", "openai"),
}
"""The providers ``live_from_string`` knows, by spec prefix."""

_COMPATIBLE = re.compile(r"(?P<model>.+?)@(?P<url>https?://\S+)")


def _known(providers: dict[str, _Provider] = PROVIDERS) -> str:
    return ", ".join(sorted(providers))


def load_model_class(provider: str) -> type[ProviderModel]:
    """The model class of ``provider``, importing its module (and SDK) now.

    Raises ``ConfigurationError`` for an unknown provider or a missing SDK.

    >>> load_model_class("openai").__name__
    'OpenAIModel'
    """
    return cast("type[ProviderModel]", _load(PROVIDERS, provider, "model"))


def load_live_model_class(provider: str) -> type[LiveModel]:
    """The live model class of ``provider``, importing its module (and SDK) now.

    Raises ``ConfigurationError`` for an unknown provider or a missing SDK.

    >>> load_live_model_class("gemini").__name__
    'GeminiLiveModel'
    """
    return cast("type[LiveModel]", _load(LIVE_PROVIDERS, provider, "live model"))


def _load(providers: dict[str, _Provider], provider: str, kind: str) -> object:
    entry = providers.get(provider)
    if entry is None:
        raise ConfigurationError(
            f"unknown {kind} provider {provider!r}; known providers: {_known(providers)}"
        )
    try:
        module = importlib.import_module(entry.module)
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").split(".")[0]
        if missing != entry.sdk:
            raise
        raise ConfigurationError(
            f"the {provider!r} {kind} provider needs the {missing!r} package, which is not "
            f"installed: pip install 'relaykit[{entry.extra}]'"
        ) from exc
    return getattr(module, entry.cls)


def _split(spec: str, providers: dict[str, _Provider], kind: str, example: str) -> tuple[str, str]:
    """``(provider, rest)`` of a ``"provider:rest"`` spec naming one of ``providers``."""
    provider, sep, rest = spec.partition(":")
    provider = provider.strip().lower()
    rest = rest.strip()
    if not sep or not provider or not rest:
        raise ConfigurationError(
            f"{kind} spec {spec!r} should look like '<provider>:<model>', e.g. "
            f"{example!r} (known providers: {_known(providers)})"
        )
    if provider not in providers:
        raise ConfigurationError(
            f"unknown {kind} provider {provider!r} in {spec!r}; known providers: "
            f"{_known(providers)}"
        )
    return provider, rest


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
    provider, rest = _split(spec, PROVIDERS, "model", "openai:gpt-4o-mini")
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


def live_from_string(spec: str, **kwargs: Any) -> LiveModel:
    """A live (realtime) model from a spec string; ``kwargs`` (provider-specific, hence ``Any``)
    go to the model class: ``api_key``, ``base_url``, ``connect_timeout``, ``client`` and
    default session options.

    ``"gemini:<model>"`` (``GeminiLiveModel``) or ``"openai:<model>"``
    (``OpenAIRealtimeModel``).

    >>> live_from_string("gemini:gemini-live-2.5-flash-preview", api_key="example-key").name
    'gemini:gemini-live-2.5-flash-preview'
    >>> live_from_string("anthropic:claude")
    Traceback (most recent call last):
    ...
    relaykit.errors.ConfigurationError: unknown live model provider 'anthropic' in \
'anthropic:claude'; known providers: gemini, openai
    """
    provider, rest = _split(spec, LIVE_PROVIDERS, "live model", "openai:gpt-realtime")
    model_class: Callable[..., LiveModel] = load_live_model_class(provider)
    return model_class(rest, **kwargs)
