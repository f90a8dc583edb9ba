"""Serializers and views for /api/sessions; the chat stream is an async Django view (see stream.py)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from django.conf import settings as django_settings
from django.http import HttpRequest, HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers, status
from rest_framework.generics import ListAPIView
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.authentication import async_post_view, revocable
from accounts.caller import authenticated
from agentsite.agent.loop import AgentEvent
from agentsite.agent.usage import check as usage_check
from agentsite.core.errors import AppError
from agentsite.core.sse import KEEPALIVE, sse_event, sse_response, with_keepalive
from agentsite.core.validation import json_object_body, query_text, storable, validated
from sessions_app import search, selectors, services, stops
from sessions_app.turns import turn_start

logger = logging.getLogger(__name__)


NO_SUCH_AGENT = OpenApiResponse(description="`not_found` naming `agent`: no agent of that slug that the caller may "
                                            "use (GET /api/agents lists them).")

class SessionSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    model = serializers.CharField(allow_blank=True, help_text="The model its turns use (a catalogue entry or alias, "
                                  "GET /api/models); empty: the agent's default.")
    agent = serializers.CharField(source="agent_slug", help_text="The slug of the agent its turns run (GET "
                                  "/api/agents); `default` when it names none.")
    current = serializers.UUIDField(source="current_id", allow_null=True, help_text="The last message of the "
                                    "selected path (null before the first message).")
    pinned = serializers.BooleanField()
    archived = serializers.BooleanField()
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()
    message_count = serializers.IntegerField(default=0)


AGENT_HELP = "The slug of an agent you may use (GET /api/agents); default: `default`. Another: 404 `not_found`."


class SessionCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200, required=False, allow_blank=True)
    model = serializers.CharField(max_length=300, required=False, allow_blank=True)
    agent = serializers.CharField(min_length=1, max_length=64, required=False, help_text=AGENT_HELP)


class SessionUpdateSerializer(serializers.Serializer):
    name = serializers.CharField(min_length=1, max_length=200, required=False)
    model = serializers.CharField(max_length=300, required=False, allow_blank=True)
    agent = serializers.CharField(min_length=1, max_length=64, required=False, help_text=AGENT_HELP)
    current = serializers.UUIDField(required=False, help_text="Select the branch through this message: current "
                                    "becomes the newest message at the end of it.")
    pinned = serializers.BooleanField(required=False)
    archived = serializers.BooleanField(required=False)


class SessionRenameSerializer(serializers.Serializer):
    name = serializers.CharField(min_length=1, max_length=200)


class MessageSerializer(serializers.Serializer):
    id = serializers.UUIDField()
    parent = serializers.UUIDField(source="parent_id", allow_null=True, help_text="The message it follows (null: a "
                                   "first question).")
    children = serializers.ListField(child=serializers.CharField(), source="child_ids", default=list,
                                     help_text="The ids of the messages that follow it, oldest first: edits of "
                                     "the next question, or regenerations of the reply.")
    role = serializers.CharField()
    content = serializers.CharField()
    attachments = serializers.ListField(child=serializers.CharField())
    tool_calls = serializers.ListField(child=serializers.DictField())
    steps = serializers.SerializerMethodField()
    sources = serializers.ListField(child=serializers.DictField())
    status = serializers.CharField()
    finish_reason = serializers.CharField()
    model = serializers.CharField(help_text="An assistant message's: the model that answered.")
    agent = serializers.CharField(help_text="An assistant message's: the slug of the agent that answered.")
    usage = serializers.DictField()
    ttft_ms = serializers.IntegerField(allow_null=True, help_text="An assistant message's: milliseconds from the "
                                       "start of its turn to its first text.")
    created_at = serializers.DateTimeField()

    def get_steps(self, message) -> list[dict[str, Any]]:
        return selectors.steps_of(message.tool_calls)


class MessageTreeSerializer(serializers.Serializer):
    count = serializers.IntegerField()
    results = MessageSerializer(many=True)
    current = serializers.UUIDField(allow_null=True)


class ChatInputSerializer(serializers.Serializer):
    message = serializers.CharField(trim_whitespace=False, allow_blank=False)
    attachments = serializers.ListField(child=serializers.CharField(max_length=64), required=False, default=list,
                                        max_length=20)
    model = serializers.CharField(max_length=200, required=False, allow_blank=True)
    parent = serializers.UUIDField(required=False, allow_null=True, help_text="The assistant message the question "
                                   "follows; omitted: the session's current message; null: a new first question.")


class RegenerateInputSerializer(serializers.Serializer):
    model = serializers.CharField(max_length=200, required=False, allow_blank=True)


_CHAT_FIELDS = frozenset({"message", "attachments", "model"})
_ABSENT = object()


def _text(value: Any, *, max_length: int | None = None, trimmed: bool = True) -> bool:
    """Whether a CharField of ChatInputSerializer takes value as it is (not blank, not altered by trimming)."""
    return (type(value) is str and value != "" and (max_length is None or len(value) <= max_length)
            and (not trimmed or value == value.strip()) and storable(value))


def chat_input(body: dict[str, Any]) -> dict[str, Any]:
    """validated(ChatInputSerializer, body): the same data, or the same AppError. The usual body (a message,
    perhaps attachments and a model, each as the serializer takes it unchanged) is read here directly, without
    DRF's ~0.1 ms per request on the first token's path; anything else goes to the serializer, which gives the
    answer, errors included. tests/sessions_app/test_chat_input.py holds the two to the same results."""
    message, attachments, model = body.get("message"), body.get("attachments", []), body.get("model", _ABSENT)
    if (body.keys() <= _CHAT_FIELDS and _text(message, trimmed=False) and type(attachments) is list
            and len(attachments) <= 20 and all(_text(upload, max_length=64) for upload in attachments)
            and (model is _ABSENT or model == "" or _text(model, max_length=200))):
        data = {"message": message, "attachments": attachments}
        if model is not _ABSENT:
            data["model"] = model
        return data
    return validated(ChatInputSerializer, body)


class SessionListQuerySerializer(serializers.Serializer):
    # `true`/`false` only: DRF's BooleanField would read an empty value (`?archived=`) as false.
    archived = serializers.ChoiceField(choices=["true", "false"], required=False, help_text="true: the archived "
                                       "sessions only; false: the others; default: the others, and with `q` both.")
    q = serializers.CharField(required=False, allow_blank=True, max_length=search.MAX_QUERY_CHARS,
                              help_text="Search the names and messages (docs/api.md, Search); empty: the list.")


class SessionMatchSerializer(serializers.Serializer):
    message = serializers.UUIDField(allow_null=True)
    snippet = serializers.CharField()
    highlights = serializers.ListField(child=serializers.ListField(child=serializers.IntegerField()))


class SessionSearchResultSerializer(SessionSerializer):
    match = SessionMatchSerializer()


class SessionListView(ListAPIView):
    serializer_class = SessionSerializer
    searched: search.SessionSearch | None = None

    def get_queryset(self):
        query = validated(SessionListQuerySerializer, self.request.query_params)
        query_text(self.request.query_params, "q", max_length=search.MAX_QUERY_CHARS)  # invalid UTF-8 too: a 400
        if self.request.query_params.get("archived", "true") not in ("true", "false"):  # DRF reads `` as absent
            raise AppError("invalid", "archived must be true or false.", 400, {"archived": ["true or false."]})
        if query.get("q", "").strip():  # an absent `archived` reads as false in a query string: asked apart
            archived = query["archived"] == "true" if "archived" in query else None
            self.searched = search.session_search(owner=self.request.user, text=query["q"], archived=archived)
            return self.searched.sessions
        return selectors.session_list_for(owner=self.request.user).filter(
            archived=query.get("archived") == "true").order_by("-pinned", "-updated_at")

    def paginate_queryset(self, queryset):
        page = super().paginate_queryset(queryset)
        return page if page is None or self.searched is None else self.searched.matches_attach(page)

    def get_serializer_class(self):
        return SessionSearchResultSerializer if self.searched is not None else SessionSerializer

    @extend_schema(parameters=[SessionListQuerySerializer])
    def get(self, request: Request, *args, **kwargs) -> Response:
        return super().get(request, *args, **kwargs)

    @extend_schema(request=SessionCreateSerializer, responses={201: SessionSerializer, 404: NO_SUCH_AGENT})
    def post(self, request: Request) -> Response:
        data = validated(SessionCreateSerializer, request.data)
        session = services.session_create(owner=request.user, name=data.get("name"), model=data.get("model", ""),
                                          agent=data.get("agent"))
        session.message_count = 0
        return Response(SessionSerializer(session).data, status=status.HTTP_201_CREATED)


class SessionDetailView(APIView):
    @extend_schema(responses={200: SessionSerializer})
    def get(self, request: Request, pk) -> Response:
        return Response(SessionSerializer(selectors.session_get_for(owner=request.user, session_id=pk)).data)

    @extend_schema(request=SessionUpdateSerializer, responses={200: SessionSerializer})
    def patch(self, request: Request, pk) -> Response:
        session = selectors.session_get_for(owner=request.user, session_id=pk)
        services.session_update(session=session, changes=dict(validated(SessionUpdateSerializer, request.data)))
        return Response(SessionSerializer(selectors.session_get_for(owner=request.user, session_id=pk)).data)

    @extend_schema(responses={204: None})
    def delete(self, request: Request, pk) -> Response:
        services.session_delete(session=selectors.session_get_for(owner=request.user, session_id=pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionRenameView(APIView):
    @extend_schema(request=SessionRenameSerializer, responses={200: SessionSerializer})
    def put(self, request: Request, pk) -> Response:
        session = selectors.session_get_for(owner=request.user, session_id=pk)
        data = validated(SessionRenameSerializer, request.data)
        services.session_rename(session=session, name=data["name"])
        return Response(SessionSerializer(selectors.session_get_for(owner=request.user, session_id=pk)).data)


class MessageListView(APIView):
    @extend_schema(responses={200: MessageTreeSerializer})
    def get(self, request: Request, pk) -> Response:
        """Every message of the session's tree, oldest first, and the last message of the selected path."""
        session = selectors.session_get_for(owner=request.user, session_id=pk)
        messages = selectors.messages_with_children(selectors.message_list_for(session=session))
        return Response({"count": len(messages), "results": MessageSerializer(messages, many=True).data,
                         "current": str(session.current_id) if session.current_id else None})


