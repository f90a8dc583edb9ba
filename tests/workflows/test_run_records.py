"""A run's record as its statements written once store it (workflows.services: run_create's insert, run_finish's
update): the same row the ORM's `create` and `update` write, on SQLite and PostgreSQL."""

from __future__ import annotations

import uuid

import pytest

from agentsite.agent.usage import Caller
from agentsite.core.processes import current_process_id
from workflows import selectors, services
from workflows.models import WorkflowRun

pytestmark = pytest.mark.django_db

COMPARED = [field.name for field in WorkflowRun._meta.local_concrete_fields
            if field.name not in ("id", "created_at", "started_at")]


@pytest.fixture
def runnable(owner):
    workflow = services.workflow_create(owner=owner, name=f"w{uuid.uuid4().hex[:6]}", nodes=[
        {"id": "in", "type": "input", "name": "in"},
        {"id": "calc", "type": "code", "name": "calc", "config": {"code": "return input + '!';"}}],
        edges=[{"from": "in", "to": "calc"}])
    return selectors.workflow_runnable(owner_id=owner.pk, workflow_id=workflow.pk)


@pytest.mark.parametrize(("queued", "caller"), [
    (False, None), (True, None), (False, "key"), (True, "key")])
def test_the_inserted_run_is_the_row_the_orm_writes(runnable, queued, caller):
    who = Caller(runnable.owner_id, "42", "workflow", None, False) if caller else None
    run = services.run_create(workflow=runnable, input_text="héllo \u2603", queued=queued, caller=who)
    assert run._state.adding is False
    stored = WorkflowRun.objects.get(pk=run.pk)
    # What the ORM writes for the same values (a copy of the fields, a fresh id).
    orm = WorkflowRun.objects.create(**{name: getattr(run, name) for name in COMPARED if name != "workflow"},
                                     workflow_id=run.workflow_id, started_at=run.started_at)
    expected = WorkflowRun.objects.filter(pk=orm.pk).values(*COMPARED).get()
    assert WorkflowRun.objects.filter(pk=run.pk).values(*COMPARED).get() == expected
    assert stored.status == (WorkflowRun.QUEUED if queued else WorkflowRun.RUNNING)
    assert (stored.graph["nodes"][1]["config"], stored.input) == ({"code": "return input + '!';"}, "héllo \u2603")
    assert (stored.acting_key, stored.admin_rights) == (("42", False) if caller else ("", None))
    assert stored.created_at == run.created_at and stored.created_at is not None
    assert (stored.started_at is None) is queued and stored.process == ("" if queued else current_process_id())
    # The instance it returns is saved: an ORM write on it updates the row, never inserts another.
    run.input = "changed"
    run.save(update_fields=["input"])
    assert WorkflowRun.objects.get(pk=run.pk).input == "changed"
    assert WorkflowRun.objects.filter(workflow_id=runnable.id).count() == 2


@pytest.mark.parametrize("output", [None, "text", 42, {"a": [1, None, "é"]}, [1, 2]])
def test_finishing_stores_each_json_value_as_the_orm_does(runnable, output):
    run = services.run_create(workflow=runnable, input_text="x")
    twin = services.run_create(workflow=runnable, input_text="x")
    WorkflowRun.objects.filter(pk__in=[run.pk, twin.pk]).update(state={"done": {"in": {"output": "x"}}})
    trace = [{"node": "calc", "status": "success", "ms": 0.5}]
    error = {"node": "calc", "message": "boom"} if output is None else None
    services.run_finish(run=run, status=WorkflowRun.SUCCESS, outputs={"calc": output}, output=output, error=error,
                        trace=trace)
    WorkflowRun.objects.filter(pk=twin.pk).update(status=WorkflowRun.SUCCESS, outputs={"calc": output},
                                                  output=output, error=error, trace=trace,
                                                  finished_at=run.finished_at, state={})
    fields = ["status", "outputs", "output", "error", "trace", "finished_at", "state"]
    mine = WorkflowRun.objects.filter(pk=run.pk).values(*fields).get()
    assert mine == WorkflowRun.objects.filter(pk=twin.pk).values(*fields).get()
    assert mine["output"] == output and mine["state"] == {} and mine["finished_at"] == run.finished_at
    # SQL NULL, as the ORM stores a None (not a JSON null): `output IS NULL` finds it.
    assert WorkflowRun.objects.filter(pk=run.pk, output__isnull=True).exists() is (output is None)


def test_a_finished_run_is_stored_once(runnable):
    run = services.run_create(workflow=runnable, input_text="x")
    services.run_finish(run=run, status=WorkflowRun.SUCCESS, outputs={}, output="first", error=None, trace=[])
    services.run_finish(run=run, status=WorkflowRun.ERROR, outputs={}, output=None,
                        error={"node": None, "message": "late"}, trace=[])
    stored = WorkflowRun.objects.get(pk=run.pk)
    assert (stored.status, stored.output, stored.error) == (WorkflowRun.SUCCESS, "first", None)
    cancelled = services.run_create(workflow=runnable, input_text="x")
    WorkflowRun.objects.filter(pk=cancelled.pk).update(status=WorkflowRun.CANCELLED)
    services.run_finish(run=cancelled, status=WorkflowRun.SUCCESS, outputs={}, output="x", error=None, trace=[])
    assert WorkflowRun.objects.get(pk=cancelled.pk).status == WorkflowRun.CANCELLED
