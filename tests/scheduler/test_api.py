"""/api/scheduler over the API client: tasks, validation naming the field, ownership, run now, history, preview."""

from __future__ import annotations

from datetime import datetime

import pytest

from scheduler.models import TaskRun
from sessions_app.services import session_create

pytestmark = pytest.mark.django_db(transaction=True)

TASK = {"name": "digest", "cron": "0 9 * * 1-5", "prompt": "Summarise the news.", "timezone": "Europe/Paris"}


@pytest.fixture(autouse=True)
def recording(settings):
    settings.AGENTSITE_SCHEDULER_RUNNER = "tests.scheduler.runners.recording_runner"


def create(client, **changes):
    return client.post("/api/scheduler/tasks", {**TASK, **changes}, format="json")


def test_create_returns_the_task_with_its_next_run(owner_client):
    response = create(owner_client)
    assert response.status_code == 201, response.json()
    task = response.json()
    assert {key: task[key] for key in TASK} == TASK
    assert task["enabled"] is True and task["missed"] == "run_once" and task["last_run_at"] is None
    assert task["session_id"] is None and task["workflow_id"] is None
    assert datetime.fromisoformat(task["next_run_at"].replace("Z", "+00:00")).hour in (7, 8)  # 09:00 Paris


@pytest.mark.parametrize(("changes", "field"), [
    ({"cron": "* * * *"}, "cron"), ({"cron": "@daily"}, "cron"), ({"cron": "0 0 31 2 *"}, "cron"),
    ({"timezone": "Mars/Olympus"}, "timezone"), ({"missed": "sometimes"}, "missed"), ({"name": ""}, "name"),
    ({"prompt": "x" * 32_001}, "prompt"), ({"enabled": "yes"}, "enabled"), ({"cron": 5}, "cron"),
    ({"session_id": "not-a-uuid"}, "session_id")])
def test_a_bad_task_is_a_400_naming_the_field_and_nothing_is_stored(owner_client, changes, field):
    response = create(owner_client, **changes)
    assert response.status_code == 400 and field in response.json()["error"]["details"]
    assert owner_client.get("/api/scheduler/tasks").json()["count"] == 0


def test_another_users_session_or_workflow_is_a_400_naming_it(owner_client, other_user):
    from workflows.services import workflow_create

    session = session_create(owner=other_user)
    workflow = workflow_create(owner=other_user, name="theirs")
    for field, value in (("session_id", str(session.pk)), ("workflow_id", str(workflow.pk))):
        response = create(owner_client, **{field: value})
        assert response.status_code == 400 and field in response.json()["error"]["details"]


def test_the_list_holds_only_the_callers_tasks(owner_client, other_client):
    create(owner_client)
    create(other_client, name="theirs")
    listed = owner_client.get("/api/scheduler/tasks").json()
    assert listed["count"] == 1 and listed["results"][0]["name"] == "digest"


def test_changing_the_schedule_recomputes_the_next_run(owner_client):
    task = create(owner_client).json()
    # Minutes 3, 8, 13...: never the created task's 09:00 (with */5 both fell on 08:00 UTC when the test ran in
    # the five minutes before 09:00 in Paris on a weekday, and the two next runs were equal).
    changed = owner_client.patch(f"/api/scheduler/tasks/{task['id']}", {"cron": "3-59/5 * * * *", "timezone": "UTC"},
                                 format="json").json()
    assert changed["cron"] == "3-59/5 * * * *" and changed["next_run_at"] != task["next_run_at"]
    assert datetime.fromisoformat(changed["next_run_at"]).minute % 5 == 3
    disabled = owner_client.put(f"/api/scheduler/tasks/{task['id']}", {"enabled": False}, format="json").json()
    assert disabled["enabled"] is False and disabled["next_run_at"] is None
    assert owner_client.patch(f"/api/scheduler/tasks/{task['id']}", {"cron": "bad"}, format="json").status_code == 400


def test_another_users_task_is_not_found(owner_client, other_client):
    task = create(owner_client).json()
    for response in (other_client.patch(f"/api/scheduler/tasks/{task['id']}", {"name": "x"}, format="json"),
                     other_client.delete(f"/api/scheduler/tasks/{task['id']}"),
                     other_client.post(f"/api/scheduler/run/{task['id']}"),
                     other_client.get(f"/api/scheduler/history?task={task['id']}")):
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert owner_client.delete(f"/api/scheduler/tasks/{task['id']}").status_code == 204
    assert owner_client.get("/api/scheduler/tasks").json()["count"] == 0


def test_run_now_queues_a_manual_run_that_appears_in_the_history(owner_client, other_client):
    task = create(owner_client).json()
    queued = owner_client.post(f"/api/scheduler/run/{task['id']}")
    assert queued.status_code == 202
    run = queued.json()
    assert (run["task_id"], run["task_name"], run["trigger"]) == (task["id"], "digest", "manual")
    history = owner_client.get(f"/api/scheduler/history?task={task['id']}").json()["results"]
    assert [(item["id"], item["status"]) for item in history] == [(run["id"], "success")]
    assert history[0]["output"].startswith("ran digest")
    assert other_client.get("/api/scheduler/history").json()["count"] == 0


def test_history_is_newest_first_and_can_be_filtered_by_task(owner_client):
    first, second = create(owner_client).json(), create(owner_client, name="other").json()
    for task in (first, second, first):
        owner_client.post(f"/api/scheduler/run/{task['id']}")
    everything = owner_client.get("/api/scheduler/history").json()["results"]
    assert [item["task_name"] for item in everything] == ["digest", "other", "digest"]
    assert owner_client.get(f"/api/scheduler/history?task={first['id']}").json()["count"] == 2
    assert owner_client.get("/api/scheduler/history?task=nope").status_code == 400
    assert TaskRun.objects.count() == 3


def test_preview_lists_the_next_fire_times(owner_client):
    response = owner_client.get("/api/scheduler/preview", {"cron": "*/15 * * * *"})
    assert response.status_code == 200
    times = [datetime.fromisoformat(item.replace("Z", "+00:00")) for item in response.json()["next"]]
    assert len(times) == 5 and times == sorted(times) and {time.minute % 15 for time in times} == {0}
    twenty = owner_client.get("/api/scheduler/preview", {"cron": "0 9 * * *", "timezone": "Asia/Tokyo", "count": 20})
    assert len(twenty.json()["next"]) == 20 and all(item.endswith("T00:00:00Z") for item in twenty.json()["next"])


@pytest.mark.parametrize(("query", "field"), [({"cron": "* * *"}, "cron"), ({}, "cron"),
                                              ({"cron": "* * * * *", "timezone": "Nowhere/Land"}, "timezone"),
                                              ({"cron": "* * * * *", "count": 21}, "count"),
                                              ({"cron": "* * * * *", "count": 0}, "count")])
def test_a_bad_preview_is_a_400_naming_the_field(owner_client, query, field):
    response = owner_client.get("/api/scheduler/preview", query)
    assert response.status_code == 400 and field in response.json()["error"]["details"]


def test_the_scheduler_needs_a_token(anon_client):
    for path in ("/api/scheduler/tasks", "/api/scheduler/history", "/api/scheduler/preview?cron=*+*+*+*+*"):
        assert anon_client.get(path).status_code == 401
