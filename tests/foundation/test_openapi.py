"""The OpenAPI schema tells the truth: auth, error responses, /v1 bodies; and inputs keep their JSON types."""

import pytest

from tests.conftest import client_for

ERROR_STATUSES = {"400", "401", "403", "404", "409", "413", "415", "429", "502", "503"}
ADMIN_OPERATIONS = {("get", "/api/audit"), ("get", "/api/metrics/summary"),
                    ("put", "/api/config"), ("patch", "/api/config"), ("post", "/api/mcp/connect"),
                    ("post", "/api/mcp/disconnect"), ("patch", "/api/mcp/servers/{name}"), ("get", "/api/plugins"),
                    ("post", "/api/mcp/servers/{name}/reconnect"),
                    ("post", "/api/a2a/remotes"),
                    ("post", "/api/plugins/reload"),
                    # the model catalogue's connections and aliases (issue 26): the agent's config
                    ("get", "/api/connections"), ("post", "/api/connections"),
                    ("get", "/api/connections/{connection_id}"),
                    ("patch", "/api/connections/{connection_id}"), ("delete", "/api/connections/{connection_id}"),
                    ("post", "/api/connections/{connection_id}/discover"), ("get", "/api/aliases"),
                    ("post", "/api/aliases"), ("get", "/api/aliases/{alias_id}"), ("patch", "/api/aliases/{alias_id}"),
                    ("delete", "/api/aliases/{alias_id}"),
                    # users and their budgets, the price table (issue 27)
                    ("get", "/api/users"), ("patch", "/api/users/{user_id}"), ("get", "/api/users/{user_id}/budget"),
                    ("put", "/api/users/{user_id}/budget"), ("put", "/api/usage/prices"),
                    ("delete", "/api/users/{user_id}")}
# Operations whose 403 is decided by a role the caller holds on the object (issue 44): a group's role (admins
# change groups, managers their members) or a shareable resource's (organisation.policy). Not admin-only: a
# user with the role succeeds.
ROLE_OPERATIONS = {("post", "/api/groups"), ("patch", "/api/groups/{group_id}"), ("delete", "/api/groups/{group_id}"),
                   ("post", "/api/groups/{group_id}/members"), ("patch", "/api/groups/{group_id}/members/{user_id}"),
                   ("delete", "/api/groups/{group_id}/members/{user_id}"), ("put", "/api/groups/{group_id}/budget"),
                   ("get", "/api/usage"),
                   # a remote A2A agent: 404 to whoever may not see it, 403 to one who may but is no admin
                   ("delete", "/api/a2a/remotes/{remote_id}"), ("post", "/api/a2a/remotes/{remote_id}/refresh")}
PUBLIC_OPERATIONS = {("post", "/api/auth/login"), ("post", "/api/auth/register"), ("post", "/api/auth/refresh"),
                     ("get", "/api/auth/options"), ("get", "/api/auth/oidc/login"),
                     ("get", "/api/auth/oidc/callback"), ("post", "/api/auth/oidc/session"),
                     ("get", "/api/health"), ("get", "/v1/models"), ("post", "/v1/chat/completions"),
                     ("post", "/v1/embeddings"), ("get", "/api/voices"),
                     ("post", "/v1/responses"), ("get", "/v1/responses/{id}"), ("delete", "/v1/responses/{id}"),
                     ("post", "/v1/embeddings"), ("get", "/api/voices"), ("post", "/v1/messages"),
                     ("post", "/v1/messages/count_tokens"), ("get", "/v1/models/{model_id}"),
                     ("get", "/v1/responses/{id}/input_items"),
                     # OAuth for /mcp and /a2a: the metadata documents and the protocol's endpoints (their clients
                     # authenticate within the protocol, not with a bearer token).
                     ("get", "/.well-known/oauth-protected-resource"),
                     ("get", "/.well-known/oauth-protected-resource/mcp"),
                     ("get", "/.well-known/oauth-protected-resource/a2a"),
                     ("get", "/.well-known/agent-card.json"),
                     ("get", "/.well-known/oauth-authorization-server"), ("post", "/oauth/register"),
                     ("get", "/oauth/authorize"), ("post", "/oauth/token"), ("post", "/oauth/revoke"),
                     # A remote authorization server's answer: the single-use state is the credential.
                     ("get", "/api/mcp/oauth/callback")}


@pytest.fixture
def schema(anon_client):
    response = anon_client.get("/api/schema?format=json")
    assert response.status_code == 200
    return response.json()


def _operations(schema):
    for path, operations in schema["paths"].items():
        for method, operation in operations.items():
            yield method, path, operation


