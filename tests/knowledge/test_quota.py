"""Each user's knowledge base has a quota (AGENTSITE_KB_QUOTA_MB), counted on what their documents store."""

from __future__ import annotations

import threading

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agentsite.core.errors import AppError
from knowledge import lexical, services
from knowledge.chunking import chunk_text
from knowledge.embedding import DIMENSIONS
from knowledge.models import Chunk, Document
from knowledge.selectors import chunk_search, kb_usage_for
from tests.conftest import client_for

pytestmark = pytest.mark.django_db

SENTENCE = "The lighthouse keeper counted the ships that passed the rocky cape at night. "


def add(client, filename: str, content: str):
    return client.post("/api/kb/documents", {"filename": filename, "content": content}, format="json")


def lexical_entries(document_id) -> dict[int, str]:
    """Chunk id -> its row in the lexical index as stored (SQLite: the terms; PostgreSQL: the tsvector's text)."""
    ids = list(Chunk.objects.filter(document_id=document_id).values_list("id", flat=True))
    with connection.cursor() as cursor:
        if connection.vendor == "sqlite":
            marks = ", ".join(["%s"] * len(ids))
            cursor.execute(f"SELECT rowid, terms FROM {lexical.FTS_TABLE} WHERE rowid IN ({marks})", ids)
        else:
            cursor.execute(f"SELECT chunk_id, terms::text FROM {lexical.PG_TABLE} WHERE chunk_id = ANY(%s)", [ids])
        return dict(cursor.fetchall())


def stored_in_database(document_id) -> int:
    """What the document's rows hold: its text, each chunk's text and vector, and its lexical entry (its terms
    twice: the stored copy and the postings), all as bytes."""
    document = Document.objects.get(pk=document_id)
    chunks = list(Chunk.objects.filter(document=document).values_list("id", "text", "vector"))
    entries = lexical_entries(document_id)
    assert set(entries) == {chunk_id for chunk_id, _, _ in chunks}  # every chunk is indexed
    if connection.vendor == "sqlite":  # the stored terms, less the owner's prefix of each
        prefix = f"{document.owner_id}x"
        lexical_bytes = sum(2 * len(" ".join(term.removeprefix(prefix) for term in entry.split()).encode())
                            for entry in entries.values())
    else:  # a tsvector keeps stems, not the words: count the words the database was given
        lexical_bytes = sum(lexical.stored_bytes(lexical.terms(text)) for _, text, _ in chunks)
    return len(document.content.encode()) + sum(len(text.encode()) + len(bytes(vector))
                                                for _, text, vector in chunks) + lexical_bytes


def assert_quota_exceeded(response, *, used: int, quota: int) -> None:
    assert response.status_code == 413, response.content
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"]["used_bytes"] == used and error["details"]["quota_bytes"] == quota
    assert used + error["details"]["size"] > quota


def test_a_documents_stored_size_is_what_its_rows_hold():
    from django.contrib.auth import get_user_model

    owner = get_user_model().objects.create_user(username="sizer")
    text = "Grüße aus Köln. 大熊猫喜欢吃竹子。" + SENTENCE * 40
    document = services.document_ingest(owner_id=owner.pk, filename="a.txt", content=text)
    assert document.stored_bytes == stored_in_database(document.pk) > len(text.encode()) + DIMENSIONS * 4
    assert kb_usage_for(owner_id=owner.pk) == document.stored_bytes


def test_a_document_past_the_quota_is_413_and_nothing_is_stored_until_room_is_made(owner, owner_client, settings):
    first = add(owner_client, "first.txt", SENTENCE * 20)
    assert first.status_code == 201
    used = kb_usage_for(owner_id=owner.pk)
    settings.AGENTSITE_KB_QUOTA_BYTES = quota = used * 2 + 100

    second = add(owner_client, "second.txt", SENTENCE * 20 + "Gulls.")
    assert second.status_code == 201, "a document that fits was refused"
    used = kb_usage_for(owner_id=owner.pk)
    assert_quota_exceeded(add(owner_client, "third.txt", "Seals rest on the rocks. " + SENTENCE * 5),
                          used=used, quota=quota)
    assert Document.objects.filter(owner=owner).count() == 2
    assert chunk_search(owner_id=owner.pk, query="seals rest") == [], "the refused document is searchable"

    assert owner_client.delete(f"/api/kb/documents/{first.json()['id']}").status_code == 204
    assert add(owner_client, "third.txt", "Seals rest on the rocks. " + SENTENCE * 5).status_code == 201
    assert chunk_search(owner_id=owner.pk, query="seals rest")[0].filename == "third.txt"


