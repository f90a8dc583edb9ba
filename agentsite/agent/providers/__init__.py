"""LLM providers: one module per wire format behind the `Provider` base class, and their registry.

`PROVIDERS` is the one list of provider names (its keys): connections are validated against it, and
`describe_providers()` is what GET /api/meta answers for the forms that pick one.
"""

from __future__ import annotations

from typing import Any

from agentsite.agent.config import AgentSettings
from agentsite.agent.providers.anthropic import AnthropicProvider
from agentsite.agent.providers.base import Provider, collect
from agentsite.agent.providers.offline import OfflineProvider
from agentsite.agent.providers.openai import OpenAIProvider
from agentsite.agent.types import ChatRequest
from agentsite.core.errors import AppError

PROVIDERS: dict[str, type[Provider]] = {
    OpenAIProvider.name: OpenAIProvider,
    AnthropicProvider.name: AnthropicProvider,
    OfflineProvider.name: OfflineProvider,
}

__all__ = ["PROVIDERS", "AnthropicProvider", "OfflineProvider", "OpenAIProvider", "Provider", "collect",
           "default_model", "describe_providers", "get_provider", "uncarried_fields"]


def describe_providers() -> list[dict[str, Any]]:
    """Each provider as a form shows it: its name, label, defaults, and whether it needs a key and a URL."""
    return [{"name": name, "label": kind.label, "default_model": kind.default_model,
             "default_base_url": kind.default_base_url, "needs_key": kind.needs_key, "needs_url": kind.needs_url}
            for name, kind in PROVIDERS.items()]


def _provider_class(name: str) -> type[Provider]:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise AppError("unavailable", f"The configured LLM provider {name!r} is not one of "
                       f"{', '.join(sorted(PROVIDERS))}.", status=503) from None


def get_provider(settings: AgentSettings) -> Provider:
    """The provider the settings name, with their base URL, key, model and timeout; raises AppError (503)."""
    return _provider_class(settings.provider)(base_url=settings.base_url, api_key=settings.api_key,
                                              model=settings.model, timeout=settings.request_timeout)


def default_model(provider_name: str) -> str:
    return _provider_class(provider_name).default_model


def uncarried_fields(provider_name: str, request: ChatRequest) -> list[str]:
    """The request's fields (its `extra` ones, and `response_format`) that a provider kind's wire format cannot
    carry, sorted: a door refuses the request naming the first, rather than drop it."""
    kind = _provider_class(provider_name)
    carries = kind.carries
    # `n: 1` asks for what every provider gives (the doors refuse any other n).
    names = [name for name, value in request.extra.items()
             if carries is not None and name not in carries and not (name == "n" and value == 1)]
    if request.response_format is not None and not kind.carries_response_format(request):
        names.append("response_format")
    return sorted(names)