@pytest.mark.django_db
def test_the_schema_declares_bearer_auth_and_every_token_route_requires_it(schema):
    scheme = schema["components"]["securitySchemes"]["bearerAuth"]
    assert (scheme["type"], scheme["scheme"], scheme["bearerFormat"]) == ("http", "bearer", "JWT")
    for method, path, operation in _operations(schema):
        security = operation.get("security", [])
        if (method, path) in PUBLIC_OPERATIONS:
            assert {} in security, f"{method} {path} is public"
        else:
            assert security == [{"bearerAuth": []}], f"{method} {path}: {security}"


@pytest.mark.django_db
def test_the_lists_document_is_a_token_route_of_the_schema(schema):
    # GET /api/meta: every signed-in user's (the dashboard draws its forms from it), no admin's only.
    assert schema["paths"]["/api/meta"]["get"]["security"] == [{"bearerAuth": []}]
    assert ("get", "/api/meta") not in ADMIN_OPERATIONS | PUBLIC_OPERATIONS


# docs/api.md gives these errors a body of their own: health's 503 is the health object with status "degraded".
# A browser's pages answer refusals as HTML pages (the single sign-on round trip's failure page).
OWN_SHAPE_ERRORS = {("get", "/api/health", "503"),
                    *{("get", "/api/auth/oidc/login", status) for status in ("404", "429", "502")},
                    *{("get", "/api/auth/oidc/callback", status) for status in ("400", "403", "409", "502")},
                    ("get", "/oauth/authorize", "400"), ("get", "/oauth/authorize", "429")}  # HTML pages


@pytest.mark.django_db
def test_health_documents_its_503_as_the_health_object(schema):
    responses = schema["paths"]["/api/health"]["get"]["responses"]
    assert responses["503"]["content"]["application/json"]["schema"] == responses["200"]["content"][
        "application/json"]["schema"]


@pytest.mark.django_db
def test_every_operation_documents_its_errors_with_the_envelope_of_its_path(schema):
    for method, path, operation in _operations(schema):
        responses = operation["responses"]
        expected = set()
        if (method, path) not in PUBLIC_OPERATIONS:
            expected.add("401")
        if (method, path) in ADMIN_OPERATIONS:
            expected.add("403")
        if "{" in path:
            expected.add("404")
        if "requestBody" in operation:
            expected |= {"400", "413", "415"}
        assert expected <= set(responses), f"{method} {path} lacks {sorted(expected - set(responses))}"
        envelope = ("AnthropicError" if path.startswith("/v1/messages") else "OpenAIError" if path.startswith("/v1")
                    else "OAuthError" if path.startswith("/oauth/") else "ApiError")
        for status in ERROR_STATUSES & set(responses):
            if (method, path, status) in OWN_SHAPE_ERRORS:
                continue
            content = responses[status].get("content", {})
            assert content["application/json"]["schema"] == {"$ref": f"#/components/schemas/{envelope}"}, (
                f"{method} {path} {status}")


@pytest.mark.django_db
def test_only_admin_operations_document_a_403_for_permissions(schema):
    with_403 = {(method, path) for method, path, operation in _operations(schema) if "403" in operation["responses"]}
    # register: registration_closed; /api/keys: another user's keys listed by a non-admin, the admin scope
    # asked by one (every /api operation can also answer 403 key_scope to an API key without the api scope).
    # login and change-password: password_login_disabled; the single sign-on callback's page for a refused user.
    exceptions = {("post", "/api/auth/register"), ("get", "/api/keys"), ("post", "/api/keys"),
                  ("post", "/api/auth/login"), ("post", "/api/auth/change-password"),
                  ("get", "/api/auth/oidc/callback"),
                  # the sign-in's collection refused to another Origin
                  ("post", "/api/auth/oidc/session"),
                  # connected apps: another user's (`?user=`) asked by a non-admin; a consent or a disconnection
                  # made with an API key (the user's own act, on the dashboard)
                  ("get", "/api/oauth/apps"), ("delete", "/api/oauth/apps/{client_id}"),
                  ("post", "/api/oauth/consents/{consent_id}")}
    # Every access rule's GET/PUT and every transfer: the policy's 403 for too low a role.
    ruled = {(method, path) for method, path, _operation in _operations(schema)
             if path.endswith(("/access", "/transfer"))}
    assert ruled, "no access or transfer route documented"
    assert with_403 - exceptions - ROLE_OPERATIONS - ruled == ADMIN_OPERATIONS
    assert ROLE_OPERATIONS | ruled <= with_403, "a role-decided operation does not document its 403"


