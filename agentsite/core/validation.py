"""Input validation shared by DRF views and plain (async) Django views."""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest, QueryDict
from django.urls import register_converter
from django.urls.converters import get_converters
from rest_framework import serializers

from agentsite.core.errors import AppError, flatten_details, validation_message
from agentsite.core.jsonbody import json_loads_bounded


def validated(serializer_class: type[serializers.Serializer], data: Any, **kwargs: Any) -> dict[str, Any]:
    """The serializer's validated data; raises AppError 400 `invalid` with field -> messages details.

    A JSON body is first held to the fields its serializer declares (unknown_field_problems: DRF alone drops a
    misspelt field, so `{"title": "x"}` made a session named "New chat"), then to the JSON types its fields name
    (json_type_problems): DRF alone would turn `{"name": 566}` into "566" and `"1"` into 1.
    """
    serializer = serializer_class(data=data, **kwargs)
    if isinstance(data, QueryDict):  # a query string, a form or multipart: every value is text
        problems = text_number_problems(serializer, data)
    elif isinstance(data, dict):
        unknown = unknown_field_problems(serializer, data)
        if unknown:
            raise AppError("unknown_field", f"Unknown field: {', '.join(unknown)}. {_expected(serializer, unknown)}",
                           400, unknown)
        problems = json_type_problems(serializer, data)
    else:
        problems = {}
    if problems:
        raise AppError("invalid", validation_message(problems), 400, problems)
    if not serializer.is_valid():
        details = flatten_details(serializer.errors)
        raise AppError("invalid", validation_message(details), 400, details)
    return serializer.validated_data



def validated_by_path(serializer_class: type[serializers.Serializer], data: Any, **kwargs: Any) -> dict[str, Any]:
    """validated(), with a nested field's error named by its path (`tools.0`, `access.grants.0.user`) as the JSON
    type checks name it, not nested as DRF gives it."""
    try:
        return dict(validated(serializer_class, data, **kwargs))
    except AppError as exc:
        if exc.code != "invalid" or not any(isinstance(value, dict) for value in exc.details.values()):
            raise
        details = _by_path(exc.details)
        raise AppError("invalid", validation_message(details), 400, details) from None