class MessageStopView(APIView):
    @extend_schema(request=None, responses={200: MessageSerializer})
    def post(self, request: Request, pk, mid) -> Response:
        """Stop a streaming reply: it is stored `stopped` with what was generated (the stream ends with `done`)."""
        session = selectors.session_get_for(owner=request.user, session_id=pk)
        message = stops.reply_stop(message=selectors.message_get_for(session=session, message_id=mid))
        return Response(MessageSerializer(selectors.message_get_for(session=session, message_id=message.pk)).data)


class ChatSchemaView(APIView):
    """Documents POST /api/sessions/:id/chat in the schema; the real handler is the async `chat` view."""

    @extend_schema(request=ChatInputSerializer, responses={(200, "text/event-stream"): OpenApiResponse(
        OpenApiTypes.STR, description="start, delta*, tool_call*, tool_result*, then done or error")})
    def post(self, request: Request, pk) -> Response:  # pragma: no cover - never routed
        raise AppError("not_found", "Not found.", 404)


async def _chat(request: HttpRequest, user, pk) -> HttpResponse:
    """POST /api/sessions/:id/chat: everything that can fail with a status fails before the stream starts."""
    data = chat_input(json_object_body(request))
    return await _turn_response(request, user, pk, message=data["message"], attachments=data["attachments"],
                                model=data.get("model") or None, parent=data.get("parent", selectors.CURRENT))


