"""The search matrices a process keeps are bounded: an LRU under AGENTSITE_KB_INDEX_CACHE_MB in all."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from knowledge import index, services
from knowledge.selectors import chunk_search

pytestmark = pytest.mark.django_db

SENTENCE = "The lighthouse keeper on {name}'s island counted the ships that passed the rocky cape. "


def user_with_documents(name: str, sentences: int = 3000) -> int:
    """A user whose knowledge base fills a matrix of 1024 rows or so (~1 MB)."""
    owner = get_user_model().objects.create_user(username=name)
    services.document_ingest(owner_id=owner.pk, filename=f"{name}.txt", content=SENTENCE.format(name=name) * sentences)
    return owner.pk


def search(owner_id: int, name: str) -> list[str]:
    return [hit.filename for hit in chunk_search(owner_id=owner_id, query=f"{name} lighthouse", top_k=1)]


def test_the_cache_keeps_the_most_recent_searchers_within_its_byte_budget(settings):
    names = ["ada", "bob", "cy"]
    owners = {name: user_with_documents(name) for name in names}
    index.matrices_forget()
    assert search(owners["ada"], "ada") == ["ada.txt"]
    one_matrix = index.cached_matrix(owners["ada"]).nbytes
    settings.AGENTSITE_KB_INDEX_CACHE_BYTES = one_matrix * 5 // 2  # room for two matrices, not three

    assert search(owners["bob"], "bob") == ["bob.txt"]
    assert search(owners["ada"], "ada") == ["ada.txt"]  # ada is now the most recent
    assert search(owners["cy"], "cy") == ["cy.txt"]
    assert index.cached_owners() == [owners["ada"], owners["cy"]], "not the least recently used was evicted"
    assert index.cache_nbytes() <= settings.AGENTSITE_KB_INDEX_CACHE_BYTES
    assert index.cache_nbytes() == sum(index._cache.peek(owner).nbytes for owner in index.cached_owners())

    assert search(owners["bob"], "bob") == ["bob.txt"], "an evicted owner's search went wrong"
    assert index.cached_owners() == [owners["cy"], owners["bob"]]


def test_a_matrix_larger_than_the_whole_budget_serves_its_search_and_is_not_kept(settings):
    big = user_with_documents("big")
    small = user_with_documents("small", sentences=10)
    assert search(small, "small") == ["small.txt"]
    settings.AGENTSITE_KB_INDEX_CACHE_BYTES = index.cached_matrix(small).nbytes * 4
    assert search(big, "big") == ["big.txt"]
    assert search(big, "big") == ["big.txt"]
    assert index.cached_owners() == [small]
    assert index.cache_nbytes() <= settings.AGENTSITE_KB_INDEX_CACHE_BYTES


def test_a_document_added_in_this_process_that_outgrows_the_budget_evicts_others(
        settings, django_capture_on_commit_callbacks):
    first, second = user_with_documents("first"), user_with_documents("second")
    assert search(first, "first") == ["first.txt"] and search(second, "second") == ["second.txt"]
    settings.AGENTSITE_KB_INDEX_CACHE_BYTES = index.cache_nbytes() + 1024
    with django_capture_on_commit_callbacks(execute=True):  # the patch runs once the add has committed
        services.document_ingest(owner_id=second, filename="more.txt", content="Gulls nest on the cliffs. " * 3000)
    assert index.cached_owners() == [second], "the patched matrix did not evict the least recent one"
    assert index.cache_nbytes() <= settings.AGENTSITE_KB_INDEX_CACHE_BYTES
    assert [hit.filename for hit in chunk_search(owner_id=second, query="gulls nest", top_k=1)] == ["more.txt"]
    assert search(first, "first") == ["first.txt"]


def test_a_matrix_built_from_the_database_holds_no_spare_rows():
    owner = user_with_documents("exact", sentences=5000)
    index.matrices_forget()
    search(owner, "exact")
    matrix = index.cached_matrix(owner)
    assert len(matrix.buffer) == matrix.size, "the matrix was built with room it does not use"
