"""POST/PATCH /api/agents refuse each bad field by name (issue 45, item 1): every field at its limit is taken and
one past it is a 400 naming it; a taken slug is 409 naming `slug`; a field the body does not take is
`unknown_field`; a body that is not a JSON object, or a value of the wrong JSON type, is a 400 envelope, never a
500; an id that names nothing (a word, a huge number, a NUL) is 404."""

from __future__ import annotations

import uuid

import pytest

from knowledge import services as kb
from tests.agents_app.conftest import error, make

pytestmark = pytest.mark.django_db

OK = object()  # the value is taken


def _post(client, **fields):
    return client.post("/api/agents", {"slug": "helper", "name": "Helper", **fields}, format="json")


@pytest.mark.parametrize(("field", "value", "named"), [
    ("slug", "a", OK), ("slug", "a" * 64, OK), ("slug", "a-b_0", OK), ("slug", "a" * 65, "slug"), ("slug", "", "slug"),
    ("slug", "Helper", "slug"), ("slug", "a b", "slug"), ("slug", "a.b", "slug"), ("slug", "helper\n", "slug"),
    ("slug", " helper", "slug"), ("slug", "h\u00e9", "slug"), ("slug", "a@1", "slug"), ("slug", "a:b", "slug"),
    ("slug", 7, "slug"),
    ("name", "n" * 100, OK), ("name", "n" * 101, "name"), ("name", "", "name"), ("name", "   ", "name"),
    ("name", "a\x00b", "name"), ("name", ["x"], "name"),
    ("description", "d" * 2000, OK), ("description", "d" * 2001, "description"), ("description", "", OK),
    ("instructions", "i" * 20_000, OK), ("instructions", "i" * 20_001, "instructions"), ("instructions", "", OK),
    ("model", "", OK), ("model", "fast", OK), ("model", "local/big", OK), ("model", "nope", "model"),
    ("model", "local/nope", "model"), ("model", "agent:helper", "model"), ("model", "agent", "model"),
    ("model", "workflow:x", "model"), ("model", "m" * 301, "model"), ("model", None, "model"),
    ("tools", [], OK), ("tools", ["web_search"], OK), ("tools", ["*"], OK),
    ("tools", ["web_search", "nope"], "tools.1"),
    ("tools", ["nobody/tool"], "tools.0"), ("tools", ["workflow:missing"], "tools.0"),
    ("tools", [""], "tools.0"),
    ("tools", [3], "tools.0"), ("tools", "web_search", "tools"), ("tools", ["web_search"] * 101, "tools"),
    ("knowledge", [], OK), ("knowledge", ["not-an-id"], "knowledge.0"),
    ("knowledge", [str(uuid.uuid4())], "knowledge.0"), ("knowledge", [str(uuid.uuid4())] * 51, "knowledge"),
    ("temperature", 0, OK), ("temperature", 2, OK), ("temperature", 0.35, OK), ("temperature", -0.01, "temperature"),
    ("temperature", 2.01, "temperature"), ("temperature", "1", "temperature"), ("temperature", True, "temperature"),
    ("max_tokens", 1, OK), ("max_tokens", 1_000_000, OK), ("max_tokens", 0, "max_tokens"),
    ("max_tokens", 1_000_001, "max_tokens"), ("max_tokens", 1.5, "max_tokens"), ("max_tokens", 10**30, "max_tokens"),
    ("starters", ["s"] * 6, OK), ("starters", ["s"] * 7, "starters"), ("starters", ["s" * 500], OK),
    ("starters", ["s" * 501], "starters.0"), ("starters", ["ok", ""], "starters.1"),
    ("starters", ["ok", "   "], "starters.1"), ("starters", [None], "starters.0"), ("starters", "hi", "starters"),
])
def test_each_field_at_its_limit_is_taken_and_past_it_is_named(owner_client, local, field, value, named):
    response = _post(owner_client, **{field: value})
    if named is OK:
        assert response.status_code == 201, response.content
        shown = response.json()[field]
        assert shown == (value if field != "tools" else list(dict.fromkeys(value))), shown
        return
    status, code, details = error(response)
    assert (status, code) == (400, "invalid"), response.content
    assert named in details, details
    assert named.split(".")[0] in response.json()["error"]["message"]


def test_patch_checks_the_same_fields_by_name(owner_client, local):
    agent = make(owner_client)
    for field, value, named in (("name", "", "name"), ("model", "nope", "model"), ("tools", ["nope"], "tools.0"),
                                ("temperature", 3, "temperature"), ("starters", ["x"] * 7, "starters"),
                                ("slug", "NO", "slug"), ("max_tokens", 0, "max_tokens")):
        response = owner_client.patch(f"/api/agents/{agent['id']}", {field: value}, format="json")
        assert error(response)[:2] == (400, "invalid") and named in error(response)[2], (field, response.content)
    after = owner_client.get(f"/api/agents/{agent['id']}").json()
    assert after == agent  # nothing was changed by a refused PATCH


