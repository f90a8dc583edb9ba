"""/v1 has one definition per wire format: the pydantic models of compat/chat/wire.py validate the requests, and
/api/schema and docs/api.md document exactly those models, field by field.

The check reads the models' type annotations (not pydantic's JSON Schema, from which the documentation is
generated) and walks /api/schema's components beside them: names, JSON types, required fields, enums,
constraints and nesting must agree, and every wire model must be documented.
"""

from __future__ import annotations

import re
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import annotated_types
import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from compat.chat import wire as schemas
from compat.chat.wire import ChatCompletionRequest, EmbeddingRequest, ModelList
from compat.wire import WireModel

REQUESTS = {"/v1/chat/completions": ChatCompletionRequest, "/v1/embeddings": EmbeddingRequest}
RESPONSES = {"/v1/models": ModelList}
JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean", dict: "object", list: "array"}
CONSTRAINT_KEYS = {"minLength", "maxLength", "minItems", "maxItems", "minimum", "maximum", "exclusiveMinimum",
                   "exclusiveMaximum", "pattern", "multipleOf"}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "api.md"


@pytest.fixture
def openapi(anon_client) -> dict[str, Any]:
    response = anon_client.get("/api/schema?format=json")
    assert response.status_code == 200
    return response.json()


class Agreement:
    """Compares a pydantic model with its documented OpenAPI component; raises AssertionError naming the path of
    the first difference. `seen` collects every model it has visited, nested ones included."""

    def __init__(self, components: dict[str, Any], *, response: bool = False):
        self.components = components
        self.response = response  # a response documents every field as required (all are always sent)
        self.seen: set[type[BaseModel]] = set()

    def resolve(self, node: dict[str, Any]) -> dict[str, Any]:
        if "$ref" in node:
            return self.resolve(self.components[node["$ref"].rsplit("/", 1)[1]])
        if len(node.get("allOf", ())) == 1:  # OpenAPI 3.0's way to put nullable/default beside a $ref
            outer = {key: value for key, value in node.items() if key != "allOf"}
            return {**self.resolve(node["allOf"][0]), **outer}
        return node

    def model(self, model: type[BaseModel], node: dict[str, Any], path: str) -> None:
        self.seen.add(model)
        node = self.resolve(node)
        documented, defined = set(node.get("properties", {})), set(model.model_fields)
        assert documented == defined, (f"{path}: only in /api/schema {sorted(documented - defined)}, only in "
                                       f"{model.__name__} {sorted(defined - documented)}")
        required = {name for name, field in model.model_fields.items() if self.response or field.is_required()}
        assert set(node.get("required", ())) == required, f"{path}: required {node.get('required')} != {required}"
        for name, field in model.model_fields.items():
            self.value(field.annotation, field.metadata, node["properties"][name], f"{path}.{name}")

    def value(self, annotation: Any, metadata: list[Any], node: dict[str, Any], path: str) -> None:
        node = self.resolve(node)
        origin, args = get_origin(annotation), get_args(annotation)
        if origin is Annotated:
            inner = [item for extra in args[1:] for item in (extra.metadata if isinstance(extra, FieldInfo)
                                                             else [extra])]
            return self.value(args[0], [*metadata, *inner], node, path)
        if origin in (typing.Union, types.UnionType):
            return self.union(args, metadata, node, path)
        assert not node.get("nullable"), f"{path}: documented as nullable, but None is not accepted"
        self.constraints(metadata, node, path)
        if origin is Literal:
            assert node.get("enum") == list(args), f"{path}: enum {node.get('enum')} != {list(args)}"
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            self.model(annotation, node, path)
        elif annotation is Any:
            assert not set(node) & {"type", "enum", "anyOf", "oneOf"}, f"{path}: documented narrower than Any"
        else:
            base = origin or annotation
            assert node.get("type") == JSON_TYPES[base], f"{path}: type {node.get('type')} != {JSON_TYPES[base]}"
            assert "enum" not in node, f"{path}: documents an enum {node['enum']} the model does not enforce"
            if base is list:
                self.value(args[0], [], node["items"], f"{path}[]")

    def union(self, args: tuple[Any, ...], metadata: list[Any], node: dict[str, Any], path: str) -> None:
        branches = [arg for arg in args if arg is not type(None)]
        nullable = len(branches) < len(args)
        assert bool(node.get("nullable")) == nullable, f"{path}: nullable is {node.get('nullable')}, not {nullable}"
        bare = {key: value for key, value in node.items() if key != "nullable"}
        if len(branches) == 1:
            return self.value(branches[0], metadata, bare, path)
        documented = node.get("anyOf") or node.get("oneOf") or []
        assert len(documented) == len(branches), f"{path}: {len(documented)} documented branches, not {len(branches)}"
        assert not metadata, f"{path}: a constraint on a whole union is not checked here"
        for index, (branch, sub) in enumerate(zip(branches, documented, strict=True)):
            self.value(branch, [], sub, f"{path}|{index}")

    def constraints(self, metadata: list[Any], node: dict[str, Any], path: str) -> None:
        sized = {"array": ("minItems", "maxItems")}.get(node.get("type"), ("minLength", "maxLength"))
        expected: dict[str, Any] = {}
        for item in metadata:
            if isinstance(item, annotated_types.MinLen):
                expected[sized[0]] = item.min_length
            elif isinstance(item, annotated_types.MaxLen):
                expected[sized[1]] = item.max_length
            elif isinstance(item, annotated_types.Ge):
                expected["minimum"] = item.ge
            elif isinstance(item, annotated_types.Le):
                expected["maximum"] = item.le
            elif isinstance(item, annotated_types.Gt | annotated_types.Lt):
                raise AssertionError(f"{path}: extend this check for {item!r}")
        documented = {key: value for key, value in node.items() if key in CONSTRAINT_KEYS}
        assert documented == expected, f"{path}: documented constraints {documented} != enforced {expected}"


