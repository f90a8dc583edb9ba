"""/v1: every door's routes (compat.doors), each view documented by its schema-only view (`cls`)."""

from django.urls import path

from compat.doors import routes


def _documented(route):
    route.view.cls, route.view.initkwargs = route.schema, {}  # drf-spectacular reads a view's `cls`
    return route.view


urlpatterns = [path(route.path, _documented(route), name=route.name) for route in routes()]
