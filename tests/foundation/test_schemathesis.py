"""Property-based checks of every operation in /api/schema against a real daphne server (schemathesis).

A fixed seed and a few examples per operation keep it short and repeatable; CI runs it once on each database,
each with a seed of its own, so that the two passes try different examples (EXAMPLES each, twice as many in
all). It fails on a 500 (or a 5xx the operation does not declare), on any status, content type, header or body
the schema does not declare, and on invalid input that is accepted. Requests carry a real user's token (an
admin's on admin operations), so they reach past the 401s.
"""

from __future__ import annotations

import pytest
import requests
import schemathesis
from django.conf import settings as django_settings
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis.errors import Unsatisfiable
from schemathesis.core.failures import FailureGroup
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.foundation.test_openapi import ADMIN_OPERATIONS
from tests.server import LiveServer

pytestmark = pytest.mark.e2e  # every test here starts a process


@schemathesis.check
def no_server_error_beyond_documented_upstream_failures(ctx, response, case) -> None:
    """A 500 is a bug (docs/api.md); a 502/503 is an answer only where the operation documents it (an MCP server
    that cannot start is mcp_connect_failed, 502)."""
    status = response.status_code
    if status == 500 or (status > 500 and str(status) not in case.operation.responses.status_codes):
        raise AssertionError(f"{case.operation.label} answered {status}: {response.text[:500]}")


CHECKS = [no_server_error_beyond_documented_upstream_failures, status_code_conformance, content_type_conformance,
          response_headers_conformance, response_schema_conformance, negative_data_rejection]
PASSWORD = "correct-horse-battery-9"
# Per operation and mode, in each of CI's passes: 175 operations x 2 modes. Drawing the examples is most of the
# test's CPU (~0.4 ms of it a request, ~15 ms a drawn example: schemathesis rejects about five draws for each
# example it keeps), so the passes split them: each draws EXAMPLES of its own (SEED), twelve different ones in all.
EXAMPLES = 6
SEED = 5102 if "postgresql" in django_settings.DATABASES["default"]["ENGINE"] else 5101


@pytest.fixture(scope="module")
def live():
    # A login limit high enough for the generated login attempts, which all come from 127.0.0.1.
    server = LiveServer(command="daphne", env={"AGENTSITE_LOGIN_RATE_LIMIT": "100000"}).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def tokens(live) -> dict[str, str]:
    registered = requests.post(f"{live.base_url}/api/auth/register", timeout=10,
                               json={"username": "fuzzed", "password": PASSWORD})
    assert registered.status_code == 201, registered.text
    return {"admin": live.login()["token"], "user": registered.json()["token"]}


def _harmless(case) -> None:
    """Generated MCP servers must not start a random program or reach a random host: point them nowhere."""
    if case.path == "/api/mcp/connect" and isinstance(case.body, dict):
        if isinstance(case.body.get("command"), str) and case.body["command"]:
            case.body["command"] = "/nonexistent/agentsite-schemathesis"
        if isinstance(case.body.get("url"), str) and case.body["url"]:
            case.body["url"] = "http://127.0.0.1:9/mcp"


def _check_operation(operation, mode: GenerationMode, tokens: dict[str, str]) -> None:
    role = "admin" if (operation.method.lower(), operation.path) in ADMIN_OPERATIONS else "user"
    headers = {"Authorization": f"Bearer {tokens[role]}"}

    @given(case=operation.as_strategy(generation_mode=mode))
    @seed(SEED)
    @settings(max_examples=EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck), phases=[Phase.explicit, Phase.generate, Phase.shrink])
    def run(case) -> None:
        _harmless(case)
        case.call_and_validate(headers=headers, checks=CHECKS, timeout=30)

    run()


def test_every_operation_answers_as_its_schema_says(live, tokens):
    # schemathesis' own pytest loader (from_fixture) fails under pytest 9, so each operation runs here.
    schema = schemathesis.openapi.from_url(f"{live.base_url}/api/schema?format=json")
    # Unknown query parameters are ignored (as by most APIs; docs/api.md promises nothing else), and the token is
    # ours to send: schemathesis neither adds unknown parameters nor drops the Authorization header.
    schema.config.generation.update(allow_extra_parameters=False, with_security_parameters=False)
    failures: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 30
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            try:
                _check_operation(operation, mode, tokens)
            except Unsatisfiable:  # nothing to make invalid (no parameters, no body): no negative case
                continue
            except (Exception, FailureGroup) as exc:  # noqa: BLE001 - collect every operation's failures first
                failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}):\n{exc}")
    assert not failures, "\n\n".join(failures)
