"""/api/agents: named agents, their versions, and (through organisation.access) their access rule.

Any signed-in user creates agents and sees those they may use (admins: every agent); a viewer reads and chats
with one, an editor also changes it, the owner (and admins) also delete, share and hand it over
(organisation.policy). The agent `default` is the deployment's: admins edit it, nobody deletes it.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from agents_app import selectors, services
from agents_app.models import MAX_STARTERS, VERSIONED_FIELDS, Agent, AgentVersion
from agentsite.core.audit import audit
from agentsite.core.validation import validated_by_path
from organisation.policy import EDIT, MANAGE, USE, require

# The slug whole: `$` alone would take "helper\n", and a trimmed " helper" is not what was sent.
SLUG_PATTERN = r"\A[a-z0-9_-]{1,64}\Z"
TAKEN = OpenApiResponse(description="`conflict`: another agent has that slug.")
ROLES = ["owner", "editor", "viewer"]


class AgentOwnerSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    username = serializers.CharField()


class AgentAccessSummarySerializer(serializers.Serializer):
    visibility = serializers.CharField(help_text="Its access rule's: private, everyone or shared (the whole rule: "
                                                 "GET /api/agents/:id/access).")
    role = serializers.ChoiceField(choices=ROLES, help_text="The caller's: a viewer chats with it, an editor also "
                                   "changes it, the owner (and admins) also delete, share and hand it over.")


class AgentFieldsSerializer(serializers.Serializer):
    """The versioned fields, as input (every one optional on PATCH) and output."""

    name = serializers.CharField(max_length=100, min_length=1)
    description = serializers.CharField(max_length=2000, required=False, allow_blank=True)
    instructions = serializers.CharField(max_length=services.MAX_INSTRUCTIONS, required=False, allow_blank=True,
                                         trim_whitespace=False, help_text="Sent as the first system message.")
    model = serializers.CharField(max_length=300, required=False, allow_blank=True, help_text=(
        "An alias or <connection>/<model> (GET /api/models); empty: the deployment's default model."))
    tools = serializers.ListField(child=serializers.CharField(max_length=200, min_length=1), required=False,
                                  max_length=services.MAX_TOOLS, help_text=(
                                      "The allowlist: built-in and plugin tool names, <server>/<tool> of an MCP "
                                      "server the owner may use, workflow:<name>, or * for every tool the caller "
                                      "may use. Empty: no tools."))
    knowledge = serializers.ListField(child=serializers.CharField(max_length=64), required=False,
                                      max_length=services.MAX_KNOWLEDGE, help_text=(
                                          "Ids of knowledge collections the owner may read, searched on each turn."))
    temperature = serializers.FloatField(min_value=0.0, max_value=2.0, required=False)
    max_tokens = serializers.IntegerField(min_value=1, max_value=1_000_000, required=False)
    starters = serializers.ListField(child=serializers.CharField(max_length=services.MAX_STARTER_CHARS,
                                                                 trim_whitespace=False),
                                     required=False, max_length=MAX_STARTERS,
                                     help_text=f"Up to {MAX_STARTERS} suggested first messages.")


class AgentInputSerializer(AgentFieldsSerializer):
    slug = serializers.RegexField(SLUG_PATTERN, max_length=64, trim_whitespace=False, help_text=(
        "Unique in the deployment: 1-64 of lowercase letters, digits, - and _. Its model name is agent:<slug>."))


class AgentSerializer(AgentInputSerializer):
    id = serializers.IntegerField()
    description = serializers.CharField(allow_blank=True)
    instructions = serializers.CharField(allow_blank=True)
    model = serializers.CharField(allow_blank=True)
    tools = serializers.ListField(child=serializers.CharField())
    knowledge = serializers.ListField(child=serializers.CharField())
    temperature = serializers.FloatField()
    max_tokens = serializers.IntegerField()
    starters = serializers.ListField(child=serializers.CharField())
    owner = AgentOwnerSerializer(allow_null=True, help_text="Null: the deployment's (the agent `default`).")
    access = AgentAccessSummarySerializer()
    version = serializers.IntegerField(help_text="Its latest version's number (each save makes the next).")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class AgentVersionSummarySerializer(serializers.Serializer):
    number = serializers.IntegerField()
    note = serializers.CharField(allow_blank=True, help_text="What made it: create, update, config, restore of "
                                                             "version n.")
    author = AgentOwnerSerializer(allow_null=True, help_text="Who saved it (null: the deployment or a removed user).")
    created_at = serializers.DateTimeField()


class AgentVersionSerializer(AgentVersionSummarySerializer):
    agent = AgentFieldsSerializer(help_text="The versioned fields as they were saved.")


def agent_data(agent: Agent, role: str) -> dict[str, Any]:
    owner = agent.owner
    return {"id": agent.pk, "slug": agent.slug, **agent.fields(),
            "owner": None if owner is None else {"id": owner.pk, "username": owner.get_username()},
            "access": {"visibility": agent.visibility, "role": role}, "version": agent.version,
            "created_at": agent.created_at, "updated_at": agent.updated_at}


def version_data(version: AgentVersion) -> dict[str, Any]:
    author = version.author
    return {"number": version.number, "note": version.note, "created_at": version.created_at,
            "author": None if author is None else {"id": author.pk, "username": author.get_username()}}


def _fields(data: Any, *, partial: bool = False) -> dict[str, Any]:
    """The body's fields, an item's error named by its path (`tools.0`, `starters.2`)."""
    return validated_by_path(AgentInputSerializer, data, partial=partial)


def _details(data: dict[str, Any]) -> dict[str, Any]:
    """What an audit row keeps of a change: the field names (the instructions' text is the owner's)."""
    return {"fields": sorted(data)}


class AgentListView(GenericAPIView):
    serializer_class = AgentSerializer

    @extend_schema(responses={200: AgentSerializer(many=True)})
    def get(self, request: Request) -> Response:
        page = self.paginate_queryset(selectors.agent_list_for(request.user))
        roles = selectors.roles_of(request.user, list(page))
        return self.get_paginated_response([agent_data(agent, roles[agent.pk]) for agent in page])

    @extend_schema(request=AgentInputSerializer, responses={201: AgentSerializer, 409: TAKEN})
    def post(self, request: Request) -> Response:
        data = _fields(request.data)
        agent = services.agent_create(owner=request.user, data=data)
        audit("agent.create", request=request, target=f"agent:{agent.pk}",
              details={"slug": agent.slug, **_details(data)})
        return Response(AgentSerializer(agent_data(agent, "owner")).data, status=status.HTTP_201_CREATED)


class AgentDetailView(APIView):
    @extend_schema(responses={200: AgentSerializer})
    def get(self, request: Request, pk: str) -> Response:
        agent = selectors.agent_get(pk)
        role = require(request.user, USE, agent)
        return Response(AgentSerializer(agent_data(agent, role)).data)

    @extend_schema(request=AgentInputSerializer(partial=True), responses={200: AgentSerializer, 409: TAKEN})
    def patch(self, request: Request, pk: str) -> Response:
        agent = selectors.agent_get(pk)
        role = require(request.user, EDIT, agent)
        data = _fields(request.data, partial=True)
        before = agent.version
        agent = services.agent_update(agent=agent, data=data, actor=request.user)
        if agent.version != before or "slug" in data:
            audit("agent.update", request=request, target=f"agent:{agent.pk}",
                  details={"slug": agent.slug, "version": agent.version, **_details(data)})
        return Response(AgentSerializer(agent_data(agent, role)).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk: str) -> Response:
        agent = selectors.agent_get(pk)
        require(request.user, MANAGE, agent)
        target, slug = f"agent:{agent.pk}", agent.slug
        services.agent_delete(agent=agent)
        audit("agent.delete", request=request, target=target, details={"slug": slug})
        return Response(status=status.HTTP_204_NO_CONTENT)


class VersionListView(GenericAPIView):
    serializer_class = AgentVersionSummarySerializer

    @extend_schema(responses={200: AgentVersionSummarySerializer(many=True)})
    def get(self, request: Request, pk: str) -> Response:
        agent = selectors.agent_get(pk)
        require(request.user, USE, agent)
        page = self.paginate_queryset(selectors.version_list(agent))
        return self.get_paginated_response([version_data(version) for version in page])


class VersionDetailView(APIView):
    @extend_schema(responses={200: AgentVersionSerializer})
    def get(self, request: Request, pk: str, number: str) -> Response:
        agent = selectors.agent_get(pk)
        require(request.user, USE, agent)
        version = selectors.version_get(agent, number)
        fields = {name: version.data.get(name) for name in VERSIONED_FIELDS if name in version.data}
        return Response({**version_data(version), "agent": fields})


class VersionRestoreView(APIView):
    @extend_schema(request=None, responses={200: AgentSerializer})
    def post(self, request: Request, pk: str, number: str) -> Response:
        agent = selectors.agent_get(pk)
        role = require(request.user, EDIT, agent)
        version = selectors.version_get(agent, number)
        agent = services.version_restore(agent=agent, number=version.number, actor=request.user)
        audit("agent.restore", request=request, target=f"agent:{agent.pk}",
              details={"slug": agent.slug, "restored": version.number, "version": agent.version})
        return Response(AgentSerializer(agent_data(agent, role)).data)
