"""daphne's access log as JSON lines (AGENTSITE_LOG_FORMAT=json).

daphne writes its access log (one line per request, on stdout at its default verbosity) through an
AccessLogGenerator that sees the method, path, status and size but not the response. Under JSON logs the
generator is replaced by one that writes a JSON object per request with the response's `X-Request-Id`: the
request's WebRequest is noted while daphne finishes it (Twisted runs one thing at a time in a process, so a
module variable is exact)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

_finishing: list[Any] = [None]


def install_json_access_log() -> None:
    # Only under daphne: patched when its server starts, not by every process that imports the server package.
    from daphne import access, http_protocol

    if getattr(access.AccessLogGenerator, "_agentsite_json", False):
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


