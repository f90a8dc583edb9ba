"""How much one /v1 request may hold (docs/api.md, "Limits of one /v1 request"), and the parsed body held to it.

Validating a request model costs time per object on the event loop, and a legal body of tiny messages holds
enough of them to keep the worker from answering anything else. The counts here are taken first, in the time
of a `len()` (or a walk that stops at the limit), so that validation is bounded. The invariant: every door's
body goes through `parsed_body` before its request model sees it.
"""

from __future__ import annotations

import json
import re
from typing import Any

from django.http import HttpRequest

from agentsite.core.errors import AppError
from agentsite.core.jsonbody import json_containers
from agentsite.core.validation import json_object_body
from compat.chat.wire import MAX_EMBEDDING_INPUTS

MAX_MESSAGES = 2048  # `messages` (chat completions, messages, count_tokens) or `input` items (responses)
MAX_TOOLS = 128
MAX_OBJECTS = 16384  # JSON objects and arrays in the whole body, counted on the raw bytes before parsing

# A lone surrogate can only come from a `\uD800`-`\uDFFF` escape, or from its UTF-8 form (json.loads decodes bytes
# with surrogatepass): a body without either needs no encoding check (a json.dumps of the whole body, slow for
# 10 MB).
_MAYBE_SURROGATE = re.compile(rb"\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")


def parsed_body(request: HttpRequest, *, items: str | None, embeddings: bool = False) -> dict[str, Any]:
    """The request's JSON object body, held to this module's limits (`items`: the field that lists the messages,
    or the embedding inputs); raises AppError 415/400 (json_object_body), 400 `invalid_value` past a limit (naming
    the field for a count)."""
    if request.content_type == "application/json" and json_containers(request.body, MAX_OBJECTS) > MAX_OBJECTS:
        # Counted on the raw bytes: a body of too many tiny objects is refused before it is parsed at all.
        raise AppError("invalid_value", f"The body holds more than {MAX_OBJECTS} JSON objects and arrays, this "
                       "server's limit for one request.", 400)
    body = json_object_body(request)
    limit, what = (MAX_EMBEDDING_INPUTS, "items") if embeddings else (MAX_MESSAGES, "messages")
    if items is not None:
        _at_most(body, items, limit, what)
    _at_most(body, "tools", MAX_TOOLS, "tools")
    if _MAYBE_SURROGATE.search(request.body):
        _require_encodable(body)
    return body


def _at_most(body: dict[str, Any], field: str, limit: int, what: str) -> None:
    listed = body.get(field)
    if isinstance(listed, list) and len(listed) > limit:
        message = f"at most {limit} {what} in one request (this server's limit), not {len(listed)}."
        raise AppError("invalid_value", f"{field}: {message}", 400, {field: [message]})


def _require_encodable(body: dict[str, Any]) -> None:
    try:
        json.dumps(body, ensure_ascii=False).encode()
    except UnicodeEncodeError as exc:  # a lone surrogate escape (\ud800): no upstream could encode it
        raise AppError("invalid_value", "The body holds text that is not valid Unicode (a lone surrogate).",
                       400) from exc
