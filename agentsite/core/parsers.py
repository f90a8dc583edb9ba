"""DRF's JSON parser with the nesting limit (agentsite.core.jsonbody) checked before it parses, and one for a
path whose body limit is its own (agentsite.core.bodygate)."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from django.urls import reverse
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser

from agentsite.core.bodygate import body_limit_for
from agentsite.core.errors import AppError
from agentsite.core.jsonbody import MAX_JSON_DEPTH, json_loads_bounded, json_too_deep


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        raw = stream.read() if stream is not None else b""
        if json_too_deep(raw):
            raise ParseError(f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.")
        try:
            return super().parse(io.BytesIO(raw), media_type, parser_context)
        except RecursionError as exc:
            raise ParseError(f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.") from exc


class PathLimitedJSONParser(BaseParser):
    """JSON up to the body limit of the path named `path_name` (a URL name; its MAX_BODY_BYTES_BY_PATH entry),
    read from the stream itself: DRF gives a JSONParser `request.body`, which Django refuses past
    DATA_UPLOAD_MAX_MEMORY_SIZE (the 10 MB of every other path). Subclasses set `path_name`."""

    media_type = "application/json"
    path_name = ""

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        limit = body_limit_for(reverse(self.path_name))
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise AppError("payload_too_large", "The request body is larger than this path takes.", 413)
        self.check(raw)
        return json_loads_bounded(raw)

    def check(self, raw: bytes) -> None:
        """A subclass's own check of the raw body before it is parsed (raise an AppError); none here."""
