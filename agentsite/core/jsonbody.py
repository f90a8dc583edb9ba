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

_NOT_BRACKETS = bytes(range(256)).translate(None, b"[]{}")
_NOT_QUOTES_OR_BRACKETS = bytes(range(256)).translate(None, b'"[]{}')
_QUOTED = re.compile(rb'"[^"]*"')
_OPENERS = frozenset(b"[{")
_NOT_OPENERS = bytes(range(256)).translate(None, b"[{")
# Past this many brackets the depth is summed by numpy (a loop over a 10 MB body of tiny objects took ~0.5 s
# of the event loop); below it the plain loop costs less than the import.
_VECTOR_FROM = 4096


def json_too_deep(raw: bytes, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether arrays and objects in `raw` nest deeper than `limit` (an unterminated string counts its brackets)."""
    if raw.count(b"[") + raw.count(b"{") <= limit:  # the usual body: no scan at all
        return False
    brackets = _outside_strings(raw).translate(None, _NOT_BRACKETS)
    if len(brackets) <= limit:
        return False
    if len(brackets) >= _VECTOR_FROM:
        return _deepest(brackets) > limit
    depth = 0
    for byte in brackets:
        if byte in _OPENERS:
            depth += 1
            if depth > limit:
                return True
        else:
            depth -= 1
    return False


def json_containers(raw: bytes, limit: int) -> int:
    """How many objects and arrays `raw` holds (the `{` and `[` outside strings), counted no further than needed to
    tell whether it is past `limit`: a body can be refused for its size before json.loads spends ~25 ms a MB."""
    upper = raw.count(b"[") + raw.count(b"{")
    if upper <= limit:
        return upper
    return len(_outside_strings(raw).translate(None, _NOT_OPENERS))


def _outside_strings(raw: bytes) -> bytes:
    """The brackets and quotes of `raw` that are not inside a JSON string, in C-speed passes: a regex over every
    string cost ~1 µs a string (seconds for a 10 MB body of tiny objects). Escaped backslashes, then escaped
    quotes, are dropped (JSON reads escapes left to right); what is left of each string is its brackets between
    two quotes, and two adjacent quotes (an empty remainder, or one string's end and the next one's start) can
    be dropped without moving any bracket in or out of a string. The few strings that hold brackets remain."""
    if b'"' not in raw:
        return raw
    if b"\\" in raw:
        raw = raw.replace(b"\\\\", b"").replace(b'\\"', b"")
    kept = raw.translate(None, _NOT_QUOTES_OR_BRACKETS).replace(b'""', b"")
    return _QUOTED.sub(b"", kept) if b'"' in kept else kept


def _deepest(brackets: bytes) -> int:
    import numpy as np  # start-up cost: only a body with thousands of brackets needs it

    steps = np.frombuffer(brackets, dtype=np.uint8)
    opens = (steps == ord("[")) | (steps == ord("{"))
    return int(np.cumsum(opens.astype(np.int64) * 2 - 1).max())


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
