"""The chat list's search box finds a chat by a word of an old message, in a real Chromium on a real server:
typing searches, the hit is marked (as text: a hostile chat's snippet stays text), a result opens its chat, and
Escape brings the list back."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import expect

from tests.e2e import sse_events
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e
OWN_SERVER = True  # the list and the search count every chat of the admin: no other module's may be there


def _chat(server, headers, name, *questions):
    session = requests.post(f"{server.base_url}/api/sessions", json={"name": name}, headers=headers, timeout=10)
    session_id = session.json()["id"]
    for question in questions:
        with requests.post(f"{server.base_url}/api/sessions/{session_id}/chat", json={"message": question},
                           headers=headers, stream=True, timeout=30) as response:
            assert response.status_code == 200, response.text
            assert [name for name, _ in sse_events(response) if name != "comment"][-1] == "done"
    return session_id


def test_the_search_box_finds_a_chat_by_a_word_of_an_old_message_and_opens_it(
        chat_upstream, dashboard_server, admin_headers, logged_in_page, shot):
    page = logged_in_page
    chat_upstream.script(Text("In hangar nine, next to the blimp."), Text("You are welcome."),
                         Text("Flour, water, salt."), Text("It is <b>bold</b> & <img src=x onerror=alert(1)>."))
    wanted = _chat(dashboard_server, admin_headers, "Airship logistics", "Where did we park the zeppelin?",
                   "Thanks!")
    _chat(dashboard_server, admin_headers, "Bread", "What goes in bread?")
    hostile = _chat(dashboard_server, admin_headers, "<img src=x onerror=alert(2)>", "Say something zeppelinesque")
    page.reload()  # the log-in opened the chat page before these chats existed
    chats = page.get_by_role("navigation", name="Chats")
    expect(chats.locator(".session-list li")).to_have_count(3)

    page.get_by_label("Search chats").press_sequentially("zepp", delay=30)
    results = page.get_by_role("list", name="Search results")
    expect(results.locator("li")).to_have_count(2)
    first = results.locator(f'[data-session-id="{hostile}"]')
    expect(first.locator(".session-name")).to_have_text("<img src=x onerror=alert(2)>")
    expect(first.locator(".session-snippet mark")).to_have_text("zeppelinesque")
    found = results.locator(f'[data-session-id="{wanted}"]')
    expect(found.locator(".session-snippet")).to_have_text("Where did we park the zeppelin?")
    expect(found.locator(".session-snippet mark")).to_have_text("zeppelin")
    expect(results.locator("img, b")).to_have_count(0)  # the hostile name and text stay text
    expect(page.locator(".session-list")).to_be_hidden()
    shot(page, "chat-search")

    page.get_by_label("Search chats").fill("hangar nine")
    expect(results.locator("li")).to_have_count(1)
    expect(results.locator(".session-snippet mark")).to_have_text(["hangar", "nine"])
    results.get_by_role("link").click()
    expect(page).to_have_url(re.compile(f"#/chat/{wanted}$"))
    expect(page.get_by_role("log").locator("article.message-user").first).to_contain_text(
        "Where did we park the zeppelin?")

    page.get_by_label("Search chats").fill("nothingmatchesthis")
    expect(page.get_by_text("No chats match.")).to_be_visible()
    page.get_by_label("Search chats").press("Escape")
    expect(page.get_by_label("Search chats")).to_have_value("")
    expect(results).to_be_hidden()
    expect(chats.locator(".session-list li")).to_have_count(3)
    assert page.problems == []
