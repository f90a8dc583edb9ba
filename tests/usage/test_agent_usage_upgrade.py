"""The upgrade to usage by agent (issue 45, item 7): what was recorded before is of no agent, the new
per-(day, user, agent) rollup starts with it summed, and later calls of the same row add to it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from agentsite.agent.usage import Caller, CallRecord
from usage import buffer
from usage.models import UsageAgentDaily, UsageDaily, UsageUserDaily

BEFORE_AGENTS = [("usage", "0003_group_budget")]
TODAY = datetime.now(UTC).date()


@pytest.mark.django_db(transaction=True)
def test_usage_recorded_before_agents_is_no_agents_and_rolled_up(owner, other_user):
    buffer.flush()
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_AGENTS)
    old_rows = executor.loader.project_state(BEFORE_AGENTS).apps.get_model("usage", "UsageDaily")
    for user, key, tokens in ((owner, "k1", 10), (owner, "k2", 20), (other_user, "", 5)):
        old_rows.objects.create(day=TODAY, user_id=user.pk, key_id=key, facet="v1", model_requested="m",
                                model_answered="m", requests=1, prompt_tokens=tokens, completion_tokens=1, cost=0.5)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes("usage"))

    assert set(UsageDaily.objects.values_list("agent", flat=True)) == {""}
    assert sorted(UsageAgentDaily.objects.values_list("user_id", "agent", "requests", "prompt_tokens", "cost")) == [
        (owner.pk, "", 2, 30, 1.0), (other_user.pk, "", 1, 5, 0.5)]
    buffer.add(CallRecord(Caller(owner.pk, "k1", "v1"), "m", "m", 1, 1, 1.0, "ok", True), 0.0, day=TODAY.isoformat())
    buffer.add(CallRecord(Caller(owner.pk, "k1", "v1", agent="x"), "m", "m", 1, 1, 1.0, "ok", True), 0.0,
               day=TODAY.isoformat())
    buffer.flush()
    assert sorted(UsageDaily.objects.filter(key_id="k1").values_list("agent", "requests")) == [("", 2), ("x", 1)]
    assert sorted(UsageAgentDaily.objects.filter(user_id=owner.pk).values_list("agent", "requests")) == [
        ("", 3), ("x", 1)]
    UsageDaily.objects.all().delete()
    UsageUserDaily.objects.all().delete()
    UsageAgentDaily.objects.all().delete()
