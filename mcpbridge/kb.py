"""`kb_search`: the calling user's knowledge base as an MCP tool (served by runmcp and /mcp, listed by /api/mcp).

It is not in the runtime's registry: the agent already gets knowledge-base context on every turn. Should
`knowledge` register a tool of this name in the registry one day, that one is served instead.
"""

from __future__ import annotations

import logging
from typing import Any

from asgiref.sync import sync_to_async

from agentsite.agent.tools import Tool, ToolContext, ToolError, ToolResult
from knowledge.selectors import chunk_search
from knowledge.selectors import offered_modes as knowledge_modes

logger = logging.getLogger(__name__)

SOURCE_NAME = "builtin"  # listed with the built-ins: it is the service's own tool, not an external one
DEFAULT_TOP_K = 5
DEFAULT_MODE = "hybrid"


def offered_modes() -> list[str]:
    """knowledge.selectors.offered_modes: `dense` only with the dense model installed (imported when called,
    as in _search: this module is imported before the apps are ready)."""

    return knowledge_modes()


async def kb_search(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult:
    if ctx.user_id is None:
        raise ToolError("kb_search searches a user's knowledge base; this caller has no user.")
    query = str(arguments["query"]).strip()
    if not query:
        raise ToolError("The query is empty.")
    top_k = int(arguments.get("topK", DEFAULT_TOP_K))
    mode = str(arguments.get("mode", DEFAULT_MODE))
    modes = offered_modes()
    if mode not in modes:
        raise ToolError(f"mode must be one of: {', '.join(modes)}.")
    hits = await sync_to_async(_search)(owner_id=ctx.user_id, query=query, top_k=top_k, mode=mode)
    if not hits:
        return ToolResult.of_text(f"No passage in the knowledge base matches {query!r}.")
    entries = [f"{rank}. [{hit.filename}] (chunk {hit.index}, score {hit.score:.3f}, rank score {hit.rank_score:.4f})"
               f"\n{hit.text}"
               for rank, hit in enumerate(hits, start=1)]
    return ToolResult.of_text("\n\n".join(entries))


def _search(*, owner_id: int, query: str, top_k: int, mode: str) -> list[Any]:
    return chunk_search(owner_id=owner_id, query=query, top_k=top_k, mode=mode)


_MODE_HELP = {"hybrid": "every signal fused (word-hash vectors, BM25, and the dense model when installed)",
              "lexical": "BM25", "vector": "cosine of the word-hash vectors",
              "dense": "cosine of the dense model's sentence embeddings"}


def kb_search_tool() -> Tool:
    """The tool as listed now: its `mode` enum follows whether the dense model is installed."""
    modes = offered_modes()
    return Tool(
        name="kb_search",
        description="Search the user's knowledge base (their uploaded documents) and return the best matching "
                    "passages, each with its document's filename, its cosine similarity (score) and the score the "
                    "order follows (rank score).",
        input_schema={
            "type": "object",
            "properties": {
                "query": {"type": "string", "minLength": 1, "description": "What to look for."},
                "topK": {"type": "integer", "minimum": 1, "maximum": 50, "default": DEFAULT_TOP_K,
                         "description": "How many passages to return at most."},
                "mode": {"type": "string", "enum": modes, "default": DEFAULT_MODE,
                         "description": "; ".join(f"{mode}: {_MODE_HELP[mode]}" for mode in modes) + "."},
            },
            "required": ["query"],
            "additionalProperties": False,
        },
        call=kb_search,
        source=SOURCE_NAME,
        timeout=30.0,
    )
