"""Migrations 0005/0006: sessions stored before the tree become one path each (parents chained in order,
`current` the last message) and their stored sources take the tree's shape."""

from __future__ import annotations

import uuid

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from sessions_app.models import ChatMessage, ChatSession

BEFORE_TREE = [("sessions_app", "0004_chatsession_agent")]

OLD_SOURCE = {"document_id": "7b1c", "filename": "guide.md", "chunk_index": 3, "score": 0.8, "rank_score": 0.5,
              "collection_id": "c0ff"}


def _old_sessions(apps) -> dict[str, list[uuid.UUID]]:
    user = apps.get_model("auth", "User").objects.create(username="old", password="!")
    session_model, message_model = apps.get_model("sessions_app", "ChatSession"), apps.get_model(
        "sessions_app", "ChatMessage")
    made: dict[str, list[uuid.UUID]] = {}
    for name, contents in (("linear", ["q1", "a1", "q2", "a2"]), ("other", ["only question"]), ("empty", [])):
        session = session_model.objects.create(owner=user, name=name)
        made[name] = []
        # Stored out of seq order on purpose: the chain follows seq, not insertion.
        for seq in sorted(range(1, len(contents) + 1), key=lambda number: -number):
            message = message_model.objects.create(
                session=session, seq=seq, role="user" if seq % 2 else "assistant", content=contents[seq - 1],
                sources=[OLD_SOURCE, "not a source", {"document": {"id": "d", "filename": "new.md"}, "text": "t"}]
                if seq == 2 and name == "linear" else [])
            made[name].append(message.pk)
        made[name].sort(key=lambda pk: message_model.objects.get(pk=pk).seq)
    return made


@pytest.mark.django_db(transaction=True)
def test_sessions_from_before_the_tree_become_one_path_with_current_the_last_and_sources_converted():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE_TREE)
    made = _old_sessions(executor.loader.project_state(BEFORE_TREE).apps)

    executor = MigrationExecutor(connection)
    executor.migrate(executor.loader.graph.leaf_nodes("sessions_app"))

    for name, ids in made.items():
        session = ChatSession.objects.get(name=name)
        messages = list(ChatMessage.objects.filter(session=session).order_by("seq"))
        assert [message.pk for message in messages] == ids
        assert [message.parent_id for message in messages] == [None, *ids][:len(ids)]
        assert session.current_id == (ids[-1] if ids else None)
    answer = ChatMessage.objects.get(pk=made["linear"][1])
    assert answer.sources == [
        {"collection": {"id": "c0ff", "name": ""}, "document": {"id": "7b1c", "filename": "guide.md"},
         "chunk_index": 3, "score": 0.8, "rank_score": 0.5, "text": ""},
        {"document": {"id": "d", "filename": "new.md"}, "text": "t"}]
