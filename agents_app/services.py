"""Writes of agents: create, change, delete, restore a version; each save makes the next version.

The views check who may call them (organisation.policy); these check what is stored. Every check names the field
it refuses (400 `invalid`, details by field: `tools.2`, `knowledge.0`), and a taken slug is 409 `conflict`. The
agent `default` is the deployment's: it cannot be deleted or handed over, and its agent fields are mirrored into
the config (/api/config reads and writes them), both ways, in the same transaction.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from asgiref.sync import async_to_sync
from django.db import IntegrityError, transaction
from django.db.models import Q

from agents_app.models import DEFAULT_SLUG, MAX_STARTERS, VERSIONED_FIELDS, Agent, AgentVersion
from agentsite.agent.agents import WORKFLOW_PREFIX, function_name, is_agent_model
from agentsite.agent.configfields import CONFIG_FIELDS
from agentsite.agent.tools import ToolContext, registry
from agentsite.core.errors import AppError
from catalogue.defaults import config_create_default
from catalogue.models import AgentConfig
from catalogue.selectors import config_get
from catalogue.services import catalogue_now
from knowledge.models import Collection
from organisation.models import EVERYONE
from organisation.policy import owner_reads_q, visible_q

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

logger = logging.getLogger(__name__)

TOPIC = "agents"  # announced (agents_app.apps) after any agent or grant is saved or deleted
MAX_TOOLS = 100
MAX_KNOWLEDGE = 50  # as many as one knowledge search names
MAX_STARTER_CHARS = 500
MAX_INSTRUCTIONS = 20_000  # as the config's system prompt

# The config's fields that are the default agent's (config field -> agent field): those of the config's form
# (agentsite.agent.configfields) that a version of the agent keeps, under the same name or the one named here.
AGENT_FIELD_OF = {"system_prompt": "instructions"}
CONFIG_MIRROR = {spec.name: AGENT_FIELD_OF.get(spec.name, spec.name) for spec in CONFIG_FIELDS
                 if AGENT_FIELD_OF.get(spec.name, spec.name) in VERSIONED_FIELDS}


_MIRRORING: ContextVar[bool] = ContextVar("agents_mirroring", default=False)


def _invalid(field: str, message: str) -> AppError:
    return AppError("invalid", f"{field}: {message}", 400, {field: [message]})


# --- checks (each names the field) ----------------------------------------------------------------------------

def check_model(name: str) -> None:
    """An empty model is the deployment's default; otherwise an alias or a catalogue entry must answer to it. An
    agent or a workflow is no model an agent answers with (a connection that discovers its models would take
    any name)."""
    if not name:
        return
    if is_agent_model(name) or name.startswith(WORKFLOW_PREFIX):
        raise _invalid("model", f"{name!r} is an agent or a workflow, not a model: name an alias or "
                       "<connection>/<model> (GET /api/models), or leave it empty for the deployment's default.")
    try:
        catalogue_now().resolve(name)
    except AppError as exc:
        raise _invalid("model", exc.message) from None


def known_tool_names(owner: AbstractBaseUser | None) -> set[str]:
    """The function names of every tool the owner could be given (enabled or not; an MCP server they may use, a
    workflow they may run). The deployment's agent (no owner) is checked against what the admin who edits it
    sees (check_tools' `owner` is then that admin)."""
    ctx = ToolContext.for_user(owner) if owner is not None else ToolContext(None, False)
    return {tool.name for tool in async_to_sync(registry.list_tools)(ctx, enabled_only=False)}


def check_tools(tools: list[str], owner: AbstractBaseUser | None,
                known: Callable[[], set[str]] | None = None) -> list[str]:
    """The allowlist, each entry once: every entry but `*` must name a tool the owner may be given, else 400
    naming `tools.<i>`."""
    if len(tools) > MAX_TOOLS:
        raise _invalid("tools", f"At most {MAX_TOOLS} tools.")
    wanted = [entry for entry in tools if entry != "*"]
    names = (known or (lambda: known_tool_names(owner)))() if wanted else set()
    for index, entry in enumerate(tools):
        if entry != "*" and function_name(entry) not in names:
            raise _invalid(f"tools.{index}", f"No tool {entry!r} that the agent's owner may use: name a built-in or "
                           "plugin tool, <server>/<tool> of an MCP server, workflow:<name>, or * for every tool.")
    return list(dict.fromkeys(tools))


def check_knowledge(ids: list[str], reader: AbstractBaseUser | None, *, actor: AbstractBaseUser | None = None,
                    kept: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Collection ids the reader (the owner; the editing admin for the deployment's agent) may read, each once.
    A collection that is not among `kept` (the agent's own already) must be one the actor may read too: an
    editor cannot give the agent, and so their own chats with it, a collection of the owner's they may not read."""
    if len(ids) > MAX_KNOWLEDGE:
        raise _invalid("knowledge", f"At most {MAX_KNOWLEDGE} collections.")
    parsed: list[str] = []
    for index, value in enumerate(ids):
        try:
            parsed.append(str(uuid.UUID(str(value))))
        except ValueError:
            raise _invalid(f"knowledge.{index}", f"{value!r} is not a collection id.") from None
    # The reader's rights as the run reads them (owner_reads_q): an editor still saves a deactivated owner's agent.
    readable = _readable(parsed, owner_reads_q(reader.pk, Collection) if reader is not None else None)
    for index, value in enumerate(parsed):
        if value not in readable:
            raise _invalid(f"knowledge.{index}", f"No knowledge collection {value} that the agent's owner may read.")
    added = [value for value in parsed if value not in set(kept)]
    if actor is not None and actor != reader and added:
        theirs = _readable(added, visible_q(actor, Collection))
        for index, value in enumerate(parsed):
            if value in added and value not in theirs:
                raise _invalid(f"knowledge.{index}", f"No knowledge collection {value} that you may read: only "
                               "the owner can add it.")
    return list(dict.fromkeys(parsed))


def _readable(ids: list[str], rule: Q | None) -> set[str]:
    if rule is None or not ids:
        return set()
    rows = Collection.objects.filter(pk__in=ids).filter(rule)
    return {str(pk) for pk in rows.values_list("pk", flat=True)}


def check_starters(starters: list[str]) -> list[str]:
    """At most MAX_STARTERS, each 1 to MAX_STARTER_CHARS characters and not only spaces (400 naming
    `starters.<i>`)."""
    if len(starters) > MAX_STARTERS:
        raise _invalid("starters", f"At most {MAX_STARTERS} starters.")
    for index, text in enumerate(starters):
        if not text.strip() or len(text) > MAX_STARTER_CHARS:
            raise _invalid(f"starters.{index}", f"A starter is 1 to {MAX_STARTER_CHARS} characters.")
    return starters


def _checked(data: dict[str, Any], owner: AbstractBaseUser | None, actor: AbstractBaseUser | None,
             kept: list[str] | tuple[str, ...] = ()) -> dict[str, Any]:
    """The validated fields with the checks that need the database (the serializer checked types and bounds)."""
    if "model" in data:
        check_model(data["model"])
    # The deployment's agent (no owner) is checked with the rights of the admin who edits it.
    checker = owner if owner is not None else actor
    if "tools" in data:
        data["tools"] = check_tools(data["tools"], checker)
    if "knowledge" in data:
        data["knowledge"] = check_knowledge(data["knowledge"], checker, actor=actor, kept=kept)
    if "starters" in data:
        data["starters"] = check_starters(data["starters"])
    return data


# --- writes ---------------------------------------------------------------------------------------------------

def _version(agent: Agent, note: str, author: AbstractBaseUser | None) -> AgentVersion:
    """The next version of the agent (inside the caller's transaction). The row is locked and its number read
    again, so two saves at once make versions n+1 and n+2, never two n+1 (whose unique constraint would fail)."""
    latest = Agent.objects.select_for_update().filter(pk=agent.pk).values_list("version", flat=True).first()
    agent.version = (latest or 0) + 1
    Agent.objects.filter(pk=agent.pk).update(version=agent.version)
    return AgentVersion.objects.create(agent=agent, number=agent.version, data=agent.fields(), note=note,
                                       author=author if author is not None and author.is_authenticated else None)


def agent_create(*, owner: AbstractBaseUser, data: dict[str, Any]) -> Agent:
    """A new agent of `owner`, version 1. 409 `conflict` when the slug is taken."""
    data = _checked(dict(data), owner, owner)
    if Agent.objects.filter(slug=data["slug"]).exists():
        raise _taken(data["slug"])
    try:
        with transaction.atomic():
            agent = Agent.objects.create(owner=owner, **data)
            _version(agent, "create", owner)
    except IntegrityError:
        raise _taken(data["slug"]) from None
    return agent


def _taken(slug: str) -> AppError:
    return AppError("conflict", f"An agent named {slug!r} exists; choose another slug.", 409,
                    {"slug": [f"{slug!r} is taken."]})


def agent_update(*, agent: Agent, data: dict[str, Any], actor: AbstractBaseUser | None, note: str = "update"
                 ) -> Agent:
    """Apply validated changes; a change of any field makes a version (a save that changes nothing makes none).
    The slug may change (409 when taken), except the default agent's."""
    data = _checked(dict(data), agent.owner, actor, kept=tuple(str(item) for item in agent.knowledge or ()))
    if "slug" in data and data["slug"] != agent.slug:
        if agent.is_default:
            raise _invalid("slug", "The default agent's slug stays `default`.")
        if Agent.objects.filter(slug=data["slug"]).exclude(pk=agent.pk).exists():
            raise _taken(data["slug"])
    changed = {name: value for name, value in data.items() if getattr(agent, name) != value}
    if not changed:
        return agent
    try:
        with transaction.atomic():
            for name, value in changed.items():
                setattr(agent, name, value)
            agent.save()
            if set(changed) & set(VERSIONED_FIELDS):
                _version(agent, note, actor)
            if agent.is_default:
                _mirror_to_config(agent)
    except IntegrityError:
        raise _taken(agent.slug) from None
    return agent


def agent_delete(*, agent: Agent) -> None:
    if agent.is_default:
        raise AppError("conflict", "The default agent belongs to the deployment and cannot be deleted; change it "
                       "instead.", 409)
    with transaction.atomic():
        agent.delete()


def version_restore(*, agent: Agent, number: int, actor: AbstractBaseUser | None) -> Agent:
    """A new version equal to version `number` (numbers only grow). Its fields are checked again: a tool or a
    collection that is gone since is refused by name."""
    version = AgentVersion.objects.filter(agent=agent, number=number).first()
    if version is None:
        raise AppError("not_found", "No such version.", 404)
    data = {name: version.data[name] for name in VERSIONED_FIELDS if name in version.data}
    before = agent.version
    note = f"restore of version {number}"
    agent = agent_update(agent=agent, data=data, actor=actor, note=note)
    if agent.version == before:  # nothing differed: a restore still makes a version, so the history says so
        with transaction.atomic():
            _version(agent, note, actor)
    return agent


def agent_transfer(agent: Agent, new_owner: AbstractBaseUser) -> None:
    """organisation.access.transfer's hand-over (inside its transaction): the default agent has no owner."""
    if agent.is_default:
        raise AppError("conflict", "The default agent belongs to the deployment and cannot be handed over.", 409)
    agent.owner = new_owner
    agent.save(update_fields=["owner", "updated_at"])


# --- the default agent and the config -------------------------------------------------------------------------

def default_ensure() -> Agent:
    """The agent `default`, made from the config when missing (the migration makes it; this covers a database
    made otherwise)."""
    agent = Agent.objects.filter(slug=DEFAULT_SLUG).first()
    if agent is not None:
        return agent
    config = config_get()
    with transaction.atomic():
        agent, made = Agent.objects.get_or_create(slug=DEFAULT_SLUG, defaults={
            "name": "Default", "visibility": EVERYONE, "owner": None,
            **{field: getattr(config, name) for name, field in CONFIG_MIRROR.items()}})
        if made:
            _version(agent, "create", None)
    return agent


def _mirror_to_config(agent: Agent) -> None:
    """The default agent's fields into the config (inside the caller's transaction). A database without the
    config row gets it now, made with the agent's fields: made later with the first-run values, its post_save
    would write those over the agent."""
    token = _MIRRORING.set(True)  # the config's saves below are this agent's own: config_saved leaves them
    try:
        config = AgentConfig.objects.filter(pk=1).first() or config_create_default()
        changed = [name for name, field in CONFIG_MIRROR.items() if getattr(config, name) != getattr(agent, field)]
        if changed:
            for name in changed:
                setattr(config, name, getattr(agent, CONFIG_MIRROR[name]))
            config.save(update_fields=[*changed, "updated_at"])
    finally:
        _MIRRORING.reset(token)


def config_saved(config: Any) -> None:
    """post_save of the config (PUT /api/config, the admin): its agent fields become a version of `default`.
    A save the default agent's own mirroring makes is left alone."""
    if _MIRRORING.get():
        return
    agent = Agent.objects.filter(slug=DEFAULT_SLUG).first()
    if agent is None:
        return
    changed = {field: getattr(config, name) for name, field in CONFIG_MIRROR.items()
               if getattr(agent, field) != getattr(config, name)}
    if not changed:
        return
    with transaction.atomic():
        for field, value in changed.items():
            setattr(agent, field, value)
        agent.save()
        _version(agent, "config", None)


def admin_saved(agent: Agent, actor: AbstractBaseUser | None) -> None:
    """After Django admin saved the agent: a version when its fields differ from its latest one, and the config's
    mirror for the default agent."""
    latest = AgentVersion.objects.filter(agent=agent).order_by("-number").values_list("data", flat=True).first()
    with transaction.atomic():
        if latest != agent.fields():
            _version(agent, "admin edit", actor)
        if agent.is_default:
            _mirror_to_config(agent)


def rule_check(agent: Agent, visibility: str, grants: list[dict[str, Any]]) -> None:
    """organisation.access's check of a new rule: the agent `default` stays everyone's (it is what `agent` means on
    /v1 and what a new chat talks to), though grants may add editors to it."""
    if agent.is_default and visibility != EVERYONE:
        raise AppError("invalid", "visibility: the default agent is everyone's; share another agent instead.", 400,
                       {"visibility": ["The default agent stays `everyone`."]})
