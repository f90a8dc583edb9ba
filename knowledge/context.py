"""The knowledge base as a context source of the agent runtime (registered in KnowledgeConfig.ready)."""

from __future__ import annotations

from agentsite.agent.context import ContextBlock, ContextRequest
from agentsite.core.dbcall import db
from knowledge.selectors import context_build


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
    context = context_build(owner_id=request.user_id, query=request.query, max_chars=settings.kb_max_chars,
                            top_k=settings.kb_top_k)
    if not context.hits:
        return None
    return ContextBlock(text=context.text, sources=[hit.as_source() for hit in context.hits])


def _wanted(request: ContextRequest) -> bool:
    return bool(request.settings.kb_enabled and request.user_id is not None and request.query.strip())
