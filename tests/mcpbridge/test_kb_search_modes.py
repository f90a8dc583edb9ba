"""kb_search (the MCP tool) takes the knowledge base's search modes, hybrid by default."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async

from agentsite.agent.tools import ToolContext, ToolError
from knowledge import services
from mcpbridge.kb import kb_search_tool
from tests import needs

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.asyncio]

BREAD = "To bake bread, mix flour, water, yeast and salt. Knead the dough, let it rise, then bake it hot."
MOON = "The Moon orbits the Earth every 27 days. Astronauts of Apollo 11 first landed on the Moon in 1969."


async def search(owner, **arguments) -> str:
    result = await kb_search_tool().call(arguments, ToolContext(user_id=owner.pk, is_admin=False))
    assert result.is_error is False
    return result.content[0]["text"]


async def test_kb_search_ranks_in_the_mode_asked_for(owner):
    for filename, content in (("bread.txt", BREAD), ("moon.txt", MOON)):
        await sync_to_async(services.document_ingest)(owner_id=owner.pk, filename=filename, content=content)
    # "kneading" shares no word with bread.txt for the hash vectors; its stem does for the lexical index.
    assert (await search(owner, query="kneading", mode="vector")).startswith("No passage")
    lexical = await search(owner, query="kneading", mode="lexical")
    assert lexical.startswith("1. [bread.txt] (chunk 0, score ") and "rank score" in lexical
    hybrid = await search(owner, query="kneading")  # the default
    assert hybrid.startswith("1. [bread.txt]") and "[moon.txt]" not in hybrid
    with pytest.raises(ToolError, match="mode must be one of"):
        await kb_search_tool().call({"query": "bread", "mode": "dense-ish"}, ToolContext(user_id=owner.pk))
    assert kb_search_tool().input_schema["properties"]["mode"]["enum"] == ["hybrid", "lexical", "vector"]
    with pytest.raises(ToolError, match="mode must be one of: hybrid, lexical, vector\\."):
        await kb_search_tool().call({"query": "bread", "mode": "dense"}, ToolContext(user_id=owner.pk))


async def test_kb_search_offers_dense_when_the_model_is_installed(owner, settings):
    needs.dense_model()
    settings.AGENTSITE_KB_DENSE = True
    schema = kb_search_tool().input_schema["properties"]["mode"]
    assert schema["enum"] == ["hybrid", "lexical", "vector", "dense"] and "dense:" in schema["description"]
    await sync_to_async(services.document_ingest)(owner_id=owner.pk, filename="bread.txt", content=BREAD)
    await sync_to_async(services.dense_embed_pending)(owner.pk)  # what the task queue runs after the add
    assert (await search(owner, query="how to make a loaf at home", mode="dense")).startswith("1. [bread.txt]")
    settings.AGENTSITE_KB_DENSE = False  # installed but turned off: not offered
    assert kb_search_tool().input_schema["properties"]["mode"]["enum"] == ["hybrid", "lexical", "vector"]
