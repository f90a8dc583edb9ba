"""The Django admin's index names every model once, in readable English, and offers no django-q2 model that
our own code keeps (the scheduler's tick schedule)."""

import pytest
from django.contrib.admin import site as admin_site
from django.test import Client, RequestFactory
from django_q.models import Failure, Schedule

from agentsite.models import ServiceProcess

pytestmark = pytest.mark.django_db


def _app_list(user) -> list[dict]:
    request = RequestFactory().get("/admin/")
    request.user = user
    return admin_site.get_app_list(request)


def test_every_model_in_the_admin_index_has_a_name_of_its_own(admin):
    names = [(app["name"], model["name"]) for app in _app_list(admin) for model in app["models"]]
    labels = [model for _app, model in names]
    assert len(labels) == len(set(labels)), f"two admin entries share a name: {sorted(names)}"


def test_model_names_in_the_admin_are_plural_english(admin):
    labels = {model["name"] for app in _app_list(admin) for model in app["models"]}
    assert "Service processes" in labels, labels
    assert not [label for label in labels if label.endswith("sss")], labels
    assert ServiceProcess._meta.verbose_name_plural == "service processes"


def test_the_tick_schedule_is_not_offered_for_editing_but_the_queue_records_are(admin):
    assert not admin_site.is_registered(Schedule)  # kept by scheduler.services.tick_schedule_ensure
    assert admin_site.is_registered(Failure)
    client = Client()
    client.force_login(admin)
    page = client.get("/admin/").content.decode()
    assert page.count(">Scheduled tasks<") == 1, "one 'Scheduled tasks' entry: ours"
    assert "Service processes" in page and "Failed tasks" in page
    assert client.get("/admin/django_q/schedule/").status_code == 404
