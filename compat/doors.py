"""The registry of /v1 doors: one package per dialect, each listing its routes in `<package>/routes.py`.

Adding a dialect is a new package under compat/ (wire, translate, render, views, schema, routes) and its name
here; compat/urls.py serves every door's routes and documents each through its schema-only view.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import import_module
from typing import Any

from agentsite.core.errors import ErrorShape, register_error_shape

DOORS = (
    "compat.chat",  # OpenAI: /v1/models, /v1/chat/completions, /v1/embeddings
    "compat.responses",  # OpenAI's Responses API: /v1/responses
    "compat.messages",  # Anthropic's Messages API: /v1/messages
)


@dataclass(frozen=True)
class Route:
    """A door's route under /v1/: its path (Django's syntax), its async view, its URL name and the schema-only
    view that documents it in /api/schema."""

    path: str
    view: Any
    name: str
    schema: type


def routes() -> list[Route]:
    """Every door's routes, in the registry's order."""
    return [route for door in DOORS for route in import_module(f"{door}.routes").ROUTES]


def install_error_shapes() -> None:
    """Register every door's error shape with the kernel (compat/apps.py, at start-up)."""
    for shape in error_shapes():
        register_error_shape(shape)


def error_shapes() -> list[ErrorShape]:
    """The error shapes the doors declare (`ERROR_SHAPE` in `<package>/routes.py`; a door without one answers
    in the shape of the longest registered prefix of its paths, OpenAI's under /v1)."""
    modules = [import_module(f"{door}.routes") for door in DOORS]
    return [module.ERROR_SHAPE for module in modules if getattr(module, "ERROR_SHAPE", None) is not None]