async def _turn_response(request: HttpRequest, user, pk, **turn_args: Any) -> HttpResponse:
    identity = authenticated(user, getattr(request, "api_key", None), request.headers.get("Authorization"))
    caller = identity.usage("chat")
    await usage_check(caller)  # a spent budget: 429 before anything is stored
    turn = await turn_start(owner=user, session_id=pk, **turn_args)
    turn.caller = caller
    # Ends at its next event once the token is revoked or the user deactivated (accounts.authentication).
    return sse_response(revocable(chat_stream(turn.batches()), None, credential=identity.credential))


chat = async_post_view(_chat, schema_view=ChatSchemaView)


class RegenerateSchemaView(APIView):
    """Documents POST /api/sessions/:id/messages/:mid/regenerate; the real handler is the async `regenerate`."""

    @extend_schema(request=RegenerateInputSerializer, responses={(200, "text/event-stream"): OpenApiResponse(
        OpenApiTypes.STR, description="the chat stream: start, delta*, tool_call*, tool_result*, then done or error")})
    def post(self, request: Request, pk, mid) -> Response:  # pragma: no cover - never routed
        raise AppError("not_found", "Not found.", 404)


async def _regenerate(request: HttpRequest, user, pk, mid) -> HttpResponse:
    """POST /api/sessions/:id/messages/:mid/regenerate: a new sibling of an assistant reply, streamed."""
    data = validated(RegenerateInputSerializer, json_object_body(request))
    return await _turn_response(request, user, pk, message=None, model=data.get("model") or None, regenerate=mid)


regenerate = async_post_view(_regenerate, schema_view=RegenerateSchemaView)


async def chat_stream(batches: AsyncIterator[list[AgentEvent]]) -> AsyncIterator[bytes]:
    """The turn's events as SSE, with a keep-alive comment whenever the agent is silent for a while. The events
    that were ready together (ChatTurn.batches: one read of the model's reply) go out in one chunk, each
    its own SSE event: one write and one credential check per read instead of per delta."""
    try:
        # aclosing: a stream closed between events (a revoked token) stops the turn before it returns.
        async with aclosing(with_keepalive(batches, keepalive_interval())) as paced:
            async for batch in paced:
                yield KEEPALIVE if batch is None else b"".join(sse_event(event.data, event.type) for event in batch)
    except Exception:  # a boundary: a started stream ends with one error event, never a broken connection
        logger.exception("The chat stream failed")
        yield sse_event({"code": "internal_error", "message": "The reply failed; the error was logged."}, "error")


def keepalive_interval() -> float:
    return float(getattr(django_settings, "AGENTSITE_SSE_KEEPALIVE_S", 10.0))
