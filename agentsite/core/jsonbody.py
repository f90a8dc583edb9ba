"""JSON bodies read without recursing without bound (docs/api.md: nesting deeper than 100 levels answers 400).

Python's json module recurses once per level and raises RecursionError near 1,000 levels, which
became a 500 on every JSON route. The depth is measured on the raw bytes first, before any parser
recurses: strings are cut out (brackets inside them are text), then the brackets are counted.
"""

from __future__ import annotations

import json
import re
from typing import Any

from agentsite.core.errors import AppError

MAX_JSON_DEPTH = 100

# A JSON string, escapes included (the unrolled form, which the re engine matches without backtracking).
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
_OPENERS = frozenset(b"[{")


def json_too_deep(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays and objects in `raw` nest deeper than `limit` (an unterminated string counts its brackets)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:  # the usual body: no scan at all
        return False
    depth = 0
    for byte in _STRING.sub(b"", raw).translate(None, _NOT_BRACKETS):
        if byte in _OPENERS:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def too_deep_error() -> AppError:
    return AppError("invalid", f"The JSON body nests deeper than {MAX_JSON_DEPTH} levels.", 400)


def json_loads_bounded(raw: bytes | str) -> Any:
    """json.loads that refuses deep nesting first; raises AppError 400 `invalid` for deep or malformed JSON."""
    data = raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else raw
    if json_too_deep(data):
        raise too_deep_error()
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise AppError("invalid", "The body is not valid JSON.", 400) from exc
    except RecursionError as exc:  # a deep stack already (a nested call): still a client's error, not a 500
        raise too_deep_error() from exc
