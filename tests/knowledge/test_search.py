import numpy as np
import pytest

from agentsite.core.errors import AppError
from knowledge import index, services
from knowledge.embedding import embed, from_bytes
from knowledge.models import Chunk, Document, KnowledgeStamp
from knowledge.selectors import chunk_search, context_build

pytestmark = pytest.mark.django_db

CORPUS = {
    "giraffes.txt": "Giraffes are the tallest land animals. Their long necks reach the leaves of acacia trees "
                    "on the African savanna.",
    "moon.txt": "The Moon orbits the Earth every 27 days. Astronauts of Apollo 11 first landed on the Moon in 1969.",
    "bread.txt": "To bake bread, mix flour, water, yeast and salt. Knead the dough, let it rise, then bake it hot.",
    "penguins.txt": "Penguins are flightless birds. They swim in the cold southern oceans and eat fish and krill.",
    "长城.txt": "长城是中国古代的军事防御工程。它东起山海关，西至嘉峪关，全长超过两万公里。"
               "修建长城是为了抵御北方游牧民族的侵袭。",
    "熊猫.txt": "大熊猫是中国特有的物种，主要生活在四川、陕西和甘肃的山区。大熊猫最喜欢吃竹子，每天要吃十几公斤。",
    "北京.txt": "北京是中国的首都，也是全国的政治和文化中心。北京有故宫、天坛和颐和园等名胜古迹。",
    "富士山.txt": "富士山は日本で一番高い山です。高さは3776メートルで、静岡県と山梨県にまたがっています。",
}


def add(owner, filename: str, content: str) -> Document:
    return services.document_ingest(owner_id=owner.pk, filename=filename, content=content)


@pytest.fixture
def corpus(owner) -> dict[str, Document]:
    return {filename: add(owner, filename, text) for filename, text in CORPUS.items()}


@pytest.mark.parametrize(("query", "answer"), [
    ("When did astronauts land on the Moon?", "moon.txt"),
    ("how do I knead bread dough", "bread.txt"),
    ("which animals are the tallest", "giraffes.txt"),
    ("can penguins fly or swim", "penguins.txt"),
])
def test_search_ranks_the_document_that_answers_the_query_first(owner, corpus, query, answer):
    hits = chunk_search(owner_id=owner.pk, query=query, top_k=3)
    assert hits[0].filename == answer
    assert hits[0].document_id == corpus[answer].pk
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


@pytest.mark.parametrize(("query", "answer"), [
    ("大熊猫喜欢吃什么？", "熊猫.txt"),
    ("长城有多长", "长城.txt"),
    ("中国的首都是哪里", "北京.txt"),
    ("日本で一番高い山は？", "富士山.txt"),
])
def test_a_chinese_or_japanese_document_is_found_by_a_query_in_its_language(owner, corpus, query, answer):
    assert chunk_search(owner_id=owner.pk, query=query, top_k=5)[0].filename == answer


def test_search_returns_at_most_top_k_chunks_best_first(owner):
    add(owner, "many.txt", "".join(f"Sentence {n} mentions the lighthouse keeper. " * 12 + "\n" for n in range(20)))
    hits = chunk_search(owner_id=owner.pk, query="lighthouse keeper", top_k=4)
    assert len(hits) == 4
    assert all(0 < hit.score <= 1 for hit in hits)
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)


def test_a_query_sharing_no_word_with_any_chunk_finds_nothing(owner, corpus):
    assert chunk_search(owner_id=owner.pk, query="!!! ???", top_k=5) == []
    assert chunk_search(owner_id=owner.pk, query="moon", top_k=5)[0].filename == "moon.txt"


def test_search_never_returns_another_owners_chunks(owner, other_user, corpus):
    add(other_user, "other.txt", "The other user's notes about the Moon landing.")
    assert chunk_search(owner_id=other_user.pk, query="giraffes tallest animals", top_k=50) == []
    hits = chunk_search(owner_id=other_user.pk, query="Moon landing", top_k=50)
    assert {hit.filename for hit in hits} == {"other.txt"}


