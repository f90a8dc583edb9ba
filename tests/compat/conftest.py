"""Fixtures of the /v1 tests: the named-agent ones that the tests without a server share with MCP's."""

from tests.compat.agent_world import helper, metering  # noqa: F401 - fixtures, found here by pytest
