"""The OpenAPI schema documents every implemented row of docs/api.md."""

import pytest

API_PATHS = {
    "/api/auth/login": {"post"}, "/api/auth/register": {"post"}, "/api/auth/refresh": {"post"},
    "/api/auth/logout": {"post"}, "/api/auth/change-password": {"post"}, "/api/auth/me": {"get"},
    "/api/config": {"get", "put", "patch"}, "/api/health": {"get"},
    "/api/sessions": {"get", "post"}, "/api/sessions/{id}": {"get", "delete"},
    "/api/sessions/{id}/messages": {"get"}, "/api/sessions/{id}/rename": {"put"},
    "/api/sessions/{id}/chat": {"post"},
    "/v1/models": {"get"}, "/v1/chat/completions": {"post"}, "/v1/embeddings": {"post"},
}


@pytest.mark.django_db
def test_the_schema_lists_every_implemented_path_and_method(anon_client):
    response = anon_client.get("/api/schema?format=json")
    assert response.status_code == 200
    paths = response.json()["paths"]
    for path, methods in API_PATHS.items():
        assert path in paths, f"{path} is missing from /api/schema"
        assert methods <= set(paths[path]), f"{path}: {sorted(methods - set(paths[path]))} undocumented"


@pytest.mark.django_db
def test_the_schema_generates_without_a_warning_and_validates(tmp_path):
    """drf-spectacular warns, for example, when two serializers would share a component name (one of them then
    documents the other's fields)."""
    from django.core.management import call_command

    call_command("spectacular", "--fail-on-warn", "--validate", "--file", str(tmp_path / "schema.yaml"))