def test_ingest_stores_each_chunk_in_order_with_the_embedding_of_its_text(owner):
    text = "".join(f"Line {n} of a longer document about rivers and lakes.\n" for n in range(40))
    document = add(owner, "rivers.txt", text)
    chunks = list(Chunk.objects.filter(document=document).order_by("index"))
    assert document.chunk_count == len(chunks) > 1
    assert [chunk.index for chunk in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert np.allclose(from_bytes(chunk.vector), embed(chunk.text))
    assert document.size == len(text.encode()) and document.content == text


def test_a_failure_mid_ingest_leaves_nothing_stored(owner, monkeypatch):
    add(owner, "kept.txt", "A document that was there before.")
    stamp_before = KnowledgeStamp.objects.get(key=owner.pk).value
    real_insert = services._chunks_insert

    def insert_then_fail(**kwargs):
        assert real_insert(**kwargs)  # the document and its chunks are written...
        raise RuntimeError("...and then the process fails")

    monkeypatch.setattr(services, "_chunks_insert", insert_then_fail)
    with pytest.raises(RuntimeError):
        add(owner, "lost.txt", "This document must not be stored. " * 100)
    assert list(Document.objects.values_list("filename", flat=True)) == ["kept.txt"]
    assert Chunk.objects.count() == 1
    assert KnowledgeStamp.objects.get(key=owner.pk).value == stamp_before


def test_an_empty_document_is_refused_and_nothing_is_stored(owner):
    with pytest.raises(AppError) as error:
        add(owner, "blank.txt", " \n\t ")
    assert error.value.code == "empty_document"
    assert not Document.objects.exists() and not Chunk.objects.exists()


def test_delete_and_clear_remove_the_chunks_from_search(owner, corpus):
    services.document_delete(owner_id=owner.pk, document_id=corpus["moon.txt"].pk)
    assert all(hit.filename != "moon.txt" for hit in chunk_search(owner_id=owner.pk, query="Moon", top_k=50))
    assert services.documents_clear(owner_id=owner.pk) == len(CORPUS) - 1
    assert chunk_search(owner_id=owner.pk, query="giraffes", top_k=50) == []
    assert not Chunk.objects.exists()


def test_deleting_another_owners_document_is_not_found(owner, other_user, corpus):
    with pytest.raises(AppError) as error:
        services.document_delete(owner_id=other_user.pk, document_id=corpus["moon.txt"].pk)
    assert error.value.status == 404
    assert Document.objects.filter(pk=corpus["moon.txt"].pk).exists()


def test_the_matrix_is_reused_until_the_stamp_changes(owner, corpus):
    chunk_search(owner_id=owner.pk, query="moon", top_k=1)
    first = index.cached_matrix(owner.pk)
    chunk_search(owner_id=owner.pk, query="bread", top_k=1)
    assert index.cached_matrix(owner.pk) is first
    add(owner, "mars.txt", "Mars is the red planet.")  # on_commit does not run here: the stamp must tell
    assert chunk_search(owner_id=owner.pk, query="red planet Mars", top_k=1)[0].filename == "mars.txt"
    assert index.cached_matrix(owner.pk).size == first.size + 1


def test_context_is_filename_prefixed_chunks_best_first_within_max_chars(owner, corpus):
    context = context_build(owner_id=owner.pk, query="Moon astronauts bread", max_chars=4000, top_k=2)
    assert [hit.filename for hit in context.hits] == ["moon.txt", "bread.txt"]
    assert context.text == f"[moon.txt] {CORPUS['moon.txt']}\n\n[bread.txt] {CORPUS['bread.txt']}"
    cut = context_build(owner_id=owner.pk, query="Moon astronauts bread", max_chars=60, top_k=2)
    assert cut.text == context.text[:60]
    assert [hit.filename for hit in cut.hits] == ["moon.txt"]


def test_context_leaves_out_an_entry_whose_header_would_not_fit(owner, corpus):
    full = context_build(owner_id=owner.pk, query="Moon astronauts bread", max_chars=4000, top_k=2)
    first_entry = f"[moon.txt] {CORPUS['moon.txt']}"
    budget = len(first_entry) + len("\n\n[bread.txt] ")
    context = context_build(owner_id=owner.pk, query="Moon astronauts bread", max_chars=budget, top_k=2)
    assert context.text == first_entry
    assert len(context.hits) == 1
    assert full.text.startswith(context.text)
