"""GET /api/meta: the lists the clients render from (node types, providers, tool sources, config fields).

Each list is defined once, by the layer that owns it, which registers a section here at start-up
(`register_section`, from an AppConfig.ready()); the view answers every section in one JSON document, so the
dashboard holds no copy of any list. The kernel knows no section's content: it only collects them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

Section = Callable[[], Any]  # builds a section's JSON value when asked (a registry may change after start-up)

_sections: dict[str, Section] = {}


def register_section(name: str, build: Section) -> None:
    """Answer `build()` under `name` in /api/meta. A second registration of a name replaces the first."""
    _sections[name] = build


def sections() -> list[str]:
    return sorted(_sections)


def document() -> dict[str, Any]:
    """Every registered section, built now, by name."""
    return {name: _sections[name]() for name in sorted(_sections)}


class MetaView(APIView):
    """GET /api/meta: any signed-in user (the lists are the same for everyone)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, operation_id="meta_retrieve",
                   description="The lists the dashboard renders from, one JSON object per section: "
                               "`node_types`, `providers`, `tool_sources`, `config_fields` (docs/api.md).")
    def get(self, request: Request) -> Response:
        return Response(document())
