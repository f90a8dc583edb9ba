"""Writes of the catalogue: the config singleton, connections (with their model discovery) and aliases. The
views check who may call them (administrators, but for the config's reads)."""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction
from django.utils import timezone

from agentsite.agent import configfields
from agentsite.agent.providers import PROVIDERS
from agentsite.agent.routing import STRATEGIES
from agentsite.core.errors import AppError
from catalogue.defaults import DEFAULT_CONNECTION_NAME, config_create_default
from catalogue.models import AgentConfig, Connection, ModelAlias
from catalogue.selectors import catalogue_of_rows

logger = logging.getLogger(__name__)


# --- config -----------------------------------------------------------------------------------------

# What PATCH /api/config accepts: the fields the form describes (agentsite/agent/configfields.py), of which
# those describing the connection edit the config's connection.
CONFIG_FIELDS = tuple(spec.name for spec in configfields.CONFIG_FIELDS)
CONNECTION_CONFIG_FIELDS = tuple(spec.name for spec in configfields.CONFIG_FIELDS if spec.connection)


@transaction.atomic
def config_update(*, changes: dict[str, Any]) -> AgentConfig:
    """Apply validated changes to the singleton. Unknown fields must be rejected before this call.

    `provider`, `base_url` and `api_key` edit the config's connection (made, named `default`, if it has none);
    a bare `model` that connection does not list yet is added to its list (replacing the config's previous bare
    model), so `PATCH /api/config {"model": ...}` keeps working as it did before connections. A model that
    names no alias or catalogue entry is refused (400 `invalid`)."""
    provider_check(changes)
    config_create_default()
    config = AgentConfig.objects.select_for_update().get(pk=1)  # no join: PostgreSQL locks no outer join
    connection_changes = {name: changes.pop(name) for name in CONNECTION_CONFIG_FIELDS if name in changes}
    connection = config.connection
    if connection_changes or ("model" in changes and connection is None):
        if connection is None:
            connection = Connection(name=_free_connection_name(DEFAULT_CONNECTION_NAME), provider="offline")
        for name, value in connection_changes.items():
            setattr(connection, name, value)
        connection.save()
        config.connection = connection
    model = changes.get("model")
    if model and connection is not None and not connection.discovers and "/" not in model \
            and not ModelAlias.objects.filter(name=model).exists():
        names = [str(name) for name in connection.models or []]
        if model not in names:
            if config.model in names and "/" not in config.model:
                names[names.index(config.model)] = model
            else:
                names.append(model)
            connection.models = names
            connection.save(update_fields=["models", "updated_at"])
    for name, value in changes.items():
        setattr(config, name, value)
    config.save()
    if model:
        _check_model(model, field="model")
    logger.info("Config updated: %s", ", ".join(sorted([*changes, *connection_changes])))  # names only: secrets
    return config


def provider_check(data: dict[str, Any]) -> None:
    """Raises 400 `invalid` naming the field when `data` names a provider the registry lacks
    (agentsite.agent.providers.PROVIDERS: the one list of providers)."""
    if "provider" in data and data["provider"] not in PROVIDERS:
        message = f"provider: {data['provider']!r} is not one of {', '.join(PROVIDERS)}."
        raise AppError("invalid", message, 400, {"provider": [message]})


def _free_connection_name(name: str) -> str:
    candidate, number = name, 1
    while Connection.objects.filter(name=candidate).exists():
        number += 1
        candidate = f"{name}-{number}"
    return candidate


def catalogue_now():
    """The catalogue as the rows stand now (inside a transaction: before the cache sees them)."""
    config = AgentConfig.objects.filter(pk=1).first() or AgentConfig(pk=1)
    return catalogue_of_rows(config, list(Connection.objects.all()), list(ModelAlias.objects.all()))


def _check_model(name: str, *, field: str) -> None:
    try:
        catalogue_now().resolve(name)
    except AppError as exc:
        raise AppError("invalid", f"{field}: {exc.message}", 400, {field: [exc.message]}) from None


# --- connections and aliases (admin only: the views check) -------------------------------------------------

def connection_create(*, data: dict[str, Any]) -> Connection:
    """Create a connection from validated data; "discover" models are read from the upstream at once (a failure
    is stored on the connection, never raised). Raises 409 `conflict` for a taken name."""
    provider_check(data)
    if Connection.objects.filter(name=data["name"]).exists():
        raise AppError("conflict", f"A connection named {data['name']!r} exists.", 409,
                       {"name": ["That name is taken."]})
    try:
        with transaction.atomic():
            connection = Connection.objects.create(**data)
    except IntegrityError as exc:
        raise AppError("conflict", f"A connection named {data['name']!r} exists.", 409,
                       {"name": ["That name is taken."]}) from exc
    if connection.discovers:
        connection_discover(connection=connection)
    return connection


