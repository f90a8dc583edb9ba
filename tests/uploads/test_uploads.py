"""Uploads through the API in one process: types sniffed from the bytes, names that never become paths, the
size limit and the quota, ownership, and failures that leave no file and no row."""

from __future__ import annotations

import base64
import hashlib
import os
import stat
import threading
import time
import uuid

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import Client

from tests.uploads.conftest import image_bytes, minimal_pdf, png_with_header, stored_files
from uploads import selectors, services
from uploads.models import Upload

pytestmark = pytest.mark.django_db

MB = 1024 * 1024


def _multipart(client, name: str, data: bytes, content_type: str = "application/octet-stream"):
    return client.post("/api/upload", {"file": SimpleUploadedFile(name, data, content_type=content_type)},
                       format="multipart")


def _json(client, name: str, data: bytes, **extra):
    return client.post("/api/upload", {"filename": name, "content_base64": base64.b64encode(data).decode(),
                                       **extra}, format="json")


def _error(response, status: int, code: str) -> dict:
    assert response.status_code == status, response.content[:500]
    body = response.json()
    assert body["error"]["code"] == code, body
    return body["error"]


# --- storing --------------------------------------------------------------------------------------

def test_a_multipart_image_is_stored_under_a_generated_name_with_its_sniffed_type_size_and_hash(owner_client, media):
    png = image_bytes("PNG")

    response = _multipart(owner_client, "cat.png", png, "image/png")

    assert response.status_code == 201, response.content
    body = response.json()
    assert {key: body[key] for key in ("filename", "content_type", "size", "sha256", "is_image")} == {
        "filename": "cat.png", "content_type": "image/png", "size": len(png),
        "sha256": hashlib.sha256(png).hexdigest(), "is_image": True}
    assert body["url"] == f"http://testserver/api/uploads/{body['id']}"
    upload_id = uuid.UUID(body["id"])
    [path] = stored_files(media)
    assert path == media / "uploads" / upload_id.hex[:2] / upload_id.hex
    assert path.read_bytes() == png
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


def test_a_json_upload_takes_base64_or_a_data_url_and_stores_the_same_bytes(owner_client, media):
    text = "# Notes\n\nÉté 2026: bring the tent.\n".encode()
    plain = _json(owner_client, "notes.md", text)
    data_url = owner_client.post("/api/upload", {"filename": "again.md", "content_base64": "data:text/plain;base64,"
                                                 + base64.encodebytes(text).decode()}, format="json")

    for response in (plain, data_url):
        assert response.status_code == 201, response.content
        assert (response.json()["content_type"], response.json()["size"]) == ("text/markdown", len(text))
    assert [path.read_bytes() for path in stored_files(media)] == [text, text]


@pytest.mark.parametrize("declared", ["text/html", "application/pdf", ""])
def test_the_type_the_client_declares_is_never_believed(owner_client, media, declared):
    png = image_bytes("PNG")
    as_image = _multipart(owner_client, "page.html", png, declared or "application/octet-stream")
    as_text = _json(owner_client, "photo.jpg", b"just some words\n", content_type=declared or "image/jpeg")

    assert (as_image.json()["content_type"], as_image.json()["is_image"]) == ("image/png", True)
    assert (as_text.json()["content_type"], as_text.json()["is_image"]) == ("text/plain", False)


def test_an_html_file_uploaded_as_an_image_is_stored_as_html_and_served_only_as_an_attachment(owner_client, media):
    html = b"<!DOCTYPE html><html><body><script>fetch('/api/auth/me')</script></body></html>"

    created = _multipart(owner_client, "cat.png", html, "image/png")

    assert created.status_code == 201, created.content
    assert (created.json()["content_type"], created.json()["is_image"]) == ("text/html", False)
    fetched = owner_client.get(f"/api/uploads/{created.json()['id']}")
    assert fetched.status_code == 200
    assert fetched["Content-Type"] == "text/html; charset=utf-8"
    assert fetched["Content-Disposition"] == 'attachment; filename="cat.png"'
    assert fetched["X-Content-Type-Options"] == "nosniff"
    assert fetched["Content-Security-Policy"] == "default-src 'none'; sandbox"
    assert fetched.content == html


def test_an_image_is_served_inline_with_its_type(owner_client, media):
    gif = image_bytes("GIF")
    created = _multipart(owner_client, "dot.gif", gif)

    fetched = owner_client.get(f"/api/uploads/{created.json()['id']}", HTTP_ACCEPT="image/avif,image/webp")

    assert fetched.status_code == 200
    assert (fetched["Content-Type"], fetched["Content-Disposition"]) == ("image/gif", 'inline; filename="dot.gif"')
    assert fetched["X-Content-Type-Options"] == "nosniff"
    assert fetched.content == gif


