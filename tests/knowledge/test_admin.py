import pytest
from django.test import Client

from knowledge import services
from knowledge.models import Chunk, Document, KnowledgeStamp

pytestmark = pytest.mark.django_db


@pytest.fixture
def admin_site(admin) -> Client:
    client = Client()
    client.force_login(admin)
    return client


@pytest.fixture
def document(owner) -> Document:
    return services.document_ingest(owner_id=owner.pk, filename="lighthouse.txt",
                                    content="The lighthouse keeper climbs the stairs every night. " * 30)


def test_the_document_admin_lists_documents_with_their_chunk_counts(admin_site, document):
    response = admin_site.get("/admin/knowledge/document/")
    assert response.status_code == 200
    assert b"lighthouse.txt" in response.content
    assert f'<td class="field-chunk_count">{document.chunk_count}</td>'.encode() in response.content
    assert admin_site.get(f"/admin/knowledge/document/{document.pk}/change/").status_code == 200


def test_the_chunk_admin_lists_chunks(admin_site, document):
    response = admin_site.get("/admin/knowledge/chunk/")
    assert response.status_code == 200
    assert b"The lighthouse keeper" in response.content
    chunk = Chunk.objects.first()
    assert admin_site.get(f"/admin/knowledge/chunk/{chunk.pk}/change/").status_code == 200


def test_deleting_documents_in_the_admin_goes_through_the_service(admin_site, document, owner):
    stamp = KnowledgeStamp.objects.get(key=document.collection.key).value
    response = admin_site.post("/admin/knowledge/document/", {
        "action": "delete_selected", "_selected_action": [str(document.pk)], "post": "yes"})
    assert response.status_code == 302
    assert not Document.objects.exists() and not Chunk.objects.exists()
    assert KnowledgeStamp.objects.get(key=document.collection.key).value != stamp
