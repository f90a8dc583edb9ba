"""The audit tests count rows: each starts from an empty audit log. Rows another test's process or thread wrote
and committed (an async view writes its row on a database thread, outside a test's transaction) would
otherwise be counted here, depending on which tests ran before."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import pytest

T = TypeVar("T")


@pytest.fixture(autouse=True)
def _an_empty_audit_log(request):
    marker = request.node.get_closest_marker("django_db")
    if marker is None:
        yield
        return
    transactional = marker.kwargs.get("transaction", False)
    request.getfixturevalue("transactional_db" if transactional else "db")
    from accounts.models import AuditEvent

    AuditEvent.objects.all().delete()
    yield


def read_during_a_stream(read: Callable[[], T]) -> T:
    """`read()` (sync: a scrape, a summary) while an SSE response has sent its first event and is still open."""
    from asgiref.sync import sync_to_async

    from agentsite.core.sse import sse_response

    async def events():
        yield b"data: 1\n\n"
        yield b"data: 2\n\n"

    async def first_event_then_read() -> T:
        stream = sse_response(events()).streaming_content
        await anext(stream)
        seen = await sync_to_async(read)()
        async for _ in stream:
            pass
        return seen

    return asyncio.run(first_event_then_read())
