import asyncio

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from agentsite.agent.config import AgentSettings
from agentsite.agent.context import ContextBlock, ContextRequest, context_sources
from knowledge import services

# The source reaches the ORM through sync_to_async on another thread: only committed rows are visible there.
pytestmark = pytest.mark.django_db(transaction=True)

MOON = "The Moon orbits the Earth every 27 days. Astronauts of Apollo 11 first landed on the Moon in 1969."
BREAD = "To bake bread, mix flour, water, yeast and salt. Knead the dough, let it rise, then bake it hot."


@pytest.fixture(autouse=True)
def _close_the_worker_threads_connection():
    yield
    # sync_to_async's thread keeps its own connection open; PostgreSQL cannot drop the test database under it.
    asyncio.run(sync_to_async(connections.close_all)())


def knowledge_source():
    return context_sources()["knowledge"]


async def ask(user_id, query: str, **settings) -> ContextBlock | None:
    return await knowledge_source()(ContextRequest(user_id=user_id, query=query, settings=AgentSettings(**settings)))


@pytest.fixture
def documents(owner):
    return {
        "moon.txt": services.document_ingest(owner_id=owner.pk, filename="moon.txt", content=MOON),
        "bread.txt": services.document_ingest(owner_id=owner.pk, filename="bread.txt", content=BREAD),
    }


async def test_the_knowledge_source_gives_the_best_chunks_and_their_sources(owner, documents):
    block = await ask(owner.pk, "When did astronauts land on the Moon?", kb_top_k=1)
    assert block.text == f"[moon.txt] {MOON}"
    assert block.sources == [{
        "collection": {"id": str(documents["moon.txt"].collection_id), "name": "Personal"},
        "document": {"id": str(documents["moon.txt"].pk), "filename": "moon.txt"},
        "chunk_index": 0, "score": block.sources[0]["score"], "rank_score": 1.2, "text": MOON}]
    # first in both lists: weights 0.2 (vector) + 1.0 (lexical)
    assert 0 < block.sources[0]["score"] <= 1


async def test_the_knowledge_source_keeps_within_top_k_and_max_chars(owner, documents):
    block = await ask(owner.pk, "Moon astronauts bread dough", kb_top_k=5, kb_max_chars=4000)
    assert [source["document"]["filename"] for source in block.sources] == ["moon.txt", "bread.txt"]
    short = await ask(owner.pk, "Moon astronauts bread dough", kb_top_k=5, kb_max_chars=30)
    assert short.text == block.text[:30]
    assert len(short.sources) == 1
    # The passage as the model received it: cut where the budget cut it.
    assert short.sources[0]["text"] == block.text[:30].removeprefix("[moon.txt] ")


async def test_the_knowledge_source_gives_nothing_when_disabled_anonymous_or_empty(owner, other_user, documents):
    assert await ask(owner.pk, "the Moon", kb_enabled=False) is None
    assert await ask(None, "the Moon") is None
    assert await ask(other_user.pk, "the Moon") is None  # no chunks of theirs
    assert await ask(owner.pk, "zebra xylophone quartz") is None  # nothing relevant
    await sync_to_async(services.documents_clear)(owner_id=owner.pk)
    assert await ask(owner.pk, "the Moon") is None