@pytest.mark.parametrize(("filename", "label"), [
    ("../../../../etc/passwd", "passwd"),
    ("..\\..\\windows\\system32\\evil.txt", "evil.txt"),
    ("/var/lib/agentsite/config.json", "config.json"),
    ("..", "upload"),
    ("notes\r\nSet-Cookie: a=b.txt", "notesSet-Cookie: a=b.txt"),
    ("\u202etxt.exe", "txt.exe"),
])
def test_a_path_traversal_filename_is_only_a_label(owner_client, media, tmp_path, filename, label):
    created = _json(owner_client, filename, b"harmless text\n")

    assert created.status_code == 201, created.content
    assert created.json()["filename"] == label
    upload_id = uuid.UUID(created.json()["id"])
    assert stored_files(tmp_path) == [media / "uploads" / upload_id.hex[:2] / upload_id.hex]
    fetched = owner_client.get(f"/api/uploads/{upload_id}")
    assert "\r" not in fetched["Content-Disposition"] and "\n" not in fetched["Content-Disposition"]
    assert fetched["Content-Disposition"].startswith("attachment; filename")


def test_a_multipart_filename_with_a_path_is_cut_to_its_last_segment(owner_client, media, tmp_path):
    created = _multipart(owner_client, "../../outside.txt", b"text\n")

    assert created.json()["filename"] == "outside.txt"
    assert len(stored_files(tmp_path)) == 1 and not (tmp_path.parent / "outside.txt").exists()


@pytest.mark.parametrize(("data", "filename", "expected"), [
    (minimal_pdf("hello"), "x.bin", "application/pdf"),
    (b"PK\x03\x04\x14\x00\x00\x00rest-of-zip", "x.txt", "application/zip"),
    (b"RIFF\x24\x00\x00\x00WAVEfmt ", "a.mp3", "audio/wav"),
    (b"ID3\x04\x00\x00\x00\x00\x00\x00\xff\xfb\x90\x00\xc3\x28", "a.txt", "audio/mpeg"),
    (b"OggS\x00\x02\x00\x00\x00\x00", "a.txt", "audio/ogg"),
    (b"\x1a\x45\xdf\xa3\x9f\x42\x86\x81", "a.txt", "video/webm"),
    (b"BMW makes cars.\n", "cars.bmp", "text/plain"),
    (b"ID3 tags name the song.\n", "notes.txt", "text/plain"),
    (b"a,b\n1,2\n", "table.csv", "text/csv"),
    (b'{"a": 1}', "data.json", "application/json"),
    (b"<svg xmlns='http://www.w3.org/2000/svg'><script>alert(1)</script></svg>", "logo.png", "image/svg+xml"),
    (b"<?xml version='1.0'?><note/>", "n.txt", "application/xml"),
    (b"  <p>hello</p>", "p.txt", "text/html"),
    ("\ufeffhéllo".encode("utf-16"), "u.txt", "text/plain"),
    (bytes(range(256)) * 4, "blob.png", "application/octet-stream"),
])
def test_the_type_comes_from_the_bytes(data, filename, expected):
    assert services.sniff(data, filename).content_type == expected


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "GIF", "WEBP"])
def test_the_four_web_image_formats_are_verified_images(fmt):
    sniffed = services.sniff(image_bytes(fmt), "x")
    assert (sniffed.content_type, sniffed.is_image) == (f"image/{fmt.lower()}", True)


@pytest.mark.parametrize("data", [image_bytes("PNG")[:40], image_bytes("JPEG")[:-30], b"GIF89a" + b"\x00" * 20,
                                  png_with_header(100_000, 100_000)])
def test_a_damaged_truncated_or_bomb_image_is_refused_and_nothing_is_stored(owner_client, media, data):
    response = _multipart(owner_client, "broken.png", data, "image/png")

    _error(response, 400, "invalid_image")
    assert stored_files(media) == [] and not Upload.objects.exists()


# --- limits ---------------------------------------------------------------------------------------

def test_a_file_over_the_size_limit_is_413_and_leaves_nothing(owner_client, media, settings):
    settings.AGENTSITE_UPLOAD_MAX_BYTES = 1000

    for response in (_multipart(owner_client, "big.txt", b"a" * 1001), _json(owner_client, "big.txt", b"a" * 1001)):
        error = _error(response, 413, "payload_too_large")
        assert error["details"] == {"size": 1001, "max_bytes": 1000}
    assert _multipart(owner_client, "fits.txt", b"a" * 1000).status_code == 201
    assert [path.stat().st_size for path in stored_files(media)] == [1000]
    assert Upload.objects.count() == 1


