"""Ids in paths are ASCII digits: `\\d`, `str.isdigit()` and `int()` take other scripts' digits too, so `/api/users/１`
(a full-width 1) named user 1 and `/api/keys/١` key 1. Such ids now name nothing (the view's 404, after
authentication), and no route of the URL conf matches a path with `\\d`."""

from __future__ import annotations

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from accounts.models import ApiKey

pytestmark = pytest.mark.django_db(transaction=True)


def _walk(patterns, prefix=""):
    """Every route of the URL conf as (its pattern text, its view)."""
    for entry in patterns:
        if isinstance(entry, URLResolver):
            yield from _walk(entry.url_patterns, prefix + str(entry.pattern))
        elif isinstance(entry, URLPattern):
            yield prefix + str(entry.pattern), entry.callback

OTHER_DIGITS = ["１", "١", "०", "𝟏"]  # full-width, Arabic-Indic, Devanagari, mathematical bold


def test_a_user_id_in_other_scripts_digits_names_no_user(admin_client, admin):
    assert admin_client.get(f"/api/users/{admin.pk}/budget").status_code == 200
    for digit in OTHER_DIGITS:
        response = admin_client.get(f"/api/users/{digit}/budget")
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found", digit
        changed = admin_client.patch(f"/api/users/{digit}", {"is_active": False}, format="json")
        assert changed.status_code == 404, digit
    admin.refresh_from_db()
    assert admin.is_active


def test_an_id_in_other_digits_answers_as_a_missing_one_and_only_after_authentication(owner_client, anon_client):
    for digit in OTHER_DIGITS:
        assert anon_client.get(f"/api/keys/{digit}").status_code == 401
        answers = [owner_client.get(f"/api/keys/{key}").json()["error"] for key in (digit, "999999")]
        assert [{**answer, "request_id": None} for answer in answers] == [{**answers[1], "request_id": None}] * 2


def test_a_key_id_in_other_scripts_digits_names_no_key(owner_client):
    made = owner_client.post("/api/keys", {"name": "k", "scopes": ["v1"]}, format="json")
    assert made.status_code == 201, made.content
    pk = made.json()["id"]
    assert owner_client.get(f"/api/keys/{pk}").status_code == 200
    full_width = "".join(chr(ord("０") + int(c)) for c in str(pk))
    assert owner_client.get(f"/api/keys/{full_width}").status_code == 404
    assert owner_client.delete(f"/api/keys/{full_width}").status_code == 404
    assert not ApiKey.objects.get(pk=pk).revoked


def test_no_route_matches_with_a_unicode_digit_class():
    def regexes(patterns):
        for entry in patterns:
            if isinstance(entry, URLResolver):
                yield entry.pattern.regex.pattern
                yield from regexes(entry.url_patterns)
            elif isinstance(entry, URLPattern):
                yield entry.pattern.regex.pattern

    found = list(regexes(get_resolver().url_patterns))
    assert len(found) > 60 and not [regex for regex in found if "\\d" in regex]
    # The routes that name an integer id take it through `id` (ASCII digits).
    templates = {template for template, _ in _walk(get_resolver().url_patterns)}
    for template in ("api/keys/<id:pk>", "api/users/<id:user_id>", "api/users/<id:user_id>/budget"):
        assert template in templates, sorted(t for t in templates if "keys" in t or "users" in t)