def test_an_uploaded_file_past_the_quota_is_413_too(owner, owner_client, settings):
    settings.AGENTSITE_KB_QUOTA_BYTES = 3000
    response = owner_client.post("/api/kb/documents", format="multipart", data={
        "file": SimpleUploadedFile("big.md", (SENTENCE * 40).encode(), "text/markdown")})
    assert_quota_exceeded(response, used=0, quota=3000)
    assert not Document.objects.filter(owner=owner).exists()


def test_one_users_documents_do_not_use_another_users_quota(owner, owner_client, other_user, settings):
    assert add(owner_client, "mine.txt", SENTENCE * 20).status_code == 201
    settings.AGENTSITE_KB_QUOTA_BYTES = kb_usage_for(owner_id=owner.pk)
    assert add(client_for(other_user), "theirs.txt", SENTENCE * 20).status_code == 201
    assert add(owner_client, "more.txt", "One more.").status_code == 413


def test_a_quota_of_zero_turns_it_off(owner_client, settings):
    settings.AGENTSITE_KB_QUOTA_BYTES = 0
    assert add(owner_client, "a.txt", SENTENCE * 200).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_adds_cannot_both_pass_the_quota(owner, settings, monkeypatch):
    if connection.vendor == "sqlite":
        pytest.skip("PostgreSQL only: on SQLite every add is one IMMEDIATE transaction, so adds never overlap")
    text = SENTENCE * 20
    size = services.stored_size(text=text, chunks=chunk_text(text))
    settings.AGENTSITE_KB_QUOTA_BYTES = size * 3 // 2  # room for one of the two
    both_checked = threading.Barrier(2)
    real_embed_many = services.embed_many

    def embed_after_both_checked(texts, *tokens):  # between the unlocked check and the locked one
        both_checked.wait(timeout=10)
        return real_embed_many(texts, *tokens)

    monkeypatch.setattr(services, "embed_many", embed_after_both_checked)
    outcomes: list[str] = []

    def add_one(number: int) -> None:
        try:
            services.document_ingest(owner_id=owner.pk, filename=f"{number}.txt", content=text)
            outcomes.append("stored")
        except AppError as error:
            outcomes.append(error.code)
        finally:
            connection.close()

    threads = [threading.Thread(target=add_one, args=(number,)) for number in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(outcomes) == ["quota_exceeded", "stored"]
    assert Document.objects.filter(owner=owner).count() == 1


@pytest.mark.django_db(transaction=True)
def test_the_migration_gives_existing_documents_their_stored_size(owner):
    executor = MigrationExecutor(connection)
    executor.migrate([("knowledge", "0001_initial")])
    old = executor.loader.project_state([("knowledge", "0001_initial")]).apps
    document = old.get_model("knowledge", "Document").objects.create(
        owner_id=owner.pk, filename="old.txt", content="Grüße. Hello there.", size=20)
    chunk_model = old.get_model("knowledge", "Chunk")
    chunk_model.objects.create(document=document, index=0, text="Grüße. ", vector=b"\0" * 1024)
    chunk_model.objects.create(document=document, index=1, text="Hello there.", vector=b"\0" * 1024)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
    # Text, chunks, vectors, and each chunk's lexical terms twice ("there" is a stop word).
    expected = (len("Grüße. Hello there.".encode()) + len("Grüße. ".encode()) + len(b"Hello there.") + 2 * 1024
                + 2 * len("grüße".encode()) + 2 * len(b"hello"))
    assert Document.objects.get(pk=document.pk).stored_bytes == expected
    # ...and the existing chunks were indexed by the migration: a lexical search finds them.
    hits = chunk_search(owner_id=owner.pk, query="hello", top_k=5, mode="lexical")
    assert [(hit.filename, hit.index) for hit in hits] == [("old.txt", 1)]