def test_the_quota_answers_413_with_the_space_used_and_frees_up_on_delete(owner_client, other_client, media,
                                                                          settings):
    settings.AGENTSITE_UPLOAD_QUOTA_BYTES = 1000
    first = _multipart(owner_client, "a.txt", b"a" * 600)

    refused = _multipart(owner_client, "b.txt", b"b" * 500)

    error = _error(refused, 413, "quota_exceeded")
    assert error["details"] == {"used_bytes": 600, "quota_bytes": 1000, "size": 500}
    assert len(stored_files(media)) == 1 and Upload.objects.count() == 1
    assert _multipart(other_client, "c.txt", b"c" * 500).status_code == 201  # a quota per user
    assert _multipart(owner_client, "d.txt", b"d" * 400).status_code == 201  # exactly full
    assert owner_client.delete(f"/api/uploads/{first.json()['id']}").status_code == 204
    assert _multipart(owner_client, "b.txt", b"b" * 500).status_code == 201


@pytest.mark.django_db(transaction=True)
def test_two_concurrent_uploads_cannot_both_fit_in_the_same_free_space(owner, media, settings, monkeypatch):
    """Each file fits alone, not both. The first to hold the owner's lock waits (up to 1 s) for the other to
    reach the quota check too: without the lock both would pass it and both be stored."""
    settings.AGENTSITE_UPLOAD_QUOTA_BYTES = 1000
    checked = threading.Barrier(2)
    real_usage = selectors.upload_usage_for
    locked_checks = []

    def usage_then_wait(*, owner_id):
        used = real_usage(owner_id=owner_id)
        if connection.in_atomic_block:  # the check made under the lock, just before the insert
            locked_checks.append(used)
            try:
                checked.wait(timeout=1.0)
            except threading.BrokenBarrierError:
                pass
        return used

    monkeypatch.setattr(selectors, "upload_usage_for", usage_then_wait)
    outcomes: list[object] = []

    def upload(name: str) -> None:
        try:
            outcomes.append(services.upload_create(owner_id=owner.pk, filename=name, data=b"x" * 600))
        except Exception as exc:  # noqa: BLE001 - the outcome is what the test compares
            outcomes.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=upload, args=(f"{n}.txt",)) for n in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)

    assert sorted(type(outcome).__name__ for outcome in outcomes) == ["AppError", "Upload"], outcomes
    refused = next(outcome for outcome in outcomes if not isinstance(outcome, Upload))
    assert (refused.status, refused.code, refused.details["used_bytes"]) == (413, "quota_exceeded", 600)
    assert sorted(locked_checks) == [0, 600]
    assert Upload.objects.count() == 1 and len(stored_files(media)) == 1


# --- reading and deleting -------------------------------------------------------------------------

def test_the_list_is_the_callers_newest_first_and_paginated(owner_client, other_client, media):
    ids = [_json(owner_client, f"{n}.txt", f"file {n}\n".encode()).json()["id"] for n in range(3)]
    _json(other_client, "theirs.txt", b"not yours\n")

    page = owner_client.get("/api/uploads?limit=2").json()

    assert page["count"] == 3 and page["next"] is not None
    assert [item["id"] for item in page["results"]] == ids[::-1][:2]
    assert set(page["results"][0]) == {"id", "filename", "content_type", "size", "sha256", "is_image", "url",
                                       "created_at"}


def test_another_users_upload_is_404_to_fetch_and_delete_and_stays(owner_client, other_client, media):
    created = _json(owner_client, "mine.txt", b"private\n").json()

    for response in (other_client.get(f"/api/uploads/{created['id']}"),
                     other_client.delete(f"/api/uploads/{created['id']}")):
        _error(response, 404, "not_found")
    assert other_client.get("/api/uploads").json()["count"] == 0
    assert owner_client.get(f"/api/uploads/{created['id']}").content == b"private\n"
    assert len(stored_files(media)) == 1


def test_deleting_an_upload_removes_its_row_and_then_its_file(owner_client, media,
                                                              django_capture_on_commit_callbacks):
    created = _json(owner_client, "gone.txt", b"soon gone\n").json()

    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.delete(f"/api/uploads/{created['id']}")

    assert response.status_code == 204
    assert not Upload.objects.exists() and stored_files(media) == []
    _error(owner_client.get(f"/api/uploads/{created['id']}"), 404, "not_found")
    _error(owner_client.delete(f"/api/uploads/{created['id']}"), 404, "not_found")


def test_a_row_whose_file_vanished_answers_404_not_500(owner_client, media):
    created = _json(owner_client, "x.txt", b"x\n").json()
    for path in stored_files(media):
        path.unlink()

    _error(owner_client.get(f"/api/uploads/{created['id']}"), 404, "not_found")


