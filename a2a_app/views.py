"""The deployment's agent card at /.well-known/agent-card.json (public: it lists only the agents named public)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET


@require_GET
def deployment_card_view(request: HttpRequest) -> JsonResponse:
    # Imported here: a2a-sdk (~20 MiB) only in a process that serves A2A.
    from a2a_app.server.cards import deployment_card, public_slugs
    from a2a_app.server.selectors import public_facts_now

    origin = f"{request.scheme}://{request.get_host()}".lower()
    return JsonResponse(deployment_card(origin, public_facts_now(public_slugs())))
