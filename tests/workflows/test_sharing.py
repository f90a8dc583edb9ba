"""Shared workflows (issue 44, item 2): through its access rule a viewer sees and runs a workflow, as himself, and
reads only the runs he started; an editor also saves versions; triggers, the rule and the ownership stay the
owner's (and admins'); anyone else gets 404 on every route, as for a workflow that does not exist.
"""

from __future__ import annotations

import pytest

from organisation.models import Group, Membership
from tests.catalogue import closed_url, two_upstreams, use_catalogue
from tests.conftest import client_for
from tests.fakes.llm import Text
from tests.workflows.conftest import graph, node
from usage import buffer
from usage.models import UsageDaily
from workflows.models import Workflow, WorkflowApproval, WorkflowRun, WorkflowTrigger

pytestmark = pytest.mark.django_db(transaction=True)

SIMPLE = graph(node("start", "input"), node("out", "output"), edges=[("start", "out")])


@pytest.fixture
def team(django_user_model, admin):
    users = {name: django_user_model.objects.create_user(name, password="x-correct-horse-1")
             for name in ("alice", "bob", "carol", "dave", "erin")}
    readers = Group.objects.create(name="readers")
    Membership.objects.create(group=readers, user=users["bob"])
    users["admin"] = admin
    users["readers"] = readers
    return users


def code(response) -> str:
    return response.json()["error"]["code"]


def make(user, name: str = "shared", body: dict | None = None) -> dict:
    created = client_for(user).post("/api/workflows", {"name": name, **(body or SIMPLE)}, format="json")
    assert created.status_code == 201, created.content
    return created.json()


def share(owner, workflow: dict, grants: list[dict], visibility: str = "shared") -> None:
    answer = client_for(owner).put(f"/api/workflows/{workflow['id']}/access",
                                   {"visibility": visibility, "grants": grants}, format="json")
    assert answer.status_code == 200, answer.content


@pytest.fixture
def shared(team) -> dict:
    """alice's workflow: the group `readers` (bob) views it, dave edits it; it has a trigger."""
    workflow = make(team["alice"])
    share(team["alice"], workflow, [{"group": team["readers"].pk, "role": "viewer"},
                                    {"user": team["dave"].pk, "role": "editor"}])
    trigger = client_for(team["alice"]).post(f"/api/workflows/{workflow['id']}/triggers", {}, format="json")
    assert trigger.status_code == 201
    return {**workflow, "trigger": trigger.json()["id"]}


def run(user, workflow: dict, **extra) -> dict:
    answer = client_for(user).post(f"/api/workflows/{workflow['id']}/run", {"input": user.username, **extra},
                                   format="json")
    assert answer.status_code in (200, 202), answer.content
    return answer.json()


def owner_only_requests(workflow: dict) -> list[tuple[str, str, dict | None]]:
    """The routes that stay the owner's: triggers, the access rule's change, transfer, delete."""
    base = f"/api/workflows/{workflow['id']}"
    trigger = f"{base}/triggers/{workflow['trigger']}"
    return [("get", f"{base}/triggers", None), ("post", f"{base}/triggers", {}),
            ("patch", trigger, {"enabled": False}), ("delete", trigger, None), ("post", f"{trigger}/rotate", None),
            ("put", f"{base}/access", {"visibility": "private", "grants": []}),
            ("post", f"{base}/transfer", {"user": 1}), ("delete", base, None)]


def edit_requests(workflow: dict) -> list[tuple[str, str, dict | None]]:
    base = f"/api/workflows/{workflow['id']}"
    return [("put", base, {"description": "changed"}), ("patch", base, {"description": "changed"}),
            ("post", f"{base}/nodes", {"id": "wait", "name": "wait", "type": "delay", "config": {"delayMs": 0}}),
            ("post", f"{base}/versions/1/restore", None), ("get", f"{base}/access", None)]


def without_request_id(response) -> dict:
    return {key: value for key, value in response.json()["error"].items() if key != "request_id"}


def listed(client, path: str) -> list[dict]:
    return client.get(path).json()["results"]


def send(client, method: str, path: str, body: dict | None):
    return getattr(client, method)(path, body, format="json") if body is not None else getattr(client, method)(path)


def test_the_list_shows_owned_and_shared_workflows_with_their_owner_and_the_callers_role(team, shared):
    mine = make(team["bob"], "bobs")
    found = listed(client_for(team["bob"]), "/api/workflows")
    assert [(item["name"], item["owner"], item["role"]) for item in found] == [
        ("bobs", {"id": team["bob"].pk, "username": "bob"}, "owner"),
        ("shared", {"id": team["alice"].pk, "username": "alice"}, "viewer")]
    assert mine["role"] == "owner" and mine["owner"]["username"] == "bob"
    assert [(item["name"], item["role"]) for item in listed(client_for(team["dave"]), "/api/workflows")] == [
        ("shared", "editor")]
    assert [item["role"] for item in listed(client_for(team["alice"]), "/api/workflows")] == ["owner"]
    assert listed(client_for(team["carol"]), "/api/workflows") == []


