"""`GET /api/sessions?q=`: the caller's own session names and message text, through the search index
(sessions_app.search), which follows every write: the ORM's, a turn's raw SQL, checkpoints, deletes."""

import uuid

import pytest
from django.db import connection

from sessions_app import search, services
from sessions_app.models import ChatMessage, ChatSession
from sessions_app.services import message_append

pytestmark = pytest.mark.django_db


def _chat(owner, name, *texts, **fields):
    session = ChatSession.objects.create(owner=owner, name=name, **fields)
    for number, text in enumerate(texts):
        message_append(session=session, role="user" if number % 2 == 0 else "assistant", content=text)
    return session


def _found(client, q, **params):
    response = client.get("/api/sessions", {"q": q, **params})
    assert response.status_code == 200, response.content
    return response.json()


def _ids(body):
    return [result["id"] for result in body["results"]]


def test_a_word_of_an_old_message_finds_its_chat_and_says_where(owner_client, owner):
    old = _chat(owner, "Trip", "Where should we go in spring?", "Lisbon has the oceanarium and trams.",
                "And food?", "Pastel de nata, of course.")
    for number in range(5):
        _chat(owner, f"Other {number}", "Nothing to see here.", "Indeed nothing.")
    body = _found(owner_client, "oceanarium")
    assert body["count"] == 1 and _ids(body) == [str(old.pk)]
    match = body["results"][0]["match"]
    hit = ChatMessage.objects.get(session=old, seq=2)
    assert match["message"] == str(hit.pk)
    assert match["snippet"] == "Lisbon has the oceanarium and trams."
    assert match["highlights"] == [[15, 25]]
    assert {"id", "name", "current", "pinned", "archived", "message_count"} <= set(body["results"][0])


def test_a_word_start_finds_the_word_and_a_single_character_only_a_whole_word(owner_client, owner):
    kube = _chat(owner, "Ops", "How do I restart a Kubernetes deployment?")
    letter = _chat(owner, "Letters", "Plan k is the fallback.")
    assert _ids(_found(owner_client, "kube")) == [str(kube.pk)]
    assert _ids(_found(owner_client, "ku")) == [str(kube.pk)]
    assert _ids(_found(owner_client, "k")) == [str(letter.pk)]
    assert _found(owner_client, "kubernetesx")["count"] == 0


def test_every_word_must_be_in_one_message_in_any_order_case_and_accents_ignored(owner_client, owner):
    both = _chat(owner, "Coffee", "The CAFÉ near the station serves crème brûlée.")
    apart = _chat(owner, "Split", "a cafe", "a station")
    assert _ids(_found(owner_client, "station cafe")) == [str(both.pk)]
    assert _ids(_found(owner_client, "creme BRULEE")) == [str(both.pk)]
    assert _ids(_found(owner_client, "Café")) == [str(apart.pk), str(both.pk)]


def test_a_name_matches_with_no_message(owner_client, owner):
    named = _chat(owner, "Quarterly budget review", "Let us start.")
    body = _found(owner_client, "budget")
    assert _ids(body) == [str(named.pk)]
    assert body["results"][0]["match"] == {"message": None, "snippet": "Quarterly budget review",
                                           "highlights": [[10, 16]]}


def test_another_users_words_are_never_found(owner_client, other_client, owner, other_user):
    theirs = _chat(other_user, "Zanzibar plans", "The password is xylophonic.")
    _chat(owner, "Mine", "Hello there.")
    for q in ("xylophonic", "xylo", "zanzibar", "password"):
        assert _found(owner_client, q)["count"] == 0, q
    assert _ids(_found(other_client, "xylophonic")) == [str(theirs.pk)]


