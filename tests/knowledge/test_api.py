import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from catalogue.models import AgentConfig
from knowledge.models import Chunk, Document
from tests.knowledge.conftest import minimal_pdf

pytestmark = pytest.mark.django_db

MOON = "The Moon orbits the Earth every 27 days. Astronauts of Apollo 11 first landed on the Moon in 1969."
BREAD = "To bake bread, mix flour, water, yeast and salt. Knead the dough, let it rise, then bake it hot."


def add(client, filename: str, content: str, **extra) -> dict:
    response = client.post("/api/kb/documents", {"filename": filename, "content": content, **extra}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def upload(client, filename: str, data: bytes, content_type: str):
    return client.post("/api/kb/documents", {"file": SimpleUploadedFile(filename, data, content_type)},
                       format="multipart")


def error_code(response) -> str:
    return response.json()["error"]["code"]


def test_adding_a_json_document_answers_its_id_filename_and_chunk_count(owner_client):
    created = add(owner_client, "moon.txt", MOON)
    assert set(created) == {"id", "filename", "chunks"}
    assert created["filename"] == "moon.txt" and created["chunks"] == 1
    document = Document.objects.get(pk=created["id"])
    assert document.content == MOON and document.content_type == "text/plain" and document.size == len(MOON)


def test_the_document_list_is_paginated_newest_first_with_chunk_counts(owner_client):
    ids = [add(owner_client, f"doc{n}.txt", MOON * (n + 1) * 3)["id"] for n in range(3)]
    body = owner_client.get("/api/kb/documents?limit=2").json()
    assert body["count"] == 3 and body["next"] and body["previous"] is None
    assert [row["id"] for row in body["results"]] == ids[::-1][:2]
    row = body["results"][0]
    assert set(row) == {"id", "filename", "content_type", "chunks", "size", "created_at"}
    assert row["chunks"] == Chunk.objects.filter(document_id=ids[2]).count() > 1
    assert row["size"] == len(MOON) * 9 and row["content_type"] == "text/plain"
    rest = owner_client.get("/api/kb/documents?limit=2&offset=2").json()
    assert [row["id"] for row in rest["results"]] == ids[:1]


def test_search_answers_chunks_with_their_document_best_first(owner_client):
    moon = add(owner_client, "moon.txt", MOON)
    add(owner_client, "bread.txt", BREAD)
    response = owner_client.post("/api/kb/search", {"query": "when did astronauts land on the moon"}, format="json")
    assert response.status_code == 200
    results = response.json()["results"]
    assert results[0] == {"chunk": {"text": MOON, "index": 0}, "score": results[0]["score"],
                          "rank_score": results[0]["rank_score"],
                          "document": {"id": moon["id"], "filename": "moon.txt"},
                          "collection": {"id": results[0]["collection"]["id"], "name": "Personal"}}
    assert [result["rank_score"] for result in results] == sorted((r["rank_score"] for r in results), reverse=True)
    assert 0 < results[0]["score"] <= 1  # the cosine similarity


def test_search_top_k_limits_the_results(owner_client):
    add(owner_client, "long.txt", "The lighthouse keeper climbs the stairs. " * 200)
    response = owner_client.post("/api/kb/search", {"query": "lighthouse keeper", "topK": 3}, format="json")
    assert len(response.json()["results"]) == 3
    default = owner_client.post("/api/kb/search", {"query": "lighthouse keeper"}, format="json")
    assert len(default.json()["results"]) == 5


@pytest.mark.parametrize("body", [{}, {"query": ""}, {"query": "x", "topK": 0}, {"query": "x", "topK": 51},
                                  {"query": "x", "topK": "many"}, {"query": "x", "mode": "semantic"},
                                  {"query": "x", "mode": 3}])
def test_a_bad_search_request_is_invalid(owner_client, body):
    response = owner_client.post("/api/kb/search", body, format="json")
    assert response.status_code == 400
    assert error_code(response) == "invalid"


def test_context_joins_filename_prefixed_chunks_within_max_chars(owner_client):
    add(owner_client, "moon.txt", MOON)
    add(owner_client, "bread.txt", BREAD)
    query = {"query": "Moon astronauts and bread", "topK": 2}
    full = owner_client.post("/api/kb/context", query, format="json").json()["context"]
    assert full == f"[moon.txt] {MOON}\n\n[bread.txt] {BREAD}"
    cut = owner_client.post("/api/kb/context", {**query, "maxChars": 40}, format="json")
    assert cut.status_code == 200
    assert cut.json() == {"context": full[:40]}


def test_context_defaults_come_from_the_config(owner_client):
    AgentConfig.objects.update_or_create(pk=1, defaults={"kb_max_chars": 25, "kb_top_k": 1})
    add(owner_client, "moon.txt", MOON)
    response = owner_client.post("/api/kb/context", {"query": "the Moon"}, format="json")
    assert response.json()["context"] == f"[moon.txt] {MOON}"[:25]


def test_context_with_a_bad_max_chars_is_invalid(owner_client):
    response = owner_client.post("/api/kb/context", {"query": "x", "maxChars": 0}, format="json")
    assert response.status_code == 400
    assert error_code(response) == "invalid"


def test_deleting_a_document_removes_it_and_its_chunks(owner_client):
    moon = add(owner_client, "moon.txt", MOON)
    response = owner_client.delete(f"/api/kb/documents/{moon['id']}")
    assert response.status_code == 204
    assert not Chunk.objects.exists()
    assert owner_client.post("/api/kb/search", {"query": "Moon"}, format="json").json() == {"results": []}
    again = owner_client.delete(f"/api/kb/documents/{moon['id']}")
    assert again.status_code == 404 and error_code(again) == "not_found"


def test_deleting_an_unknown_document_is_not_found(owner_client):
    response = owner_client.delete(f"/api/kb/documents/{uuid.uuid4()}")
    assert response.status_code == 404 and error_code(response) == "not_found"


def test_clear_removes_only_the_callers_documents(owner_client, other_client):
    add(owner_client, "moon.txt", MOON)
    add(owner_client, "bread.txt", BREAD)
    theirs = add(other_client, "theirs.txt", MOON)
    response = owner_client.delete("/api/kb/clear")
    assert response.status_code == 204
    assert list(Document.objects.values_list("id", flat=True)) == [uuid.UUID(theirs["id"])]
    assert owner_client.get("/api/kb/documents").json()["count"] == 0


def test_another_users_document_is_not_found_and_not_listed_searched_or_deleted(owner_client, other_client):
    moon = add(owner_client, "moon.txt", MOON)
    delete = other_client.delete(f"/api/kb/documents/{moon['id']}")
    assert delete.status_code == 404 and error_code(delete) == "not_found"
    assert Document.objects.filter(pk=moon["id"]).exists()
    assert other_client.get("/api/kb/documents").json()["count"] == 0
    assert other_client.post("/api/kb/search", {"query": "Moon astronauts"}, format="json").json() == {"results": []}
    assert other_client.post("/api/kb/context", {"query": "Moon astronauts"}, format="json").json() == {"context": ""}
    other_client.delete("/api/kb/clear")
    assert Document.objects.filter(pk=moon["id"]).exists()


@pytest.mark.parametrize(("method", "path"), [
    ("get", "/api/kb/documents"), ("post", "/api/kb/documents"), ("delete", f"/api/kb/documents/{uuid.uuid4()}"),
    ("post", "/api/kb/search"), ("post", "/api/kb/context"), ("delete", "/api/kb/clear"),
])
def test_every_knowledge_endpoint_needs_a_token(anon_client, method, path):
    response = getattr(anon_client, method)(path, {}, format="json")
    assert response.status_code == 401
    assert error_code(response) == "not_authenticated"


# --- adding by upload -------------------------------------------------------------------------------

def test_a_text_upload_is_stored_as_its_text(owner_client):
    response = upload(owner_client, "notes.txt", MOON.encode(), "text/plain")
    assert response.status_code == 201
    assert response.json()["filename"] == "notes.txt"
    document = Document.objects.get()
    assert (document.content, document.content_type, document.size) == (MOON, "text/plain", len(MOON))


def test_a_markdown_upload_is_kept_as_markdown_text(owner_client):
    markdown = "# Baking\n\n" + BREAD + "\n\n- flour\n- water\n"
    response = upload(owner_client, "bread.md", markdown.encode(), "application/octet-stream")
    assert response.status_code == 201
    document = Document.objects.get()
    assert document.content == markdown and document.content_type == "text/markdown"


def test_an_html_upload_is_turned_into_its_visible_text(owner_client):
    html = ("<html><head><title>t</title><style>p {color: red}</style></head><body><h1>Giraffes</h1>"
            "<p>Giraffes are the <b>tallest</b> land animals.</p><script>alert('x')</script></body></html>")
    response = upload(owner_client, "giraffes.html", html.encode(), "text/html; charset=utf-8")
    assert response.status_code == 201
    document = Document.objects.get()
    assert document.content_type == "text/html"
    assert "Giraffes are the" in document.content and "tallest" in document.content
    assert "<" not in document.content and "alert" not in document.content and "color" not in document.content
    hits = owner_client.post("/api/kb/search", {"query": "tallest animals"}, format="json").json()["results"]
    assert hits[0]["document"]["filename"] == "giraffes.html"


def test_a_pdf_upload_is_stored_as_its_extracted_text(owner_client):
    pdf = minimal_pdf(["Penguins are flightless birds.", "They swim in cold southern oceans."])
    response = upload(owner_client, "penguins.pdf", pdf, "application/pdf")
    assert response.status_code == 201, response.content
    document = Document.objects.get()
    assert document.content_type == "application/pdf" and document.size == len(pdf)
    assert "Penguins are flightless birds." in document.content
    hits = owner_client.post("/api/kb/search", {"query": "can penguins swim"}, format="json").json()["results"]
    assert hits[0]["document"]["filename"] == "penguins.pdf"


@pytest.mark.parametrize(("filename", "content_type"), [
    ("photo.png", "image/png"), ("data.bin", "application/octet-stream"), ("sheet.xlsx", "application/vnd.ms-excel"),
])
def test_an_unsupported_upload_type_is_refused_with_415(owner_client, filename, content_type):
    response = upload(owner_client, filename, b"\x89PNG\r\n\x1a\n\x00\x00", content_type)
    assert response.status_code == 415
    assert error_code(response) == "unsupported_media_type"
    assert not Document.objects.exists()


@pytest.mark.parametrize(("filename", "data", "content_type", "code"), [
    ("empty.txt", b"", "text/plain", "empty_document"),
    ("blank.md", b"  \n\n\t", "text/markdown", "empty_document"),
    ("empty.html", b"<html><body><script>x()</script></body></html>", "text/html", "empty_document"),
    ("empty.pdf", minimal_pdf([]), "application/pdf", "empty_document"),
    ("latin1.txt", "caf\xe9 cr\xe8me".encode("latin-1"), "text/plain", "unreadable_document"),
    ("binary.txt", bytes(range(256)) * 4, "text/plain", "unreadable_document"),
    ("broken.pdf", b"%PDF-1.4\nthis is not really a pdf", "application/pdf", "unreadable_document"),
])
def test_an_empty_or_unreadable_upload_answers_400_and_stores_nothing(owner_client, filename, data, content_type,
                                                                      code):
    response = upload(owner_client, filename, data, content_type)
    assert response.status_code == 400
    assert error_code(response) == code
    assert not Document.objects.exists() and not Chunk.objects.exists()


def test_a_declared_charset_is_used_to_read_a_text_upload(owner_client):
    response = upload(owner_client, "menu.txt", "café crème".encode("latin-1"), "text/plain; charset=latin-1")
    assert response.status_code == 201
    assert Document.objects.get().content == "café crème"


def test_an_empty_json_document_answers_400_and_stores_nothing(owner_client):
    response = owner_client.post("/api/kb/documents", {"filename": "a.txt", "content": "   "}, format="json")
    assert response.status_code == 400
    assert error_code(response) == "empty_document"
    assert not Document.objects.exists()


@pytest.mark.parametrize("body", [{"content": "text"}, {"filename": "", "content": "text"},
                                  {"filename": "a" * 256, "content": "text"}, {"filename": "a.txt"}])
def test_a_json_document_without_a_valid_filename_or_content_is_invalid(owner_client, body):
    response = owner_client.post("/api/kb/documents", body, format="json")
    assert response.status_code == 400
    assert error_code(response) == "invalid"


def test_a_multipart_request_without_a_file_is_invalid(owner_client):
    response = owner_client.post("/api/kb/documents", {"filename": "a.txt"}, format="multipart")
    assert response.status_code == 400
    assert error_code(response) == "invalid"


def test_json_html_content_is_turned_into_text_and_json_pdf_is_refused(owner_client):
    created = add(owner_client, "page.html", "<p>Hello <i>there</i></p>", content_type="text/html")
    assert Document.objects.get(pk=created["id"]).content == "Hello\nthere"
    response = owner_client.post("/api/kb/documents", {"filename": "a.pdf", "content": "x",
                                                       "content_type": "application/pdf"}, format="json")
    assert response.status_code == 415 and error_code(response) == "unsupported_media_type"


def test_the_openapi_schema_documents_the_knowledge_endpoints(anon_client):
    schema = anon_client.get("/api/schema?format=json").json()
    for path in ["/api/kb/documents", "/api/kb/documents/{id}", "/api/kb/search", "/api/kb/context",
                 "/api/kb/clear"]:
        assert path in schema["paths"], path
    listing = schema["paths"]["/api/kb/documents"]["get"]["responses"]["200"]["content"]["application/json"]
    assert "Paginated" in listing["schema"]["$ref"]
    assert "multipart/form-data" in schema["paths"]["/api/kb/documents"]["post"]["requestBody"]["content"]
