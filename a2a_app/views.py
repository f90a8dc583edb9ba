"""The deployment's agent card at /.well-known/agent-card.json (public: it lists only the agents named public)."""

from __future__ import annotations

from django.http import HttpResponse, JsonResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.views import APIView


class DeploymentCardView(APIView):
    """GET /.well-known/agent-card.json: the A2A card of this server (A2A 1.0 §8.2's well-known path)."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
        "An AgentCard (A2A 1.0, with the 0.3 fields): one skill per agent that AGENTSITE_A2A_PUBLIC_AGENTS names "
        "(none by default), each at /a2a/<skill id>."))})
    def get(self, request: Request) -> HttpResponse:
        # Imported here: a2a-sdk (~20 MiB) only in a process that serves A2A.
        from a2a_app.server.cards import deployment_card, public_slugs
        from a2a_app.server.selectors import public_facts_now

        origin = f"{request.scheme}://{request.get_host()}".lower()
        return JsonResponse(deployment_card(origin, public_facts_now(public_slugs())))
