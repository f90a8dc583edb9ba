"""A message typed the moment "New chat" is clicked goes to the new chat, in a real Chromium on a fresh server.

The page used to mount itself again once the new session existed: a message sent in between went to the
chat shown before (or started a chat of its own from #/chat) and its stream was hung up by the remount, so
it never showed. Its own server: the first click happens on a server with no chat yet, as a new user's would.
"""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import expect

from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e

ROUNDS = 4


def _chat_ids(server, headers) -> set[str]:
    page = requests.get(f"{server.base_url}/api/sessions?limit=200", headers=headers, timeout=10).json()
    assert page["count"] == len(page["results"]), "more chats than one page holds"
    return {session["id"] for session in page["results"]}


def test_a_message_sent_right_after_new_chat_is_sent_to_the_new_chat_and_answered(
        chat_upstream, dashboard_server, admin_headers, logged_in_page):
    page = logged_in_page
    # Each new chat's first exchange is followed by its title request (sessions_app.titles).
    chat_upstream.script(*[reply for round_ in range(ROUNDS)
                           for reply in (Text(f"Answer {round_}."), Text(f"Title {round_}"))])
    before = _chat_ids(dashboard_server, admin_headers)  # the server may be shared with earlier modules
    page.goto("/#/chat")
    seen = []
    for round_ in range(ROUNDS):
        page.get_by_role("button", name="New chat", exact=True).click()
        # No wait for the new chat: typed and sent at once, as a quick typist does.
        page.get_by_label("Message").fill(f"Question {round_}")
        page.get_by_label("Message").press("Enter")

        log = page.get_by_role("log")
        expect(log.locator("article.message-user")).to_have_count(1)
        expect(log.locator("article.message-user")).to_contain_text(f"Question {round_}")
        reply = log.locator("article.message-assistant")
        expect(reply).to_have_count(1)
        expect(reply).to_have_attribute("data-status", "complete")
        expect(reply.locator(".message-body")).to_have_text(f"Answer {round_}.")
        expect(page).to_have_url(re.compile(r"#/chat/[0-9a-f-]{36}$"))
        seen.append(page.url.rsplit("/", 1)[1])

    assert len(set(seen)) == ROUNDS, f"each round shows a chat of its own: {seen}"
    page.go_back()  # the new chat opened in the page, and the chat before it is still one step back
    expect(page).to_have_url(re.compile(f"#/chat/{seen[-2]}$"))
    expect(page.get_by_role("log").locator("article.message-user")).to_contain_text(f"Question {ROUNDS - 2}")
    assert _chat_ids(dashboard_server, admin_headers) - before == set(seen), "one chat per click, and no other"
    for round_, session_id in enumerate(seen):
        messages = requests.get(f"{dashboard_server.base_url}/api/sessions/{session_id}/messages",
                                headers=admin_headers, timeout=10).json()["results"]
        assert [(message["role"], message["content"], message["status"]) for message in messages] == [
            ("user", f"Question {round_}", "complete"), ("assistant", f"Answer {round_}.", "complete")]
    assert page.problems == []