def connection_update(*, connection: Connection, changes: dict[str, Any]) -> Connection:
    provider_check(changes)
    name = changes.get("name")
    if name and name != connection.name and Connection.objects.filter(name=name).exists():
        raise AppError("conflict", f"A connection named {name!r} exists.", 409, {"name": ["That name is taken."]})
    if "headers" in changes and changes["headers"] is not None:
        changes["headers"] = _headers_merged(connection.headers or {}, changes["headers"])
    for field_name, value in changes.items():
        setattr(connection, field_name, value)
    connection.save()
    if connection.discovers and ({"models", "base_url", "api_key", "provider", "headers"} & set(changes)):
        connection_discover(connection=connection)
    return connection


def _headers_merged(old: dict[str, str], new: dict[str, str | None]) -> dict[str, str]:
    """Header values are write-only: a PATCH sends the headers to set; null removes one; the others stay."""
    merged = dict(old)
    for name, value in new.items():
        if value is None:
            merged.pop(name, None)
        else:
            merged[name] = value
    return merged


def connection_delete(*, connection: Connection) -> None:
    connection.delete()


def connection_discover(*, connection: Connection) -> Connection:
    """Read the upstream's model list (GET /models for openai, /v1/models for anthropic) into `discovered`; a
    failure goes into `discovery_error` with the upstream's words. Never raises for the upstream's sake."""
    provider_class = PROVIDERS.get(connection.provider)
    try:
        if provider_class is None:
            raise AppError("invalid", f"The provider {connection.provider!r} is unknown.", 400)
        provider = provider_class(base_url=connection.base_url, api_key=connection.api_key,
                                  timeout=min(connection.timeout_s, DISCOVERY_TIMEOUT_S),
                                  headers=dict(connection.headers or {}))
        names = async_to_sync(provider.list_models)()
        connection.discovered, connection.discovery_error = names, ""
    except AppError as exc:
        connection.discovery_error = exc.message
    except Exception as exc:  # a boundary: a discovery failure is shown on the connection, never a 500
        logger.exception("Discovery of the connection %s failed", connection.name)
        connection.discovery_error = f"Discovery failed: {type(exc).__name__}."
    connection.discovered_at = timezone.now()
    connection.save(update_fields=["discovered", "discovery_error", "discovered_at", "updated_at"])
    return connection


DISCOVERY_TIMEOUT_S = 30.0
RESERVED_MODEL_NAMES = ("agent", "hash-256")


def alias_check(*, name: str, strategy: str, targets: list[dict[str, Any]]) -> None:
    """Raises 400 `invalid` naming the field: a reserved name, an unknown strategy, a target that is not a
    `<connection>/<model>` the catalogue holds (disabled connections count: their aliases come back with them)."""
    if name in RESERVED_MODEL_NAMES or name.startswith("workflow:"):
        raise AppError("invalid", f"name: {name!r} is a built-in model's name.", 400, {"name": ["Reserved."]})
    if strategy not in STRATEGIES:
        raise AppError("invalid", f"strategy: one of {', '.join(STRATEGIES)}.", 400, {"strategy": ["Unknown."]})
    connections = {row.name: row for row in Connection.objects.all()}
    for index, target in enumerate(targets):
        model = target["model"]
        connection_name, slash, model_name = model.partition("/")
        connection = connections.get(connection_name) if slash else None
        if connection is None or not model_name or not (connection.discovers or model_name in connection.model_names()):
            message = (f"targets[{index}].model: {model!r} is not a catalogue entry (`<connection>/<model>` of a "
                       "connection that lists it).")
            raise AppError("invalid", message, 400, {f"targets[{index}].model": [message]})
    if strategy != "fallback" and not any(float(target.get("weight", 1)) > 0 for target in targets):
        raise AppError("invalid", "targets: at least one weight must be above 0.", 400, {"targets": ["All zero."]})


def alias_create(*, data: dict[str, Any]) -> ModelAlias:
    alias_check(name=data["name"], strategy=data.get("strategy", "fallback"), targets=data["targets"])
    if ModelAlias.objects.filter(name=data["name"]).exists():
        raise AppError("conflict", f"An alias named {data['name']!r} exists.", 409, {"name": ["That name is taken."]})
    try:
        with transaction.atomic():
            return ModelAlias.objects.create(**data)
    except IntegrityError as exc:
        raise AppError("conflict", f"An alias named {data['name']!r} exists.", 409,
                       {"name": ["That name is taken."]}) from exc


def alias_update(*, alias: ModelAlias, changes: dict[str, Any]) -> ModelAlias:
    name = changes.get("name", alias.name)
    alias_check(name=name, strategy=changes.get("strategy", alias.strategy), targets=changes.get("targets",
                                                                                               alias.targets))
    if name != alias.name and ModelAlias.objects.filter(name=name).exists():
        raise AppError("conflict", f"An alias named {name!r} exists.", 409, {"name": ["That name is taken."]})
    for field_name, value in changes.items():
        setattr(alias, field_name, value)
    alias.save()
    return alias


def alias_delete(*, alias: ModelAlias) -> None:
    alias.delete()
