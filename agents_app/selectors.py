"""Reads of agents: listings and objects for the API, and the directory that resolves `agent:<slug>[@<n>]` on every
door (agentsite.agent.agents' contract).

Resolving is on the hot path of every /v1 request that names an agent, so the directory keeps every agent's row
and access rule per process (one load, two queries) while this process hears the invalidation channel: any save,
rule change or hand-over announces `agents` and drops it everywhere (and a grant of a rule changed through
organisation.access announces `org.access`, which drops it too). Where no announcement can arrive (PostgreSQL
without Redis) nothing is kept and each resolve reads the database. Who may use an agent is organisation.policy's
decision (`role_by_rule` over the grants kept here, the caller's groups from its membership cache): the same answer
as `require` gives, without a query in the common case. Versions never change once written, so a pinned one's
fields are kept once read.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django.db.models import Q, QuerySet

from agents_app.models import DEFAULT_SLUG, Agent, AgentGrant, AgentVersion
from agents_app.services import default_ensure
from agentsite.agent import agents as runtime
from agentsite.agent.config import AgentSettings, get_settings, settings_peek
from agentsite.core import invalidation
from agentsite.core.errors import AppError
from organisation import selectors as org
from organisation.models import EVERYONE, PRIVATE
from organisation.policy import USE, allows, role_by_rule, visible_q

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser

CACHE_TTL_S = 60.0  # while connected: only a change no signal announces waits for it


@dataclass(frozen=True)
class Rule:
    """An agent as the directory keeps it: its row's fields, its access rule, its latest version."""

    pk: int
    slug: str
    owner_id: int | None
    visibility: str
    grants: tuple[tuple[int | None, int | None, str], ...]  # (user id, group id, role)
    fields: dict[str, Any]
    version: int

    def role(self, user: AbstractBaseUser | None) -> str | None:
        if user is None or not getattr(user, "is_authenticated", False):
            return None
        granted = [role for user_id, _group, role in self.grants if user_id == user.pk]
        if any(group_id is not None for _user, group_id, _role in self.grants):
            mine = org.memberships_peek(user.pk)
            if mine is None:
                mine = org.memberships(user.pk)
            groups = {group.id for group in mine}
            granted += [role for _user, group_id, role in self.grants if group_id in groups]
        return role_by_rule(user, self.owner_id, self.visibility, granted)

    def role_now(self, user: AbstractBaseUser | None) -> str | None | bool:
        """role() without a query: False when the caller's groups are needed and not cached."""
        if user is None or not getattr(user, "is_authenticated", False):
            return None
        if any(group_id is not None for _user, group_id, _role in self.grants) \
                and org.memberships_peek(user.pk) is None and not (user.is_staff or user.pk == self.owner_id):
            return False
        return self.role(user)

    def listed_for(self, user: AbstractBaseUser | None) -> bool:
        """Whether a listing (/v1/models, the MCP tools) names it for the user: what they may use, where an admin
        counts as anyone (they may use every agent by its name, but their lists show what is theirs or shared
        with them, not every user's)."""
        if not getattr(user, "is_staff", False):
            return self.usable_by(self.role(user), user)
        if self.owner_id == user.pk or self.visibility == EVERYONE:
            return True
        if self.visibility == PRIVATE:
            return False
        groups = {group.id for group in org.memberships(user.pk)} if any(
            group_id is not None for _user, group_id, _role in self.grants) else set()
        return any(user_id == user.pk or group_id in groups for user_id, group_id, _role in self.grants)

    def usable_by(self, role: str | None, user: AbstractBaseUser | None) -> bool:
        # The deployment's agent, when it is everyone's, serves whoever the door let in (an anonymous /v1 caller
        # on a loopback or public deployment included), as the `agent` model always did.
        if self.slug == DEFAULT_SLUG and self.visibility == EVERYONE:
            return True
        return allows(role, USE)


