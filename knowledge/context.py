"""The knowledge base as a context source of the agent runtime (registered in KnowledgeConfig.ready)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.db.models import Q

from agentsite.agent.context import ContextBlock, ContextRequest
from agentsite.core.dbcall import db
from knowledge.models import Collection
from knowledge.selectors import context_build, personal_collection_for_turn
from organisation.policy import owner_reads_q, visible_q


async def knowledge_context(request: ContextRequest) -> ContextBlock | None:
    """The best chunks for the latest user message, or None (kb disabled, anonymous, nothing relevant)."""
    if not _wanted(request):
        return None
    # On the pool's threads (agentsite.core.dbcall), whose connections stay open: each turn asks this first.
    return await db(knowledge_context_now, request)


def knowledge_context_now(request: ContextRequest) -> ContextBlock | None:
    """knowledge_context, sync (on a database thread): agentsite.agent.context's `now` variant, which a chat turn
    asks in the database call that reads its session."""
    if not _wanted(request):
        return None
    settings = request.settings
    collections = _collections(request)
    if not collections:
        return None
    context = context_build(query=request.query, max_chars=settings.kb_max_chars, top_k=settings.kb_top_k,
                            collections=collections)
    if not context.hits:
        return None
    return ContextBlock(text=context.text, sources=[hit.as_source() for hit in context.hits])


def _collections(request: ContextRequest) -> list[Collection]:
    """What this turn searches: the caller's own personal collection when the settings say so (the agent
    `default`), then the collections an agent names that its reader (the agent's owner; else the caller) may
    read now, as a user (an admin reader counts as anyone: an admin's agent cannot hand out another user's
    private collection; a deactivated owner's rights still count, so a shared agent keeps its knowledge for its
    grantees). A collection the reader lost access to, or that is gone, is left out; the caller's
    other collections never come in unless named."""
    settings = request.settings
    found: list[Collection] = []
    if settings.kb_personal and request.user_id is not None:
        personal = personal_collection_for_turn(request.user_id)
        if personal is not None:
            found.append(personal)
    if settings.knowledge:
        readable = Collection.objects.filter(pk__in=list(settings.knowledge)).filter(_reader_q(request))
        by_id = {str(collection.pk): collection for collection in readable}
        found.extend(by_id[key] for key in dict.fromkeys(settings.knowledge)
                     if key in by_id and by_id[key] not in found)
    return found


def _reader_q(request: ContextRequest) -> Q:
    """The agent's owner reads for its users even once deactivated (owner_reads_q); the agent `default`, which
    has no owner, reads with the caller's rights, who must be signed in."""
    if request.settings.knowledge_reader is not None:
        return owner_reads_q(request.settings.knowledge_reader, Collection)
    caller = get_user_model().objects.filter(pk=request.user_id, is_active=True).first() \
        if request.user_id is not None else None
    return visible_q(caller, Collection)


def _wanted(request: ContextRequest) -> bool:
    settings = request.settings
    return bool(settings.kb_enabled and request.query.strip()
                and ((settings.kb_personal and request.user_id is not None) or settings.knowledge))
