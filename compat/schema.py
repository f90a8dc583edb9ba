"""/v1 in /api/schema, generated from each dialect's pydantic models (compat/<dialect>/wire.py).

drf-spectacular documents the async /v1 views through their `cls`: compat/urls.py attaches each route's
schema-only view (compat/<dialect>/schema.py, built on V1 below). Their bodies are the pydantic models
themselves: `WireModelExtension` turns a model's JSON Schema (pydantic's, draft 2020-12) into OpenAPI 3.0
components, so a field added to a model is validated and documented at once. Error responses (the OpenAI
shape) are added by agentsite.schema.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.drainage import warn
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.utils import OpenApiResponse
from rest_framework.permissions import AllowAny
from rest_framework.views import APIView

from accounts.authentication import JWTAuthentication

REF_TEMPLATE = "#/components/schemas/{model}"
_SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf")
_SUBSCHEMA_MAPS = ("properties", "$defs")
_SUBSCHEMAS = ("items", "additionalProperties", "not")
_NULL = {"type": "null"}


def openapi30(schema: dict[str, Any]) -> dict[str, Any]:
    """A pydantic JSON Schema as an OpenAPI 3.0 schema object: `const` becomes a one-value `enum`, a
    `{"type": "null"}` branch becomes `nullable: true` (a lone `$ref` left is wrapped in `allOf`, as 3.0 ignores
    siblings of `$ref`), and the titles pydantic derives from field names are dropped. Raises ValueError on a
    construct 3.0 cannot say (a list of types)."""
    if isinstance(schema.get("type"), list):
        raise ValueError(f"OpenAPI 3.0 has no list of types: {schema}")
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title":
            continue
        if key == "const":
            out["enum"] = [value]
        elif key in _SUBSCHEMA_MAPS:
            out[key] = {name: openapi30(sub) for name, sub in value.items()}
        elif key in _SUBSCHEMAS and isinstance(value, dict):
            out[key] = openapi30(value)
        elif key in _SUBSCHEMA_LISTS:
            out[key] = [openapi30(sub) for sub in value]
        else:
            out[key] = value
    return _nullable(out)


def _nullable(out: dict[str, Any]) -> dict[str, Any]:
    for key in ("anyOf", "oneOf"):
        branches = [branch for branch in out.get(key, ()) if branch != _NULL]
        if key not in out or len(branches) == len(out[key]):
            continue
        out["nullable"] = True
        if len(branches) > 1:
            out[key] = branches
            continue
        del out[key]
        (only,) = branches
        if "$ref" in only:
            out["allOf"] = [only]
        else:
            out = {**only, **out}
    return out


class WireModelExtension(OpenApiSerializerExtension):
    """Documents a compat.wire.WireModel given as `request=` or in `responses=` of @extend_schema.

    The component is named after the class (drf-spectacular appends `Request` to request components, so a
    trailing `Request` of the class name is taken off first); nested models become components under their own
    class names. A nested name already used by another component with a different schema is a warning
    (`spectacular --fail-on-warn` fails on it). Requests are described as pydantic validates them, responses
    as it serializes them.
    """

    target_class = "compat.wire.WireModel"
    match_subclasses = True
    priority = 1  # over drf-spectacular's own pydantic extension, which writes OpenAPI 3.1 into a 3.0 schema

    def get_name(self, auto_schema: AutoSchema, direction: str) -> str:
        name = self.target.__name__
        if direction == "request" and spectacular_settings.COMPONENT_SPLIT_REQUEST:
            name = name.removesuffix("Request")
        return name

    def map_serializer(self, auto_schema: AutoSchema, direction: str) -> dict[str, Any]:
        mode = "validation" if direction == "request" else "serialization"
        schema = openapi30(self.target.model_json_schema(ref_template=REF_TEMPLATE, mode=mode))
        for name, sub_schema in schema.pop("$defs", {}).items():
            component = ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA, object=name, schema=sub_schema)
            if component in auto_schema.registry and auto_schema.registry[component].schema != sub_schema:
                warn(f"{self.target.__name__}: the component {name!r} already documents something else; rename "
                     f"the model.")
            auto_schema.registry.register_on_missing(component)
        return schema


ERROR = OpenApiResponse(description="OpenAI error shape")


class V1(APIView):
    # Public unless config compat_auth is "token"; a dashboard token, when sent, identifies the caller.
    authentication_classes = [JWTAuthentication]
    permission_classes = [AllowAny]
