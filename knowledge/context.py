"""The knowledge base as a context source of the agent runtime (registered in KnowledgeConfig.ready)."""

from __future__ import annotations

from agentsite.agent.context import ContextBlock, ContextRequest
from agentsite.core.dbcall import db
from knowledge.selectors import context_build


async def knowledge_context(request: ContextRequest) -> ContextBlock | None:
    """The best chunks for the latest user message, or None (kb disabled, anonymous, nothing relevant)."""
    settings = request.settings
    if not settings.kb_enabled or request.user_id is None or not request.query.strip():
        return None
    # On the pool's threads (agentsite.core.dbcall), whose connections stay open: each turn asks this first.
    context = await db(context_build, owner_id=request.user_id, query=request.query, max_chars=settings.kb_max_chars,
                       top_k=settings.kb_top_k)
    if not context.hits:
        return None
    return ContextBlock(text=context.text, sources=[hit.as_source() for hit in context.hits])