def test_results_are_in_the_lists_order_and_archived_ones_are_included_unless_asked(owner_client, owner):
    first = _chat(owner, "first", "apricot jam")
    archived = _chat(owner, "second", "apricot pie", archived=True)
    pinned = _chat(owner, "third", "apricot tart", pinned=True)
    latest = _chat(owner, "fourth", "apricot juice")
    assert _ids(_found(owner_client, "apricot")) == [str(pinned.pk), str(latest.pk), str(archived.pk),
                                                    str(first.pk)]
    assert _ids(_found(owner_client, "apricot", archived="true")) == [str(archived.pk)]
    assert _ids(_found(owner_client, "apricot", archived="false")) == [str(pinned.pk), str(latest.pk),
                                                                      str(first.pk)]
    page = _found(owner_client, "apricot", limit=2, offset=2)
    assert page["count"] == 4 and _ids(page) == [str(archived.pk), str(first.pk)]
    assert all(result["match"]["snippet"] for result in page["results"])


def test_an_empty_query_is_the_list_and_the_query_is_held_to_200_characters(owner_client, owner):
    _chat(owner, "one", "text")
    _chat(owner, "gone", "text", archived=True)
    for q in ("", "   "):
        body = _found(owner_client, q)
        assert body["count"] == 1 and "match" not in body["results"][0]
    assert _found(owner_client, "text " + "x" * 195)["count"] == 0  # 200 characters: taken
    refused = owner_client.get("/api/sessions", {"q": "x" * 201})
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "invalid" and "q" in refused.json()["error"]["details"]


@pytest.mark.parametrize("q", ['"', "*", "NEAR(", "NEAR(a b)", "-", "OR", "AND", "NOT", "a OR b", "body:x",
                               "^x", "(", ")", "{x}", "'", "\\", "a:*", "x & y | !z", "%", "_", "'; DROP TABLE",
                               "\u00a0", "😀", "a\u0301", "ß", "\u202e"])
def test_hostile_queries_are_words_or_nothing_never_an_error(owner_client, owner, q):
    _chat(owner, "syntax", "NEAR( OR AND NOT body x y z DROP TABLE a b ß")
    body = _found(owner_client, q)
    if not q.strip():
        assert body["count"] == 1 and "match" not in body["results"][0]  # the list
    else:
        assert body["count"] == (1 if search.query_words(q) else 0), q


def test_a_query_with_a_nul_character_is_refused(owner_client):
    refused = owner_client.get("/api/sessions", {"q": "a\x00b"})
    assert refused.status_code == 400 and "q" in refused.json()["error"]["details"]


def test_a_streamed_replys_checkpoints_and_final_text_are_what_is_found(owner_client, owner):
    session = _chat(owner, "stream")
    question = ChatMessage(id=uuid.uuid4(), role="user", content="Tell me about marmosets")
    reply_id = uuid.uuid4()
    services.turn_messages_store(session=session, user_message=question, reply_id=reply_id, parent=None)
    assert _ids(_found(owner_client, "marmosets")) == [str(session.pk)]
    assert services.message_checkpoint_reply(message_id=reply_id, content="Marmosets are small")
    assert _found(owner_client, "small")["results"][0]["match"]["message"] == str(reply_id)
    services.message_finish_reply(session=session, message_id=reply_id, content="Marmosets are tiny monkeys.",
                         status="complete")
    assert _found(owner_client, "small")["count"] == 0
    assert _found(owner_client, "tiny monkeys")["results"][0]["match"]["message"] == str(reply_id)


def test_a_rename_is_found_and_the_old_name_is_not(owner_client, owner):
    session = _chat(owner, "Draft", "body")
    owner_client.put(f"/api/sessions/{session.pk}/rename", {"name": "Wedding speech"}, format="json")
    assert _ids(_found(owner_client, "wedding")) == [str(session.pk)]
    assert _found(owner_client, "draft")["count"] == 0