@pytest.mark.django_db
def test_login_documents_its_rate_limit_and_lists_their_bad_limit(schema):
    login = schema["paths"]["/api/auth/login"]["post"]["responses"]
    assert "Retry-After" in login["429"]["headers"]
    assert "400" in schema["paths"]["/api/sessions"]["get"]["responses"]
    limit = next(p for p in schema["paths"]["/api/sessions"]["get"]["parameters"] if p["name"] == "limit")
    assert limit["schema"]["minimum"] == 0


@pytest.mark.django_db
def test_the_error_envelopes_are_components_with_their_required_fields(schema):
    components = schema["components"]["schemas"]
    assert set(components["ApiErrorBody"]["required"]) == {"code", "message", "details"}
    assert set(components["OpenAIErrorBody"]["required"]) == {"message", "type", "param", "code"}


@pytest.mark.django_db
def test_v1_request_bodies_name_their_required_fields(schema):
    components = schema["components"]["schemas"]

    def body(path):
        ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        return components[ref.rsplit("/", 1)[1]]

    chat = body("/v1/chat/completions")
    assert {"model", "messages"} <= set(chat["required"])
    assert schema["paths"]["/v1/chat/completions"]["post"]["requestBody"]["required"] is True
    assert {"input", "model"} <= set(body("/v1/embeddings")["required"])
    assert "text/event-stream" in schema["paths"]["/v1/chat/completions"]["post"]["responses"]["200"]["content"]


# --- JSON types: no silent coercion ---------------------------------------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("name", [566, 1.5, True, ["x"], {"a": "b"}])
def test_a_session_name_that_is_not_a_string_is_a_400_naming_the_field(owner_client, name):
    response = owner_client.post("/api/sessions", {"name": name}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert "name" in error["details"]


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "value"), [
    ("temperature", "0.5"), ("temperature", True), ("max_tokens", "100"), ("max_tokens", 10.0),
    ("max_tokens", False), ("kb_enabled", "true"), ("kb_enabled", 1), ("provider", 1), ("tools", "fetch"),
])
def test_a_config_value_of_the_wrong_json_type_is_a_400(admin_client, field, value):
    response = admin_client.patch("/api/config", {field: value}, format="json")
    assert response.status_code == 400, response.content
    assert response.json()["error"]["code"] == "invalid"
    assert field in response.json()["error"]["details"]


@pytest.mark.django_db
def test_nested_list_items_keep_their_types_too(admin):
    client = client_for(admin)
    response = client.post("/api/mcp/connect", {"name": "x", "command": "true", "args": ["ok", 5]}, format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()["error"]["details"]) == {"args.1"}
    response = client.post("/api/mcp/connect", {"name": "x", "command": "true", "env": {"A": 1}}, format="json")
    assert response.status_code == 400, response.content
    assert set(response.json()["error"]["details"]) == {"env.A"}


@pytest.mark.django_db
def test_values_of_the_right_type_still_pass(owner_client):
    response = owner_client.post("/api/sessions", {"name": "fine"}, format="json")
    assert response.status_code == 201, response.content
    assert response.json()["name"] == "fine"


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["limit=false", "limit=-1", "limit=1.5", "limit=", "offset=x", "offset=-3",
                                   "limit=%EF%BC%91", "limit=1e3"])
def test_a_limit_or_offset_that_is_not_a_non_negative_integer_is_a_400(owner_client, query):
    response = owner_client.get(f"/api/sessions?{query}")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert set(error["details"]) & {"limit", "offset"}


@pytest.mark.django_db
def test_a_valid_limit_and_offset_page_through_the_list(owner_client):
    for index in range(3):
        owner_client.post("/api/sessions", {"name": f"s{index}"}, format="json")
    page = owner_client.get("/api/sessions?limit=2&offset=0").json()
    assert page["count"] == 3 and len(page["results"]) == 2 and page["next"]
    assert len(owner_client.get("/api/sessions?limit=2&offset=2").json()["results"]) == 1
    assert owner_client.get("/api/sessions?limit=999&offset=99999999999999").json()["results"] == []


@pytest.mark.django_db
def test_the_documented_v1_bodies_require_what_the_v1_views_require(schema):
    from compat.chat.wire import ChatCompletionRequest, EmbeddingRequest

    components = schema["components"]["schemas"]
    for model, component in ((ChatCompletionRequest, "ChatCompletionRequest"), (EmbeddingRequest, "EmbeddingRequest")):
        assert set(components[component]["required"]) == set(model.model_json_schema()["required"]), component
        assert set(components[component]["properties"]) == set(model.model_fields), component
