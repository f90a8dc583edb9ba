"""Reads of the catalogue: the config singleton and the agent settings built from it, cached per process,
and the connections and aliases by id."""

from __future__ import annotations

import threading
import time

from agentsite.agent import routing
from agentsite.agent.config import AgentSettings
from agentsite.core import invalidation
from agentsite.core.errors import AppError
from catalogue.defaults import config_create_default
from catalogue.models import AgentConfig, Connection, ModelAlias

# The config is read on every chat turn and every /v1 request; a per-process copy avoids a query and a
# database thread each time. A save anywhere drops it at once in this process and, through the invalidation
# channel (agentsite.core.invalidation: Redis, or the host's on SQLite), in every other; a process with no channel
# (PostgreSQL without Redis) picks a change up within CONFIG_TTL_S, and one with a channel keeps its copy for
# invalidation.ttl() (a minute), which only a change no signal announces waits for. A load that raced a drop
# is not kept (the generation counter).
CONFIG_TTL_S = 2.0
TOPIC = "config"
# (config, settings, loaded at): replaced whole, so a reader on the event loop needs no lock.
_entry: tuple[object, object, float] | None = None
_lock = threading.Lock()
_generation = 0


def config_get() -> AgentConfig:
    """The config singleton, created with first-run defaults when missing."""
    return _cached()[0]  # type: ignore[return-value]


def config_peek() -> AgentConfig | None:
    """The cached config while it is fresh, else None: no database access (safe on the event loop)."""
    entry = _fresh()
    return entry[0] if entry else None  # type: ignore[return-value]


def settings_peek():
    """The agent settings built from the cached config while it is fresh, else None (no database access)."""
    entry = _fresh()
    return entry[1] if entry else None


def settings_get():
    return _cached()[1]


def _fresh() -> tuple[object, object] | None:
    entry = _entry
    if entry is not None and time.monotonic() - entry[2] < invalidation.ttl(CONFIG_TTL_S):
        return entry[0], entry[1]
    return None


def _cached() -> tuple[object, object]:
    global _entry
    entry = _fresh()
    if entry is not None:
        return entry
    invalidation.listen()
    with _lock:
        generation = _generation
    config = AgentConfig.objects.select_related("connection").filter(pk=1).first()
    if config is None:
        config = config_create_default()
    # The catalogue rides with the settings: resolving a model costs no query (agentsite.agent.routing).
    settings = _settings_of(config, list(Connection.objects.all()), list(ModelAlias.objects.all()))
    with _lock:
        if generation == _generation:
            _entry = (config, settings, time.monotonic())
    return config, settings


def _settings_of(config: AgentConfig, connections: list[Connection], aliases: list[ModelAlias]):
    default = config.connection
    return AgentSettings(
        provider=default.provider if default else "offline", base_url=default.base_url if default else "",
        api_key=default.api_key if default else "", model=config.model,
        system_prompt=config.system_prompt, temperature=config.temperature, max_tokens=config.max_tokens,
        tools=tuple(config.tools or ()), kb_enabled=config.kb_enabled, kb_top_k=config.kb_top_k,
        kb_max_chars=config.kb_max_chars, catalogue=catalogue_of_rows(config, connections, aliases),
    )


def catalogue_of_rows(config: AgentConfig, connections: list[Connection], aliases: list[ModelAlias]):
    """The runtime's Catalogue (agentsite.agent.routing) made of the rows."""
    runtime_connections = [
        routing.Connection(
            name=row.name, provider=row.provider, base_url=row.base_url, api_key=row.api_key,
            headers=tuple(sorted((str(k), str(v)) for k, v in (row.headers or {}).items())),
            timeout_s=row.timeout_s, enabled=row.enabled, models=tuple(row.model_names()), discover=row.discovers,
            error=row.discovery_error, passthrough=row.passthrough)
        for row in connections]
    runtime_aliases = [
        routing.Alias(row.name, row.strategy, tuple(routing.AliasTarget(str(t.get("model", "")),
                                                                        float(t.get("weight", 1) or 0))
                                                    for t in row.targets or [] if isinstance(t, dict)),
                      fallback_on=frozenset(int(s) for s in row.fallback_on or [] if isinstance(s, int)))
        for row in aliases]
    default = next((row.name for row in connections if row.pk == config.connection_id), "")
    return routing.Catalogue(runtime_connections, runtime_aliases, default_connection=default,
                             default_model=config.model)


def connection_list() -> list[Connection]:
    return list(Connection.objects.all())


def _pk(value: int | str) -> int | None:
    """A path's id as a primary key (None when it is not one: the object is then not found, after auth)."""
    text = str(value)
    return int(text) if text.isascii() and text.isdigit() and len(text) < 19 else None


def connection_get(*, connection_id: int | str) -> Connection:
    connection = Connection.objects.filter(pk=_pk(connection_id)).first() if _pk(connection_id) else None
    if connection is None:
        raise AppError("not_found", "No connection with that id.", 404)
    return connection


def alias_list() -> list[ModelAlias]:
    return list(ModelAlias.objects.all())


def alias_get(*, alias_id: int | str) -> ModelAlias:
    alias = ModelAlias.objects.filter(pk=_pk(alias_id)).first() if _pk(alias_id) else None
    if alias is None:
        raise AppError("not_found", "No alias with that id.", 404)
    return alias


def config_cache_clear(key: str | None = None) -> None:
    """Drop the cached config (the `config` topic's subscriber; `key` is ignored: there is one row)."""
    global _generation, _entry
    with _lock:
        _generation += 1
        _entry = None
