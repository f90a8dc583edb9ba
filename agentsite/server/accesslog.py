"""daphne's access log, without the credentials a query carries, and as JSON lines (AGENTSITE_LOG_FORMAT=json).

An OAuth callback's query holds an authorization code and its state: `install_access_log_masking` logs their
values as `***` (the single sign-on callback and the remote MCP servers' one). daphne writes its access log (one
line per request, on stdout at its default verbosity) through an AccessLogGenerator that sees the method, path,
status and size but not the response. Under JSON logs the
generator is replaced by one that writes a JSON object per request with the response's `X-Request-Id`: the
request's WebRequest is noted while daphne finishes it (Twisted runs one thing at a time in a process, so a
module variable is exact)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

_finishing: list[Any] = [None]
# The paths whose query values are credentials (an authorization code, its state).
MASKED_QUERY_PATHS = ("/api/auth/oidc/callback", "/api/mcp/oauth/callback")


def masked_path(path: str) -> str:
    """The request path for the log: a callback's query values replaced by `***`, anything else as is."""
    base, separator, query = path.partition("?")
    if not separator or base.rstrip("/") not in MASKED_QUERY_PATHS:
        return path
    return base + "?" + "&".join(f"{part.partition('=')[0]}=***" for part in query.split("&"))


def install_access_log_masking() -> None:
    """Every access log entry's path through `masked_path` (under daphne, whatever the log format)."""
    from daphne import access  # only under daphne, as install_json_access_log

    # The class's own mark, not an inherited one: a subclass of a masked generator that replaces __call__ (the
    # JSON writer) is not masked.
    if access.AccessLogGenerator.__dict__.get("_agentsite_masked", False):
        return
    original = access.AccessLogGenerator.__call__

    def call(self, protocol, action, details):
        if "path" in details:
            details = {**details, "path": masked_path(str(details["path"]))}
        return original(self, protocol, action, details)

    access.AccessLogGenerator.__call__ = call
    access.AccessLogGenerator._agentsite_masked = True


def install_json_access_log() -> None:
    # Only under daphne: patched when its server starts, not by every process that imports the server package.
    from daphne import access, http_protocol

    if access.AccessLogGenerator.__dict__.get("_agentsite_json", False):
        return
    original_reply = http_protocol.WebRequest.handle_reply

    def handle_reply(self, message):
        _finishing[0] = self
        try:
            return original_reply(self, message)
        finally:
            _finishing[0] = None

    def call(self, protocol, action, details):
        request = _finishing[0]
        request_id = None
        if request is not None:
            values = request.responseHeaders.getRawHeaders(b"x-request-id")
            request_id = values[0].decode("latin-1") if values else None
        entry = {"time": datetime.now(UTC).isoformat(timespec="milliseconds"), "level": "INFO",
                 "logger": "daphne.access", "message": f"{protocol} {action}", "request_id": request_id,
                 "protocol": protocol, "action": action,
                 **{key: details.get(key) for key in ("method", "path", "status", "size", "client", "time_taken")
                    if key in details}}
        self.stream.write(json.dumps(entry, default=str) + "\n")

    http_protocol.WebRequest.handle_reply = handle_reply
    access.AccessLogGenerator.__call__ = call
    access.AccessLogGenerator._agentsite_json = True


