"""The first-run config and its connection `default`, made when a process first reads the config.

Apart from the services so that the config cache (catalogue.selectors) can make them without importing the
writes that themselves read the catalogue.
"""

from __future__ import annotations

import os
from typing import Any

from django.db import IntegrityError, transaction

from catalogue.models import AgentConfig, Connection

DEFAULT_CONNECTION_NAME = "default"


def config_create_default() -> AgentConfig:
    """The first-run config and its connection `default`: a provider key in the environment picks that
    provider."""
    config = AgentConfig.objects.filter(pk=1).first()
    if config is not None:
        return config
    defaults: dict[str, Any] = {"provider": "offline"}
    if os.environ.get("OPENAI_API_KEY"):
        defaults = {"provider": "openai", "api_key": os.environ["OPENAI_API_KEY"]}
    elif os.environ.get("ANTHROPIC_API_KEY"):
        defaults = {"provider": "anthropic", "api_key": os.environ["ANTHROPIC_API_KEY"]}
    try:
        with transaction.atomic():
            connection = Connection.objects.filter(name=DEFAULT_CONNECTION_NAME).first()
            if connection is None:
                connection = Connection.objects.create(name=DEFAULT_CONNECTION_NAME, **defaults)
            config, _ = AgentConfig.objects.get_or_create(pk=1, defaults={"connection": connection})
    except IntegrityError:
        # Another process or thread made them first (scheduled runs starting together on a new server do): it
        # made both in one transaction, so its config is there once its connection is; theirs stands.
        config = AgentConfig.objects.get(pk=1)
    return config
