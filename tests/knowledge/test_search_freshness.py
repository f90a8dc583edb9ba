"""A vector search ranks with the cached matrix and checks its stamp in the same statement that reads the hits: a
current matrix is never refreshed, a stale one always is, before anything is returned."""

from __future__ import annotations

import numpy as np
import pytest

from knowledge import index, services
from knowledge.embedding import _embed_block, embed
from knowledge.selectors import chunk_search
from tests.knowledge.test_matrix_cache import BREAD, MOON, in_another_process


@pytest.mark.e2e  # in_another_process starts a Python process
@pytest.mark.django_db(transaction=True)  # the other process must see committed rows
def test_a_search_refreshes_a_stale_matrix_even_when_its_hits_still_exist(owner, monkeypatch):
    services.document_ingest(owner_id=owner.pk, filename="moon.txt", content=MOON)
    assert [hit.filename for hit in chunk_search(owner_id=owner.pk, query="the Moon", mode="vector")] == ["moon.txt"]
    refreshes = []
    real_matrix_for = index.matrix_for
    monkeypatch.setattr(index, "matrix_for", lambda owner_id: refreshes.append(owner_id) or real_matrix_for(owner_id))

    assert [hit.filename for hit in chunk_search(owner_id=owner.pk, query="the Moon", mode="vector")] == ["moon.txt"]
    assert refreshes == [], "a search with a current matrix refreshed it"

    # The moon chunk still exists and still matches "the", but the matrix no longer tells the whole story.
    in_another_process(owner.pk, "add", f"bread.txt|{BREAD} {BREAD}")
    hits = chunk_search(owner_id=owner.pk, query="the bread dough", mode="vector")
    assert [hit.filename for hit in hits][0] == "bread.txt"
    assert refreshes == [owner.pk]
    assert index.cached_matrix(owner.pk).size == 2


@pytest.mark.parametrize("words", [1, 7, 64, 65, 300])
def test_a_query_embeds_bit_for_bit_like_a_document(words):
    text = " ".join(f"Word{number % 13}, 3.{number} 熊猫" for number in range(words))
    short = " ".join(text.split()[:words])
    for sample in (short, short.upper(), short + " ..."):
        assert np.array_equal(embed(sample), _embed_block([sample])[0])
