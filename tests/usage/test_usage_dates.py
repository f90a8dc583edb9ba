"""GET /api/usage's dates: absent means the default range; present must be a date (an empty one is refused, as the
schema's `format: date` says, rather than read as absent)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("query", ["from=", "to=", "from=&to=", "from=2026-13-01", "to=yesterday"])
def test_a_date_that_is_not_one_is_a_400_naming_it(owner_client, query):
    response = owner_client.get(f"/api/usage?{query}")
    assert response.status_code == 400 and response.json()["error"]["code"] == "invalid", response.content
    assert set(response.json()["error"]["details"]) <= {"from", "to"}


def test_absent_dates_are_the_last_thirty_days(owner_client):
    assert owner_client.get("/api/usage").status_code == 200
    assert owner_client.get("/api/usage?from=2026-01-01&to=2026-01-31").status_code == 200
