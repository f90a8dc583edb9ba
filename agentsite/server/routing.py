"""Which ASGI app serves which path. Facets mount extra ASGI apps by adding to agentsite.core.mounts.MOUNTS."""

from __future__ import annotations

from channels.routing import ProtocolTypeRouter

from agentsite.core import logs
from agentsite.core.mounts import MOUNTS


async def _with_request_id(app, scope, receive, send):
    """A mounted app (/mcp) outside Django's middleware: the request id as RequestObservedMiddleware sets it
    (the context variable while it runs, X-Request-Id on its response)."""
    offered = next((value.decode("latin-1") for name, value in scope.get("headers", ())
                    if name == b"x-request-id"), None)
    request_id = logs.request_id_for(offered)
    header = (b"x-request-id", request_id.encode())

    async def send_with_id(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", ()), header]}
        await send(message)

    token = logs.REQUEST_ID.set(request_id)
    try:
        return await app(scope, receive, send_with_id)
    finally:
        logs.REQUEST_ID.reset(token)


def build_application(django_app):
    def http_router():
        # A mount's app is built on its first request (the MCP server and its SDK are ~50 MiB of memory that a
        # process serving no MCP client never needs). Building runs on the event loop, so it happens once.
        mounted: list[list] = [[prefix, factory, None] for prefix, factory in MOUNTS]

        async def route(scope, receive, send):
            path = scope.get("path", "")
            for mount in mounted:
                prefix = mount[0]
                if path == prefix or path.startswith(prefix + "/"):
                    if mount[2] is None:
                        mount[2] = mount[1]()
                    return await _with_request_id(mount[2], scope, receive, send)
            return await django_app(scope, receive, send)

        return route

    return ProtocolTypeRouter({"http": http_router()})