def test_a_collection_the_owner_reads_is_taken_and_one_they_cannot_is_named(owner, other_user, owner_client, local):
    mine = kb.collection_create(owner_id=owner.pk, name="handbook")
    theirs = kb.collection_create(owner_id=other_user.pk, name="secrets")
    made = _post(owner_client, knowledge=[str(mine.pk), str(mine.pk)])
    assert made.status_code == 201 and made.json()["knowledge"] == [str(mine.pk)], made.content
    refused = _post(owner_client, slug="two", knowledge=[str(mine.pk), str(theirs.pk)])
    assert error(refused)[:2] == (400, "invalid") and "knowledge.1" in error(refused)[2], refused.content
    theirs.visibility = "everyone"
    theirs.save()
    assert _post(owner_client, slug="three", knowledge=[str(theirs.pk)]).status_code == 201


def test_a_taken_slug_is_a_conflict_naming_it(owner_client, other_client, local):
    agent = make(owner_client)
    for client in (owner_client, other_client):
        status, code, details = error(_post(client))
        assert (status, code) == (409, "conflict") and "slug" in details
    assert error(_post(owner_client, slug="default"))[:2] == (409, "conflict")
    second = make(owner_client, slug="second")
    renamed = owner_client.patch(f"/api/agents/{second['id']}", {"slug": agent["slug"]}, format="json")
    assert error(renamed)[:2] == (409, "conflict") and "slug" in error(renamed)[2]
    moved = owner_client.patch(f"/api/agents/{second['id']}", {"slug": "third"}, format="json")
    assert moved.status_code == 200 and moved.json()["slug"] == "third"


@pytest.mark.parametrize("extra", ["id", "owner", "version", "access", "created_at", "title"])
def test_a_field_the_body_does_not_take_is_unknown_field_naming_it(owner_client, local, extra):
    response = _post(owner_client, **{extra: 1})
    status, code, details = error(response)
    assert (status, code) == (400, "unknown_field") and list(details) == [extra], response.content
    agent = make(owner_client, slug="patched")
    patched = owner_client.patch(f"/api/agents/{agent['id']}", {extra: 1, "name": "X"}, format="json")
    assert error(patched)[:2] == (400, "unknown_field")
    assert owner_client.get(f"/api/agents/{agent['id']}").json()["name"] == "Helper"


@pytest.mark.parametrize("body", [b"{", b"[]", b'"text"', b"1", b"null",
                                  b'{"slug": "x", "name": "N", "temperature": NaN}',
                                  b'{"slug": "x", "name": "N", "temperature": Infinity}', b"\xff\xfe"])
def test_a_body_that_is_no_json_object_is_a_400_envelope(owner_client, local, body):
    agent = make(owner_client)
    for method, path in (("post", "/api/agents"), ("patch", f"/api/agents/{agent['id']}")):
        response = getattr(owner_client, method)(path, data=body, content_type="application/json")
        assert response.status_code == 400, (method, body, response.content)
        assert response.json()["error"]["code"] in ("invalid", "parse_error"), response.content


@pytest.mark.parametrize("pk", ["x", "0", "-1", "1.0", "99999999999999999999999", "\u0661", "%00", "1%00", "%EF%BC%91"])
def test_an_id_that_names_nothing_is_a_404(owner_client, local, pk):
    make(owner_client)
    for method, path in (("get", f"/api/agents/{pk}"), ("patch", f"/api/agents/{pk}"), ("delete", f"/api/agents/{pk}"),
                         ("get", f"/api/agents/{pk}/versions"), ("get", f"/api/agents/{pk}/versions/1"),
                         ("post", f"/api/agents/{pk}/versions/1/restore"), ("get", f"/api/agents/{pk}/access"),
                         ("post", f"/api/agents/{pk}/transfer")):
        response = getattr(owner_client, method)(path, {}, format="json")
        assert error(response)[:2] == (404, "not_found"), (method, path, response.content)


@pytest.mark.parametrize("number", ["0", "2", "x", "-1", "99999999999999999999", "%00", "\u0661"])
def test_a_version_number_that_names_nothing_is_a_404(owner_client, local, number):
    agent = make(owner_client)
    for method, path in (("get", f"/api/agents/{agent['id']}/versions/{number}"),
                         ("post", f"/api/agents/{agent['id']}/versions/{number}/restore")):
        response = getattr(owner_client, method)(path, {}, format="json")
        assert error(response)[:2] == (404, "not_found"), (path, response.content)
