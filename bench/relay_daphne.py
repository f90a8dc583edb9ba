"""The floor for agentsite's own server: bench/relay.py's relay as a bare ASGI app (no Django, no
authentication, no parsing) served by daphne exactly as agentsite's workers run it
(agentsite.server.daphne_worker: uvloop under Twisted's asyncio reactor, one accept per wake-up).

    python bench/compat.py --serve-upstream --tokens 100 --pace-ms 10 &     # prints UPSTREAM
    python bench/relay_daphne.py UPSTREAM 4101 &
    python bench/compat.py --floor ...                                       # starts all of this itself

Its upstream client is aiohttp, as relay.py's. What it adds over the upstream is what daphne and Twisted cost
before agentsite does anything of its own; bench/compat.py --floor measures it beside relay.py and agentsite.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import aiohttp

UPSTREAM_ENV = "RELAY_DAPHNE_UPSTREAM"  # daphne imports this file again under its own name: the upstream's URL
_upstream = os.environ.get(UPSTREAM_ENV, "")
_session: aiohttp.ClientSession | None = None
MODELS = b'{"object": "list", "data": [{"id": "fake-model", "object": "model"}]}'


async def _read_body(receive) -> bytes:
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return body
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


async def application(scope, receive, send) -> None:
    global _session
    if scope["type"] != "http":
        return
    if scope["path"] == "/v1/models":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": MODELS})
        return
    if scope["path"] != "/v1/chat/completions" or scope["method"] != "POST":
        await send({"type": "http.response.start", "status": 404, "headers": []})
        await send({"type": "http.response.body", "body": b""})
        return
    body = await _read_body(receive)
    if _session is None:  # made on the loop daphne runs
        _session = aiohttp.ClientSession()
    async with _session.post(f"{_upstream}/chat/completions", data=body,
                             headers={"Content-Type": "application/json"}) as upstream:
        if "text/event-stream" not in upstream.headers.get("Content-Type", ""):
            content = await upstream.read()
            await send({"type": "http.response.start", "status": upstream.status,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": content})
            return
        # the status and headers as soon as the upstream answers, then its bytes as they come
        await send({"type": "http.response.start", "status": upstream.status,
                    "headers": [(b"content-type", b"text/event-stream")]})
        async for chunk in upstream.content.iter_any():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})


def main() -> None:
    os.environ[UPSTREAM_ENV], port = sys.argv[1].rstrip("/"), sys.argv[2]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from agentsite.server import daphne_worker

    daphne_worker.main(["-b", "127.0.0.1", "-p", port, "relay_daphne:application"])


if __name__ == "__main__":
    main()
