"""Model sources: facets that answer models of their own on /v1 (a workflow is the model `workflow:<name>`).

A facet registers a `ModelSource` in its AppConfig.ready(); /v1 lists the models a source names for the
caller and sends requests for a model whose name starts with the source's prefix to it. The runtime
imports no facet: this registry is how they plug in, like tool sources and context sources.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING

from agentsite.agent.types import Message, StreamEvent

if TYPE_CHECKING:
    from agentsite.agent.usage import Caller


class ModelSource:
    """Models named `<prefix><something>`.

    `list_models(user_id)` returns the full model names this source answers for that user ([] for an
    anonymous caller). `stream(model, messages, user_id, caller)` answers one request with the runtime's stream
    events (TextDelta*, then at most one Usage, then one Finish) and raises AppError: 404
    `model_not_found` when the user has no such model, another status when answering failed. `caller` is who
    the door authenticated (its API key, its rights): what the source runs for the request acts as it.
    """

    prefix: str = ""

    async def list_models(self, user_id: int | None) -> list[str]:
        raise NotImplementedError

    def stream(self, model: str, messages: list[Message], user_id: int | None,
               caller: Caller | None = None) -> AsyncGenerator[StreamEvent, None]:
        raise NotImplementedError


_sources: dict[str, ModelSource] = {}


def register_model_source(source: ModelSource) -> None:
    _sources[source.prefix] = source


def model_sources() -> list[ModelSource]:
    return list(_sources.values())


def model_source_for(model: str) -> ModelSource | None:
    return next((source for prefix, source in _sources.items() if prefix and model.startswith(prefix)), None)
