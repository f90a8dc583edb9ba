"""The audit tests count rows: each starts from an empty audit log. Rows another test's process or thread wrote
and committed (an async view writes its row on a database thread, outside a test's transaction) would
otherwise be counted here, depending on which tests ran before."""

from __future__ import annotations

import pytest


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