def _request_component(openapi: dict[str, Any], path: str) -> dict[str, Any]:
    body = openapi["paths"][path]["post"]["requestBody"]
    assert body["required"] is True, path
    return body["content"]["application/json"]["schema"]


def _wire_models() -> set[type[BaseModel]]:
    return {value for value in vars(schemas).values()
            if isinstance(value, type) and issubclass(value, WireModel) and value is not WireModel}


@pytest.mark.django_db
def test_each_v1_request_body_is_documented_as_the_model_that_validates_it(openapi):
    components = openapi["components"]["schemas"]
    agreement = Agreement(components)
    for path, model in REQUESTS.items():
        agreement.model(model, _request_component(openapi, path), path)
    responses = Agreement(components, response=True)
    for path, model in RESPONSES.items():
        content = openapi["paths"][path]["get"]["responses"]["200"]["content"]["application/json"]
        responses.model(model, content["schema"], path)
    assert agreement.seen | responses.seen == _wire_models(), "a model of compat/chat/wire.py is documented nowhere"


@pytest.mark.django_db
def test_the_agreement_check_fails_when_the_model_gains_a_field_the_documentation_lacks(openapi):
    class Wider(ChatCompletionRequest):
        prediction: int | None = None

    with pytest.raises(AssertionError, match=r"only in Wider \['prediction'\]"):
        Agreement(openapi["components"]["schemas"]).model(Wider, _request_component(openapi, "/v1/chat/completions"),
                                                          "/v1/chat/completions")


@pytest.mark.django_db
def test_the_agreement_check_fails_when_the_documentation_gains_a_field_or_a_constraint(openapi):
    components = openapi["components"]["schemas"]
    documented = Agreement(components).resolve(_request_component(openapi, "/v1/embeddings"))
    wider = {**documented, "properties": {**documented["properties"], "user": {"type": "string"}}}
    with pytest.raises(AssertionError, match=r"only in /api/schema \['user'\]"):
        Agreement(components).model(EmbeddingRequest, wider, "/v1/embeddings")
    stricter = {**documented, "properties": {**documented["properties"],
                                             "model": {"type": "string", "minLength": 1}}}
    with pytest.raises(AssertionError, match="documented constraints"):
        Agreement(components).model(EmbeddingRequest, stricter, "/v1/embeddings")
    enum = {**documented, "properties": {**documented["properties"], "model": {"type": "string", "enum": ["x"]}}}
    with pytest.raises(AssertionError, match="enum"):
        Agreement(components).model(EmbeddingRequest, enum, "/v1/embeddings")


def _top_level_keys(text: str) -> set[str]:
    """The keys of a `{a, b?: ..., c: {...}}` sketch in docs/api.md, at its outermost level."""
    keys, depth, piece = set(), 0, ""
    for char in text.strip()[1:-1] + ",":
        if char == "," and depth == 0:
            keys.add(re.match(r"\s*(\w+)", piece).group(1))
            piece = ""
            continue
        depth += 1 if char in "{[" else -1 if char in "}]" else 0
        piece += char
    return keys


def _endpoint_cells(method: str, path: str) -> list[str]:
    row = next(line for line in DOCS.read_text().splitlines() if line.startswith(f"| {method} | {path} |"))
    # Cells end at a `|` with a space on both sides: `str|[str]` inside a cell has none.
    return [cell.strip() for cell in re.split(r"(?<= )\|(?= )", f" {row.strip()} ")][1:-1]


def _documented_fields(cell: str) -> set[str]:
    spans = re.findall(r"`([^`]+)`", cell)
    if len(spans) == 1 and spans[0].startswith("{"):
        return _top_level_keys(spans[0])
    return {span.split(".")[0] for span in spans}


