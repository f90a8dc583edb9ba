"""Which ASGI app serves which path. Facets mount extra ASGI apps by adding to MOUNTS."""

from __future__ import annotations

from collections.abc import Callable

# (path prefix, factory returning an ASGI app); filled in by AppConfig.ready() of a facet.
MOUNTS: list[tuple[str, Callable]] = []


def build_application(django_app):
    from channels.routing import ProtocolTypeRouter

    def http_router():
        mounted = [(prefix, factory()) for prefix, factory in MOUNTS]

        async def route(scope, receive, send):
            path = scope.get("path", "")
            for prefix, app in mounted:
                if path == prefix or path.startswith(prefix + "/"):
                    return await app(scope, receive, send)
            return await django_app(scope, receive, send)

        return route

    return ProtocolTypeRouter({"http": http_router()})
