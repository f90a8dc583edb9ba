"""The limits of one /v1 request (docs/api.md): at most 2,048 messages (`input` items on /v1/responses), 128 tools
and 16,384 JSON objects and arrays, on every door that takes messages; at each limit served, one past it a 400
`invalid_value` naming the field (in the door's own error shape)."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from compat.limits import MAX_MESSAGES, MAX_OBJECTS, MAX_TOOLS

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "default/offline"  # answers without an upstream


def _messages(count: int, anthropic: bool = False) -> list[dict]:
    roles = ("user", "assistant") if anthropic else ("user", "user")
    return [{"role": roles[i % 2], "content": "hi"} for i in range(count - 1)] + [{"role": "user", "content": "hi"}]


def _body(path: str, count: int) -> tuple[dict, str]:
    if path == "/v1/responses":
        return {"model": MODEL, "input": [{"role": "user", "content": "hi"}] * count}, "input"
    anthropic = path.startswith("/v1/messages")
    body = {"model": MODEL, "messages": _messages(count, anthropic)}
    if path == "/v1/messages":
        body["max_tokens"] = 5
    return body, "messages"


def _tool(path: str, index: int) -> dict:
    if path.startswith("/v1/messages"):
        return {"name": f"t{index}", "input_schema": {"type": "object"}}
    if path == "/v1/responses":
        return {"type": "function", "name": f"t{index}", "parameters": {"type": "object"}}
    return {"type": "function", "function": {"name": f"t{index}", "parameters": {"type": "object"}}}


def _assert_refused_naming(response, path: str, field: str) -> None:
    assert response.status_code == 400, (path, response.status_code, response.content[:300])
    error = response.json()["error"]
    if path.startswith("/v1/messages"):
        assert error["type"] == "invalid_request_error" and error["message"].startswith(f"{field}:"), error
    else:
        assert error["code"] == "invalid_value" and error["param"] == field, error


DOORS = ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/messages/count_tokens"]


@pytest.mark.parametrize("path", DOORS)
def test_the_message_count_limit_is_served_at_it_and_refused_one_past(path):
    client = APIClient()
    body, field = _body(path, MAX_MESSAGES)
    response = client.post(path, body, format="json")
    assert response.status_code == 200, (path, response.content[:300])
    body, field = _body(path, MAX_MESSAGES + 1)
    _assert_refused_naming(client.post(path, body, format="json"), path, field)


@pytest.mark.parametrize("path", DOORS)
def test_the_tool_count_limit_is_served_at_it_and_refused_one_past(path):
    client = APIClient()
    body, _ = _body(path, 1)
    body["tools"] = [_tool(path, i) for i in range(MAX_TOOLS)]
    assert client.post(path, body, format="json").status_code == 200, path
    body["tools"].append(_tool(path, MAX_TOOLS))
    _assert_refused_naming(client.post(path, body, format="json"), path, "tools")


def test_the_object_limit_counts_every_object_and_array_of_the_body():
    client = APIClient()
    # The body object, the messages array, one message with a content array of parts: 3 + 1 + parts.
    parts = MAX_OBJECTS - 4

    def body(count: int) -> dict:
        return {"model": MODEL, "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}] * count}]}

    assert client.post("/v1/chat/completions", body(parts), format="json").status_code == 200
    refused = client.post("/v1/chat/completions", body(parts + 1), format="json")
    assert refused.status_code == 400 and refused.json()["error"]["code"] == "invalid_value", refused.content[:300]
    assert str(MAX_OBJECTS) in refused.json()["error"]["message"]


def test_a_lone_surrogate_is_still_refused_and_a_pair_served():
    client = APIClient()
    raw = '{"model": "%s", "messages": [{"role": "user", "content": "%s"}]}'
    lone = client.post("/v1/chat/completions", raw % (MODEL, "a\\ud800b"), content_type="application/json")
    assert lone.status_code == 400 and lone.json()["error"]["code"] == "invalid_value"
    pair = client.post("/v1/chat/completions", raw % (MODEL, "a\\ud83d\\ude00b"), content_type="application/json")
    assert pair.status_code == 200, pair.content[:300]
