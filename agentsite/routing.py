"""Which ASGI app serves which path. Facets mount extra ASGI apps by adding to agentsite.core.mounts.MOUNTS."""

from __future__ import annotations

from agentsite.core.mounts import MOUNTS


def build_application(django_app):
    from channels.routing import ProtocolTypeRouter

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
                    return await mount[2](scope, receive, send)
            return await django_app(scope, receive, send)

        return route

    return ProtocolTypeRouter({"http": http_router()})