class _Directory(runtime.AgentDirectory):
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: tuple[float, dict[str, Rule]] | None = None
        self._generation = 0
        self._versions: dict[tuple[int, int], dict[str, Any]] = {}
        # (slug, version) -> (the deployment's settings, the rule, the agent's settings made of them)
        self._settings: dict[tuple[str, int], tuple[AgentSettings, Rule, AgentSettings]] = {}

    # -- the kept rules ----------------------------------------------------------------------------------------

    def drop(self, key: str | None = None) -> None:
        """Forget every kept rule, settings and version (a version's fields never change, but its row goes with its
        agent, and a database rolled back or restored may hold another row under the same id and number)."""
        with self._lock:
            self._generation += 1
            self._rules = None
            self._settings = {}
            self._versions = {}

    def _fresh(self) -> dict[str, Rule] | None:
        entry = self._rules
        if entry is not None and time.monotonic() - entry[0] < CACHE_TTL_S and invalidation.connected():
            return entry[1]
        return None

    def rules_now(self) -> dict[str, Rule]:
        rules = self._fresh()
        if rules is not None:
            return rules
        invalidation.listen()
        with self._lock:
            generation = self._generation
        rules = _load()
        with self._lock:
            if generation == self._generation and invalidation.connected():
                self._rules = (time.monotonic(), rules)
        return rules

    # -- the contract ------------------------------------------------------------------------------------------

    def resolve_now(self, user: AbstractBaseUser | None, name: str) -> runtime.ResolvedAgent:
        parsed = runtime.parse(name)
        rule = self.rules_now().get(parsed[0]) if parsed else None
        if parsed is None or rule is None or not rule.usable_by(rule.role(user), user):
            raise runtime.not_found(name)
        # The runtime's settings (the loader the catalogue registers, or one a test swapped in).
        return self._resolved(rule, parsed[1], get_settings(), name)

    def peek(self, user: AbstractBaseUser | None, name: str) -> runtime.ResolvedAgent | None:
        peek = settings_peek()
        rules, base = self._fresh(), peek() if peek is not None else None
        parsed = runtime.parse(name)
        if rules is None or base is None or parsed is None:
            return None
        rule = rules.get(parsed[0])
        if rule is None:
            raise runtime.not_found(name)
        role = rule.role_now(user)
        if role is False:
            return None
        if not rule.usable_by(role, user):  # type: ignore[arg-type]
            raise runtime.not_found(name)
        version = parsed[1]
        if version is not None and version != rule.version and (rule.pk, version) not in self._versions:
            return None
        return self._resolved(rule, version, base, name)

    def names_now(self, user: AbstractBaseUser | None) -> list[str]:
        return [f"{runtime.PREFIX}{slug}" for slug, rule in sorted(self.rules_now().items()) if rule.listed_for(user)]

    # -- settings ----------------------------------------------------------------------------------------------

    def _resolved(self, rule: Rule, version: int | None, base: AgentSettings, name: str) -> runtime.ResolvedAgent:
        number = rule.version if version is None else version
        key = (rule.slug, number)
        kept = self._settings.get(key)
        # Kept for these very objects: the same deployment settings and the same rule (a rule read before a drop
        # and stored after it is another object than the one loaded since; an id() could be reused once freed).
        if kept is not None and kept[0] is base and kept[1] is rule:
            return runtime.ResolvedAgent(rule.slug, number, rule.owner_id, kept[2])
        fields = rule.fields if number == rule.version else self._version_fields(rule, number, name)
        settings = settings_of(rule.slug, rule.owner_id, fields, base)
        self._settings[key] = (base, rule, settings)
        return runtime.ResolvedAgent(rule.slug, number, rule.owner_id, settings)

    def _version_fields(self, rule: Rule, number: int, name: str) -> dict[str, Any]:
        key = (rule.pk, number)
        fields = self._versions.get(key)
        if fields is None:
            row = AgentVersion.objects.filter(agent_id=rule.pk, number=number).values_list("data", flat=True).first() \
                if number > 0 else None
            if row is None:
                raise runtime.not_found(name)
            fields = self._versions[key] = dict(row)
        return fields


