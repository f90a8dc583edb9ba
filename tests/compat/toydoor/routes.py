"""The toy door's routes (compat.doors)."""

from compat.doors import Route
from tests.compat.toydoor import schema, views

ROUTES = [Route("toy/say", views.say, "v1-toy-say", schema.ToySaySchema)]