def _entries_of(session_id):
    """A counter of the session's index entries (its name and messages), still right once it is deleted."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            table = search.PG_TABLE
            return lambda: _count(f"SELECT count(*) FROM {table} WHERE session_id = %s", [session_id])
        cursor.execute(f"SELECT key FROM {search.KEY_TABLE} WHERE session_id = %s", [session_id.hex])
        key = cursor.fetchone()[0]
    return lambda: _count(f"SELECT count(*) FROM {search.FTS_TABLE} WHERE rowid BETWEEN %s AND %s",
                          [key << search.SEQ_BITS, ((key + 1) << search.SEQ_BITS) - 1])


def _count(sql, params):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def test_deleted_messages_and_sessions_leave_the_index(owner_client, owner):
    session = _chat(owner, "Garden", "tomatoes need sun", "basil too")
    kept = _chat(owner, "Kitchen", "tomatoes and basil")
    entries, kept_entries = _entries_of(session.pk), _entries_of(kept.pk)
    assert entries() == 3
    ChatMessage.objects.filter(session=session, content="basil too").delete()
    assert _ids(_found(owner_client, "basil")) == [str(kept.pk)]
    assert entries() == 2  # the name and one message
    services.session_delete(session=session)
    assert _ids(_found(owner_client, "tomatoes")) == [str(kept.pk)]
    assert _found(owner_client, "garden")["count"] == 0
    assert entries() == 0 and kept_entries() == 2


def test_a_long_message_gives_a_short_snippet_around_the_hit():
    text = ("lorem ipsum " * 40) + "the needle is here " + ("dolor sit " * 40)
    snippet, highlights = search.snippet_of(text, ["needle"])
    assert len(snippet) <= search.SNIPPET_CHARS + 2 and snippet.startswith("…") and snippet.endswith("…")
    assert [snippet[start:end] for start, end in highlights] == ["needle"]
    assert not snippet[1:].startswith(" ") and " ipsum" in snippet  # cut at words
    assert search.snippet_of("short\n\n  text", ["te"]) == ("short text", [(6, 10)])


@pytest.mark.django_db(transaction=True)
def test_the_index_survives_a_migration_that_rebuilds_the_tables(owner_client, owner):
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only: PostgreSQL alters tables in place, its indexes stay")
    session = _chat(owner, "Before", "pelican")
    field = ChatSession._meta.get_field("name")
    wider = field.clone()
    wider.set_attributes_from_name("name")
    wider.max_length = 201
    with connection.schema_editor() as editor:  # Django's SQLite ALTER: a new table, the triggers gone
        editor.alter_field(ChatSession, field, wider)
        editor.alter_field(ChatMessage, ChatMessage._meta.get_field("content"),
                           ChatMessage._meta.get_field("content"), strict=False)
    assert search.index_ensure(connection) is True
    assert search.index_ensure(connection) is False  # nothing missing any more
    message_append(session=session, role="assistant", content="flamingo")
    assert _ids(_found(owner_client, "flamingo")) == [str(session.pk)]
    assert _ids(_found(owner_client, "pelican")) == [str(session.pk)]
    with connection.schema_editor() as editor:
        editor.alter_field(ChatSession, wider, field)
    search.index_ensure(connection)


def test_the_migration_fills_the_index_from_the_rows_there_are(owner_client, owner):
    session = _chat(owner, "Old chat", "an archipelago of questions")
    index = search.index_for(connection)
    index.schema_drop(connection)
    index.schema_create(connection)
    assert _ids(_found(owner_client, "archipelago")) == [str(session.pk)]
    assert _found(owner_client, "old")["results"][0]["match"]["message"] is None


def test_a_search_on_postgresql_leaves_the_planner_as_it_was(owner_client, owner):
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only: the search turns table scans off for its one statement")
    _chat(owner, "plans", "a word")
    assert _found(owner_client, "word")["count"] == 1  # inside the test's transaction, as in an atomic request
    assert _count("SELECT count(*) FROM pg_settings WHERE name = 'enable_seqscan' AND setting = 'on'", []) == 1