def test_a_viewer_reads_exports_and_runs_it_and_sees_only_the_runs_he_started(team, shared):
    bob, alice = client_for(team["bob"]), client_for(team["alice"])
    base = f"/api/workflows/{shared['id']}"
    got = bob.get(base).json()
    assert (got["role"], got["owner"]["username"], got["visibility"]) == ("viewer", "alice", "shared")
    assert bob.get(f"{base}/export").json()["name"] == "shared"
    assert [item["number"] for item in listed(bob, f"{base}/versions")] == [1]
    assert bob.get(f"{base}/versions/1").status_code == 200

    bobs = run(team["bob"], shared)
    alices = run(team["alice"], shared)
    assert bobs["status"] == "success" and bobs["output"] == "bob"
    assert WorkflowRun.objects.get(pk=bobs["id"]).owner_id == team["bob"].pk  # the run is his
    queued = run(team["bob"], shared, **{"async": True})
    assert WorkflowRun.objects.get(pk=queued["id"]).owner_id == team["bob"].pk

    assert {item["id"] for item in listed(bob, f"{base}/runs")} == {bobs["id"], queued["id"]}
    assert bob.get(f"/api/workflows/runs/{bobs['id']}").status_code == 200
    assert code(bob.get(f"/api/workflows/runs/{alices['id']}")) == "not_found"
    # The owner (and an admin) sees every run of the workflow.
    assert {item["id"] for item in listed(alice, f"{base}/runs")} == {bobs["id"], alices["id"], queued["id"]}
    assert alice.get(f"/api/workflows/runs/{bobs['id']}").status_code == 200
    assert client_for(team["admin"]).get(f"/api/workflows/runs/{bobs['id']}").status_code == 200
    # Someone else's run is not reachable through a workflow of one's own either.
    assert code(client_for(team["dave"]).get(f"/api/workflows/runs/{bobs['id']}")) == "not_found"


def test_a_viewer_cannot_save_manage_triggers_share_or_hand_it_over(team, shared):
    bob = client_for(team["bob"])
    for method, path, body in edit_requests(shared) + owner_only_requests(shared):
        answer = send(bob, method, path, body)
        assert (answer.status_code, code(answer)) == (403, "forbidden"), (method, path, answer.content)
    stored = Workflow.objects.get(pk=shared["id"])
    assert (stored.version, stored.description, stored.owner_id) == (1, "", team["alice"].pk)
    assert WorkflowTrigger.objects.filter(workflow=stored, enabled=True).count() == 1


def test_an_outsider_gets_404_on_every_route_as_for_a_missing_workflow(team, shared):
    carol = client_for(team["carol"])
    run_id = run(team["alice"], shared)["id"]
    base = f"/api/workflows/{shared['id']}"
    reads = [("get", base, None), ("get", f"{base}/export", None), ("get", f"{base}/versions", None),
             ("get", f"{base}/versions/1", None), ("get", f"{base}/runs", None),
             ("post", f"{base}/run", {"input": "x"}), ("get", f"/api/workflows/runs/{run_id}", None)]
    for method, path, body in reads + edit_requests(shared) + owner_only_requests(shared):
        answer = send(carol, method, path, body)
        assert (answer.status_code, code(answer)) == (404, "not_found"), (method, path, answer.content)
        missing = send(carol, method, path.replace(shared["id"], "00000000-0000-4000-8000-000000000000"), body)
        if shared["id"] in path:
            assert without_request_id(missing) == without_request_id(answer), (method, path)
    assert Workflow.objects.get(pk=shared["id"]).version == 1


def test_an_editor_saves_versions_but_manages_no_triggers_and_does_not_share(team, shared):
    dave = client_for(team["dave"])
    base = f"/api/workflows/{shared['id']}"
    changed = dave.patch(base, {"description": "by dave"}, format="json")
    assert changed.status_code == 200 and changed.json()["role"] == "editor" and changed.json()["version"] == 2
    added = dave.post(f"{base}/nodes", {"id": "wait", "name": "wait", "type": "delay", "config": {"delayMs": 0}},
                      format="json")
    assert added.status_code == 201
    assert dave.post(f"{base}/versions/1/restore").json()["version"] == 4
    assert dave.get(f"{base}/access").json()["visibility"] == "shared"
    for method, path, body in owner_only_requests(shared):
        answer = send(dave, method, path, body)
        assert (answer.status_code, code(answer)) == (403, "forbidden"), (method, path, answer.content)
    assert Workflow.objects.get(pk=shared["id"]).owner_id == team["alice"].pk


def test_everyone_visibility_makes_every_signed_in_user_a_viewer(team):
    workflow = make(team["alice"], "open")
    carol = client_for(team["carol"])
    assert code(carol.get(f"/api/workflows/{workflow['id']}")) == "not_found"
    share(team["alice"], workflow, [], visibility="everyone")
    assert carol.get(f"/api/workflows/{workflow['id']}").json()["role"] == "viewer"
    assert run(team["carol"], workflow)["status"] == "success"
    assert code(carol.patch(f"/api/workflows/{workflow['id']}", {"description": "x"}, format="json")) == "forbidden"


