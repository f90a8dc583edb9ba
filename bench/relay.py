"""A floor for a Python gateway on this machine: the least a relay can do, with no framework, no
authentication and no parsing (aiohttp server and client, the upstream's bytes passed on as they come).

    python bench/compat.py --serve-upstream --tokens 100 --pace-ms 20 &     # prints UPSTREAM
    python bench/relay.py UPSTREAM 4100 &
    python bench/compat.py --target http://127.0.0.1:4100/v1 --upstream UPSTREAM --server-pid <relay pid> \\
        --only latency --requests 40

What it adds (first token, CPU per streamed event) is what any Python gateway pays on the machine before it
does anything of its own; bench/RESULTS.md compares agentsite with it. bench/relay_daphne.py is the same relay
under daphne, as agentsite's workers serve; `bench/compat.py --floor` runs both beside agentsite.
"""

from __future__ import annotations

import sys

import aiohttp
from aiohttp import web


async def chat(request: web.Request) -> web.StreamResponse:
    session: aiohttp.ClientSession = request.app["session"]
    async with session.post(f"{request.app['upstream']}/chat/completions", data=await request.read(),
                            headers={"Content-Type": "application/json"}) as upstream:
        if "text/event-stream" not in upstream.headers.get("Content-Type", ""):
            return web.Response(body=await upstream.read(), status=upstream.status, content_type="application/json")
        response = web.StreamResponse(status=upstream.status, headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)  # the status and headers as soon as the upstream answers
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})


async def _session(app: web.Application):
    app["session"] = aiohttp.ClientSession()
    yield
    await app["session"].close()


def main() -> None:
    upstream, port = sys.argv[1].rstrip("/"), int(sys.argv[2])
    app = web.Application()
    app["upstream"] = upstream
    app.cleanup_ctx.append(_session)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    web.run_app(app, host="127.0.0.1", port=port, access_log=None, print=None)


if __name__ == "__main__":
    main()