def test_a_failed_insert_leaves_no_file(owner, media, monkeypatch):
    def broken_create(**kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(Upload.objects, "create", broken_create)

    with pytest.raises(RuntimeError):
        services.upload_create(owner_id=owner.pk, filename="x.txt", data=b"some text\n")
    assert stored_files(media) == []


def test_a_disk_that_fails_mid_write_is_503_and_leaves_no_partial_file(owner_client, media, monkeypatch):
    from django.core.files.storage import default_storage

    def write_half_then_fail(name, content):
        path = media / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.read()[:3])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(default_storage, "_save", write_half_then_fail)

    _error(_json(owner_client, "x.txt", b"some text\n"), 503, "unavailable")
    assert stored_files(media) == [] and not Upload.objects.exists()


# --- bad requests ---------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    {"content_base64": "aGVsbG8="},
    {"filename": "x.txt"},
    {"filename": "x.txt", "content_base64": "not base64!"},
    {"filename": "x.txt", "content_base64": "aGVsbG8"},
    {"filename": "x.txt", "content_base64": ""},
    {"filename": "x.txt", "content_base64": "é"},
    {"filename": 7, "content_base64": "aGVsbG8="},
    {"filename": "x.txt", "content_base64": ["aGVsbG8="]},
    {"filename": "x" * 256, "content_base64": "aGVsbG8="},
])
def test_a_bad_json_upload_is_400_and_stores_nothing(owner_client, media, body):
    _error(owner_client.post("/api/upload", body, format="json"), 400, "invalid")
    assert stored_files(media) == [] and not Upload.objects.exists()


def test_a_bad_multipart_upload_is_400_and_stores_nothing(owner_client, media):
    no_file = owner_client.post("/api/upload", {"other": "value"}, format="multipart")
    empty = _multipart(owner_client, "empty.txt", b"")
    no_boundary = Client().post("/api/upload", b"--x\r\n", content_type="multipart/form-data",
                                HTTP_AUTHORIZATION=owner_client._credentials["HTTP_AUTHORIZATION"])

    for response in (no_file, empty, no_boundary):
        _error(response, 400, "invalid")
    assert stored_files(media) == [] and not Upload.objects.exists()


def test_a_form_body_is_415(owner_client, media):
    response = owner_client.post("/api/upload", "filename=x", content_type="application/x-www-form-urlencoded")
    _error(response, 415, "unsupported_media_type")


def test_uploads_need_a_token(anon_client, owner_client, media):
    created = _json(owner_client, "x.txt", b"x\n").json()
    for response in (anon_client.get("/api/uploads"), anon_client.get(f"/api/uploads/{created['id']}"),
                     anon_client.delete(f"/api/uploads/{created['id']}"), _json(anon_client, "y.txt", b"y")):
        assert response.status_code == 401


# --- the start-up sweep and the admin -------------------------------------------------------------

def test_the_start_up_sweep_removes_old_files_no_row_names_and_keeps_the_rest(owner, media):
    kept = services.upload_create(owner_id=owner.pk, filename="kept.txt", data=b"kept\n")
    old, young = media / "uploads" / "ab" / ("ab" + "0" * 30), media / "uploads" / "cd" / ("cd" + "0" * 30)
    for path in (old, young):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"left behind")
    hours_ago = time.time() - 7200
    os.utime(old, (hours_ago, hours_ago))
    os.utime(media / kept.stored_as, (hours_ago, hours_ago))

    assert services.uploads_sweep_orphans() == 1

    assert stored_files(media) == sorted([media / kept.stored_as, young])


@pytest.fixture
def admin_site(admin) -> Client:
    client = Client()
    client.force_login(admin)
    return client


def test_the_admin_lists_uploads_downloads_them_as_attachments_and_deletes_through_the_service(
        admin_site, owner, media, django_capture_on_commit_callbacks):
    png = image_bytes("PNG")
    upload = services.upload_create(owner_id=owner.pk, filename="cat.png", data=png)

    listing = admin_site.get("/admin/uploads/upload/")
    download = admin_site.get(f"/admin/uploads/upload/{upload.pk}/download/")
    quotas = admin_site.get("/admin/uploads/uploadquota/")

    assert listing.status_code == 200 and b"cat.png" in listing.content
    assert admin_site.get(f"/admin/uploads/upload/{upload.pk}/change/").status_code == 200
    assert download.status_code == 200 and download.content == png
    assert download["Content-Disposition"] == 'attachment; filename="cat.png"'
    assert quotas.status_code == 200 and f'<td class="field-used_bytes">{len(png)}</td>'.encode() in quotas.content
    with django_capture_on_commit_callbacks(execute=True):
        deleted = admin_site.post("/admin/uploads/upload/", {"action": "delete_selected",
                                                           "_selected_action": [str(upload.pk)], "post": "yes"})
    assert deleted.status_code == 302
    assert not Upload.objects.exists() and stored_files(media) == []