def test_the_owner_hands_it_over_and_its_triggers_go_with_the_old_owner(team, shared):
    alice = client_for(team["alice"])
    handed = alice.post(f"/api/workflows/{shared['id']}/transfer", {"user": team["erin"].pk}, format="json")
    assert handed.status_code == 200, handed.content
    assert handed.json()["owner"] == {"id": team["erin"].pk, "username": "erin"}
    stored = Workflow.objects.get(pk=shared["id"])
    assert stored.owner_id == team["erin"].pk
    assert not WorkflowTrigger.objects.filter(workflow=stored).exists()  # its secret was alice's
    assert code(alice.get(f"/api/workflows/{shared['id']}")) == "not_found"
    erin = client_for(team["erin"])
    assert erin.get(f"/api/workflows/{shared['id']}").json()["role"] == "owner"
    assert erin.get(f"/api/workflows/{shared['id']}/triggers").json() == []
    # The grants stay: bob still runs it, now erin's.
    assert run(team["bob"], shared)["status"] == "success"


def test_a_transfer_to_someone_with_a_workflow_of_that_name_is_409_and_changes_nothing(team, shared):
    make(team["erin"], "shared")
    answer = client_for(team["alice"]).post(f"/api/workflows/{shared['id']}/transfer", {"user": team["erin"].pk},
                                            format="json")
    assert (answer.status_code, code(answer)) == (409, "conflict")
    assert answer.json()["error"]["details"]["workflow"] == "shared"
    assert Workflow.objects.get(pk=shared["id"]).owner_id == team["alice"].pk
    assert WorkflowTrigger.objects.filter(workflow_id=shared["id"]).count() == 1


def test_an_admin_may_hand_over_anyones_workflow(team, shared):
    answer = client_for(team["admin"]).post(f"/api/workflows/{shared['id']}/transfer", {"user": team["dave"].pk},
                                            format="json")
    assert answer.status_code == 200
    stored = Workflow.objects.get(pk=shared["id"])
    assert stored.owner_id == team["dave"].pk
    assert not stored.grants.filter(user=team["dave"]).exists()  # owning gives more than his editor grant


def test_a_viewers_approval_is_the_owners_to_decide_and_follows_a_transfer(team):
    workflow = make(team["alice"], "gated", graph(node("start", "input"), node("ok", "approval"),
                                                  node("out", "output"), edges=[("start", "ok"), ("ok", "out")]))
    share(team["alice"], workflow, [{"group": team["readers"].pk, "role": "viewer"}])
    waiting = run(team["bob"], workflow)
    assert waiting["status"] == "waiting"
    approval = WorkflowApproval.objects.get(run_id=waiting["id"])
    assert list(approval.approvers.values_list("username", flat=True)) == ["alice"]
    assert listed(client_for(team["bob"]), "/api/approvals") == []
    assert [item["id"] for item in listed(client_for(team["alice"]), "/api/approvals")] == [str(approval.pk)]

    assert client_for(team["alice"]).post(f"/api/workflows/{workflow['id']}/transfer", {"user": team["erin"].pk},
                                          format="json").status_code == 200
    assert list(approval.approvers.values_list("username", flat=True)) == ["erin"]
    decided = client_for(team["erin"]).post(f"/api/approvals/{approval.pk}", {"decision": "approve"}, format="json")
    assert decided.status_code == 200, decided.content
    assert WorkflowRun.objects.get(pk=waiting["id"]).status == "success"


def test_workflow_models_and_tools_name_the_callers_own_workflows(team, shared):
    answer = client_for(team["bob"]).post("/v1/chat/completions", {
        "model": "workflow:shared", "messages": [{"role": "user", "content": "hi"}]}, format="json")
    assert answer.status_code == 404, answer.content
    models = client_for(team["bob"]).get("/v1/models").json()["data"]
    assert "workflow:shared" not in {model["id"] for model in models}


@pytest.fixture
def metered():
    buffer.flush()
    UsageDaily.objects.all().delete()
    yield
    buffer.flush()


@pytest.mark.parametrize("queued", [False, True])
def test_a_viewers_run_acts_with_his_rights_and_is_metered_to_him(team, fake_openai, metered, queued):
    with use_catalogue(two_upstreams(closed_url(), fake_openai.base_url)):
        workflow = make(team["alice"], "asks", graph(
            node("start", "input"), node("ask", "llm", prompt="Say: ${input}", model="local/small"),
            node("out", "output"), edges=[("start", "ask"), ("ask", "out")]))
        share(team["alice"], workflow, [{"group": team["readers"].pk, "role": "viewer"}])
        fake_openai.script(Text("hello bob", usage=(11, 3)))
        started = run(team["bob"], workflow, **{"async": queued})
        stored = WorkflowRun.objects.get(pk=started["id"])
        assert (stored.status, stored.output, stored.owner_id) == ("success", "hello bob", team["bob"].pk)
    buffer.flush()
    rows = list(UsageDaily.objects.values_list("user_id", "facet", "prompt_tokens", "completion_tokens"))
    assert rows == [(team["bob"].pk, "workflow", 11, 3)]
