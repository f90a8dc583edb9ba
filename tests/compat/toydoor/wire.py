"""The toy door's wire format: one request model, and the body parsed and held to the /v1 limits."""

from __future__ import annotations

from django.http import HttpRequest
from pydantic import ConfigDict, Field

from compat.http import validate_body
from compat.limits import parsed_body
from compat.wire import WireModel


class ToySayRequest(WireModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    model: str = Field(min_length=1, description="a model of GET /v1/models")
    say: str = Field(min_length=1, description="what the user says")
    stream: bool = False


def parse(request: HttpRequest) -> ToySayRequest:
    return validate_body(parsed_body(request, items=None), ToySayRequest)