def _by_path(details: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in details.items():
        if isinstance(value, dict):
            flat.update(_by_path(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat

def json_object_body(request: HttpRequest) -> dict[str, Any]:
    """The body of a plain (non-DRF) view as a JSON object; {} when empty.

    Raises AppError 415 `unsupported_media_type` for another Content-Type (a text/plain or form POST is
    what a foreign web page can send without a CORS preflight) and 400 `invalid` for anything not a
    JSON object (malformed, or nested deeper than 100 levels).
    """
    if not request.body:
        return {}
    if request.content_type != "application/json":
        raise AppError("unsupported_media_type", "Send the body as Content-Type: application/json.", 415)
    body = json_loads_bounded(request.body)
    if not isinstance(body, dict):
        raise AppError("invalid", "The body must be a JSON object.", 400)
    return body


_ASCII_INTEGER = re.compile(r"-?[0-9]{1,18}")


def text_number_problems(serializer: serializers.Serializer, data: QueryDict) -> dict[str, Any]:
    """Field -> messages, for each integer given as text that is not ASCII digits: DRF's int() reads " 1", "" (as
    the default), "١" and "１" as numbers, which the pagination parameters already refuse (README)."""
    return {name: ["Must be an integer written in ASCII digits."] for name, field in serializer.fields.items()
            if isinstance(field, serializers.IntegerField) and name in data
            and not _ASCII_INTEGER.fullmatch(data[name])}  # type: ignore[arg-type]  # a QueryDict item is its last str


# --- unknown fields ---------------------------------------------------------------------------------


def unknown_field_problems(
    serializer: serializers.Serializer, data: dict[str, Any], prefix: str = ""
) -> dict[str, Any]:
    """Field path -> messages, for each key of a JSON object (the body, or an object a nested serializer takes)
    that names no writable field. Free-form objects (JSONField, DictField) take any key."""
    writable = {name: field for name, field in serializer.fields.items() if not field.read_only}
    problems: dict[str, Any] = {}
    for key, value in data.items():
        field = writable.get(key)
        if field is None:
            problems[prefix + str(key)] = ["Unknown field."]
        elif isinstance(field, serializers.Serializer) and isinstance(value, dict):
            problems.update(unknown_field_problems(field, value, f"{prefix}{key}."))
        elif isinstance(field, serializers.ListSerializer) and isinstance(value, list):
            for index, item in enumerate(value):
                if isinstance(item, dict):
                    # A ListSerializer's child is the Serializer made with many=True (the stubs allow None).
                    child: Any = field.child
                    problems.update(unknown_field_problems(child, item, f"{prefix}{key}.{index}."))
    return problems


def _expected(serializer: serializers.Serializer, unknown: dict[str, Any]) -> str:
    if any("." in path for path in unknown):
        return "Check the field names against the API reference."
    names = sorted(name for name, field in serializer.fields.items() if not field.read_only)
    return f"This body takes: {', '.join(names)}." if names else "This body takes no fields."


# --- JSON types -------------------------------------------------------------------------------------
# The JSON type each field takes; ListSerializer, Serializer, ListField and DictField are checked
# (and their items) below. Fields not listed (JSONField, DecimalField, files, ...) take what DRF does.
_STRING_FIELDS = (serializers.CharField, serializers.UUIDField, serializers.DateTimeField, serializers.DateField,
                  serializers.TimeField, serializers.DurationField)
_MUST_BE = {"string": "Must be a string.", "integer": "Must be an integer.", "number": "Must be a number.",
            "boolean": "Must be true or false.", "array": "Must be a list.", "object": "Must be an object."}


def json_type_problems(serializer: serializers.Serializer, data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Field path (`messages.0.content`) -> messages, for each value that is not the JSON type its field takes."""
    problems: dict[str, Any] = {}
    for field in serializer.fields.values():
        if field.read_only or field.field_name not in data or data[field.field_name] is None:
            continue  # absent and null values are the serializer's to judge (required, allow_null)
        problems.update(_value_problems(field, data[field.field_name], prefix + field.field_name))
    return problems


def _value_problems(field: serializers.Field, value: Any, path: str) -> dict[str, Any]:
    expected = _json_type(field)
    if expected is None:
        return {}
    if not _is_json_type(value, expected):
        return {path: [_MUST_BE[expected]]}
    # Lengths are refused here, before any item is looked at: DRF checks a list's length only after validating
    # every item (a 10 MB body holds 1.5 million of them: 8-17 s of CPU), and its surrogate check walks a string
    # in Python, character by character (~60 ms per MB).
    # max_length is CharField's and ListField's (the fields that pass these checks), not every Field's.
    if expected == "string" and _too_long(field, value):
        return {path: [f"Ensure this field has no more than {field.max_length} characters."]}  # type: ignore[attr-defined]
    if (expected == "array" and getattr(field, "max_length", None) is not None
            and len(value) > field.max_length):  # type: ignore[attr-defined]
        return {path: [f"Ensure this field has no more than {field.max_length} elements."]}  # type: ignore[attr-defined]
    if isinstance(field, serializers.Serializer):
        return json_type_problems(field, value, path + ".")
    child = getattr(field, "child", None)
    if child is None:
        return {}
    items = value.items() if expected == "object" else enumerate(value)
    problems: dict[str, Any] = {}
    for key, item in items:
        if item is not None:
            problems.update(_value_problems(child, item, f"{path}.{key}"))
    return problems


def _too_long(field: serializers.Field, value: str) -> bool:
    limit = getattr(field, "max_length", None)
    if limit is None or len(value) <= limit:
        return False
    return len(value.strip() if getattr(field, "trim_whitespace", False) else value) > limit


def _json_type(field: serializers.Field) -> str | None:
    if isinstance(field, serializers.ListSerializer | serializers.ListField):
        return "array"
    if isinstance(field, serializers.Serializer | serializers.DictField):
        return "object"
    if isinstance(field, serializers.MultipleChoiceField):
        return "array"
    if isinstance(field, serializers.ChoiceField):
        return "string" if all(isinstance(choice, str) for choice in field.choices) else None
    if isinstance(field, serializers.BooleanField):
        return "boolean"
    if isinstance(field, serializers.IntegerField):
        return "integer"
    if isinstance(field, serializers.FloatField):
        return "number"
    if isinstance(field, _STRING_FIELDS):
        return "string"
    return None


def _is_json_type(value: Any, expected: str) -> bool:
    if isinstance(value, bool):  # bool is an int in Python, never a number in JSON
        return expected == "boolean"
    return isinstance(value, {"string": str, "integer": int, "number": int | float, "boolean": bool,
                              "array": list, "object": dict}[expected])


# What no database column takes: NUL (PostgreSQL refuses it in text) and a lone surrogate (json.loads makes one of a
# `\ud800` escape; UTF-8 cannot encode it, so neither database can store it).
_NOT_STORABLE = re.compile("[\x00\ud800-\udfff]")


def storable(text: str) -> bool:
    """Whether every database can store `text`: no NUL and no lone surrogate."""
    return _NOT_STORABLE.search(text) is None


def query_text(params: Any, name: str, *, max_length: int = 200) -> str:
    """A free-text query parameter ("" when absent), or AppError 400 `invalid` naming it: a NUL, bytes that were
    not UTF-8 (decoded as U+FFFD), a lone surrogate, or more than `max_length` characters."""

    value = params.get(name, "") or ""
    if len(value) > max_length or "\ufffd" in value or not storable(value):
        raise AppError("invalid", f"{name} must be text of at most {max_length} characters.", 400,
                       {name: [f"Text of at most {max_length} characters, without NUL or invalid UTF-8."]})
    return value


# --- path converters ---------------------------------------------------------------------------------


class IdConverter:
    """`<id:name>` in a URL conf: an integer id, which the view gets as text in ASCII digits (at most 18, within a
    64-bit key), or as "" when the segment is anything else. Django's `str` converter hands over any text, and
    `\\d`, `str.isdigit()` and `int()` all take other scripts' digits ("１", "١"), so `/api/users/１` named user 1.
    Every segment still matches, so that authentication runs first and a segment that is no id gets the view's
    own 404, the same answer as an id that names nothing."""

    regex = "[^/]+"

    def to_python(self, value: str) -> str:
        return value if value.isascii() and value.isdigit() and len(value) <= 18 else ""

    def to_url(self, value: int | str) -> str:
        return str(value)


def register_id_converter() -> None:
    """Register `id` once (each URL conf that uses it calls this first; Django refuses a name registered twice)."""
    if "id" not in get_converters():
        register_converter(IdConverter, "id")