def settings_of(slug: str, owner_id: int | None, fields: dict[str, Any], base: AgentSettings) -> AgentSettings:
    """The settings a run of this agent uses: the deployment's, with the agent's fields. The agent `default` also
    searches each caller's personal collection (as the deployment's agent always did); any other agent searches
    only the collections it names, with its owner's read rights."""
    knowledge = tuple(str(item) for item in fields.get("knowledge") or ())
    default = slug == DEFAULT_SLUG
    return base.with_overrides(
        system_prompt=str(fields.get("instructions", "")), model=str(fields.get("model") or base.model),
        temperature=float(fields.get("temperature", base.temperature)),
        max_tokens=int(fields.get("max_tokens", base.max_tokens)),
        tools=tuple(runtime.function_name(str(entry)) for entry in fields.get("tools") or ()),
        kb_personal=default, knowledge=knowledge, knowledge_reader=None if default else owner_id,
        kb_enabled=base.kb_enabled and (default or bool(knowledge)), agent=slug)


def _load() -> dict[str, Rule]:
    grants: dict[int, list[tuple[int | None, int | None, str]]] = {}
    for resource_id, user_id, group_id, role in AgentGrant.objects.values_list("resource_id", "user_id", "group_id",
                                                                                "role"):
        grants.setdefault(resource_id, []).append((user_id, group_id, role))
    rules = {}
    agents = list(Agent.objects.all())
    if not any(agent.slug == DEFAULT_SLUG for agent in agents):  # a database made without the migration's row
        agents.append(default_ensure())
    for agent in agents:
        rules[agent.slug] = Rule(agent.pk, agent.slug, agent.owner_id, agent.visibility,
                                 tuple(grants.get(agent.pk, ())), agent.fields(), agent.version)
    return rules


directory = _Directory()


# --- the API's reads ------------------------------------------------------------------------------------------

def agent_list_for(user: AbstractBaseUser) -> QuerySet[Agent]:
    """The agents the user owns, or that are everyone's or shared with them, by name. Admins see the same (they
    act on any agent by its id, as on any shareable resource: their lists are not everyone's)."""
    default_ensure()
    return Agent.objects.filter(visible_q(user, Agent)).select_related("owner")


def roles_of(user: AbstractBaseUser, agents: list[Agent]) -> dict[int, str]:
    """The user's role on each agent of a page (organisation.policy's answer, as role_of gives it one by one), in
    one query for the grants of those the user neither owns nor administers."""
    others = [agent.pk for agent in agents if agent.visibility != PRIVATE and not (
        user.is_staff or agent.owner_id == user.pk)]
    granted: dict[int, list[str]] = {}
    if others:
        rows = AgentGrant.objects.filter(resource_id__in=others).filter(
            Q(user_id=user.pk) | Q(group__memberships__user_id=user.pk)).values_list("resource_id", "role")
        for resource_id, role in rows:
            granted.setdefault(resource_id, []).append(role)
    return {agent.pk: role_by_rule(user, agent.owner_id, agent.visibility, granted.get(agent.pk, ())) or "viewer"
            for agent in agents}


def agent_get(pk: int | str) -> Agent:
    """The agent with this id (the caller then `require`s the action); AppError 404 otherwise."""
    text = str(pk)
    agent = Agent.objects.filter(pk=int(text)).select_related("owner").first() \
        if text.isascii() and text.isdigit() and len(text) < 19 else None
    if agent is None:
        raise AppError("not_found", "No agent with that id.", 404)
    return agent


def version_list(agent: Agent) -> QuerySet[AgentVersion]:
    return AgentVersion.objects.filter(agent=agent).select_related("author")


def version_get(agent: Agent, number: str) -> AgentVersion:
    version = AgentVersion.objects.filter(agent=agent, number=int(number)).select_related("author").first() \
        if number.isascii() and number.isdigit() and len(number) < 10 else None
    if version is None:
        raise AppError("not_found", "No such version.", 404)
    return version
