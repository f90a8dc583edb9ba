"""DRF's JSON parser with the nesting limit (agentsite.core.jsonbody) checked before it parses."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from agentsite.core.jsonbody import MAX_JSON_DEPTH, json_too_deep


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        raw = stream.read() if stream is not None else b""
        if json_too_deep(raw):
            raise ParseError(f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.")
        try:
            return super().parse(io.BytesIO(raw), media_type, parser_context)
        except RecursionError as exc:
            raise ParseError(f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.") from exc
