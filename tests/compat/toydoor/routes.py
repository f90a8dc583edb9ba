"""The toy door's routes (compat.doors)."""

from agentsite.core.errors import ErrorShape
from compat.doors import Route
from tests.compat.toydoor import render, schema, views

ROUTES = [Route("toy/say", views.say, "v1-toy-say", schema.ToySaySchema)]
# What is refused before the view (the body gate, a body over the limit) in the toy shape too.
ERROR_SHAPE = ErrorShape("/v1/toy", render.error_body, schema.ToyErrorSerializer)