def test_docs_api_names_every_field_of_the_v1_bodies_and_no_other():
    for path, model in REQUESTS.items():
        cell = _endpoint_cells("POST", path)[3]  # Method, Path, Auth, In, Out
        assert _documented_fields(cell) == set(model.model_fields), f"docs/api.md, POST {path}: {cell}"
    for path, model in RESPONSES.items():
        cell = _endpoint_cells("GET", path)[4]
        assert _documented_fields(cell) == set(model.model_fields), f"docs/api.md, GET {path}: {cell}"


# --- what the documentation promises is what validation enforces -----------------------------------

@pytest.mark.django_db
@pytest.mark.parametrize("choice", ["any", "function", ""])
def test_a_tool_choice_outside_openais_vocabulary_is_a_400_naming_it(anon_client, choice):
    response = anon_client.post("/v1/chat/completions", {"model": "no-such-model", "tool_choice": choice,
                                                         "messages": [{"role": "user", "content": "hi"}]},
                                format="json")
    assert response.status_code == 400, response.content
    assert (response.json()["error"]["code"], response.json()["error"]["param"]) == ("invalid_value", "tool_choice")


@pytest.mark.django_db
@pytest.mark.parametrize("count", [0, schemas.MAX_EMBEDDING_INPUTS + 1])
def test_embeddings_outside_1_to_2048_inputs_are_a_400_naming_input(anon_client, count):
    response = anon_client.post("/v1/embeddings", {"model": "hash-256", "input": ["a"] * count}, format="json")
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], error["param"]) == ("invalid_value", "input")
    assert "item" in error["message"]  # what is wrong with the list, not "input should be a string"


@pytest.mark.django_db
def test_embeddings_take_the_documented_maximum_of_inputs(anon_client):
    response = anon_client.post("/v1/embeddings", {"model": "hash-256", "input": ["a"] * schemas.MAX_EMBEDDING_INPUTS},
                                format="json")
    assert response.status_code == 200, response.content
    assert len(response.json()["data"]) == schemas.MAX_EMBEDDING_INPUTS


# --- the JSON Schema -> OpenAPI 3.0 step -----------------------------------------------------------

def test_openapi30_says_null_and_const_in_openapi_30_words_and_keeps_property_names():
    from compat.schema import openapi30

    pydantic_schema = {"type": "object", "title": "M", "properties": {
        "title": {"title": "Title", "type": "string"},  # a field named `title` stays
        "kind": {"const": "text", "type": "string"},
        "options": {"anyOf": [{"$ref": "#/components/schemas/StreamOptions"}, {"type": "null"}], "default": None},
        "stop": {"anyOf": [{"type": "string"}, {"items": {"type": "string"}, "type": "array"}, {"type": "null"}]},
    }}
    assert openapi30(pydantic_schema) == {"type": "object", "properties": {
        "title": {"type": "string"},
        "kind": {"enum": ["text"], "type": "string"},
        "options": {"allOf": [{"$ref": "#/components/schemas/StreamOptions"}], "default": None, "nullable": True},
        "stop": {"anyOf": [{"type": "string"}, {"items": {"type": "string"}, "type": "array"}], "nullable": True},
    }}


def test_openapi30_refuses_a_list_of_types_rather_than_write_an_invalid_schema():
    from compat.schema import openapi30

    with pytest.raises(ValueError, match="list of types"):
        openapi30({"type": "object", "properties": {"x": {"type": ["string", "null"]}}})


def _nested_components_warnings(existing: dict[str, Any]) -> list[str]:
    """The warnings drf-spectacular records while ChatCompletionRequest's nested models are registered next to a
    component `ToolDef` of schema `existing` registered before them."""
    from types import SimpleNamespace

    from drf_spectacular.drainage import GENERATOR_STATS
    from drf_spectacular.plumbing import ComponentRegistry, ResolvedComponent

    from compat.schema import WireModelExtension

    registry = ComponentRegistry()
    registry.register(ResolvedComponent(name="ToolDef", type=ResolvedComponent.SCHEMA, object="ToolDef",
                                        schema=existing))
    GENERATOR_STATS.reset()
    try:
        with GENERATOR_STATS.silence():
            WireModelExtension(ChatCompletionRequest).map_serializer(SimpleNamespace(registry=registry), "request")
        return list(GENERATOR_STATS._warn_cache)
    finally:
        GENERATOR_STATS.reset()


def test_a_nested_model_named_like_another_component_is_a_schema_warning():
    from compat.schema import REF_TEMPLATE, openapi30

    same = openapi30(ChatCompletionRequest.model_json_schema(ref_template=REF_TEMPLATE))["$defs"]["ToolDef"]
    assert _nested_components_warnings(same) == []  # the same model met again (another operation)
    warnings = _nested_components_warnings({"type": "object", "properties": {"other": {"type": "string"}}})
    assert len(warnings) == 1 and "'ToolDef' already documents something else" in warnings[0], warnings
