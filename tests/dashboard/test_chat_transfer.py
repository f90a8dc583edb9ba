"""Chats taken out and brought in, and named, in a real Chromium against a real server: a ChatGPT export imported
from the chat list, a chat exported as Markdown (its selected path), and a new chat named after its first
exchange."""

from __future__ import annotations

import json
import re

import pytest
import requests
from playwright.sync_api import expect

from tests.fakes.llm import Text
from tests.sessions_app.chatgpt_export import conversations

pytestmark = pytest.mark.e2e


def test_a_chatgpt_export_imports_as_two_chats_and_one_exports_as_markdown(logged_in_page, tmp_path):
    page = logged_in_page
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps(conversations()), encoding="utf-8")
    page.goto("/#/chat")
    page.get_by_label("Chats file to import").set_input_files(export)
    expect(page.get_by_role("status").filter(has_text="Imported")).to_have_text("Imported 2 chats.")
    chats = page.get_by_role("navigation", name="Chats")
    expect(chats.get_by_role("link", name=re.compile("^Trip to Lyon"))).to_be_visible()
    expect(chats.get_by_role("link", name=re.compile("^A photo"))).to_be_visible()

    chats.get_by_role("link", name=re.compile("^Trip to Lyon")).click()
    expect(page.locator("#chat-title")).to_have_text("Trip to Lyon")
    expect(page.get_by_role("log")).to_contain_text("About two hours by TGV.")
    page.get_by_label("Export this chat").click()
    with page.expect_download() as download:
        page.get_by_role("group", name="Export formats").get_by_role("button", name="Markdown").click()
    assert re.fullmatch(r"chat-trip-to-lyon-2024-05-29\.md", download.value.suggested_filename)
    text = download.value.path().read_text(encoding="utf-8")
    assert text.startswith("# Trip to Lyon\n")
    assert "How long is the train from Paris to Lyon?" in text and "Book early for the best fares." in text
    assert "How far is Lyon from Paris?" not in text  # the other branch is not on the selected path
    assert page.problems == []


def test_a_file_that_is_not_an_export_shows_where_it_is_wrong(logged_in_page, tmp_path):
    page = logged_in_page
    broken = conversations()
    broken[1]["mapping"]["p2"]["parent"] = "nowhere"
    export = tmp_path / "conversations.json"
    export.write_text(json.dumps(broken), encoding="utf-8")
    page.goto("/#/chat")
    page.get_by_label("Chats file to import").set_input_files(export)
    expect(page.locator(".chat-import-result")).to_contain_text("conversations.1.mapping.p2.parent")
    expect(page.locator(".chat-import-result")).to_have_class(re.compile("form-error"))


def test_a_new_chat_takes_the_title_the_model_gives_its_first_exchange(logged_in_page, chat_upstream,
                                                                       dashboard_server, admin_headers):
    page = logged_in_page
    chat_upstream.script(Text("Take the TGV from Gare de Lyon."), Text("Trains from Paris to Lyon"))
    page.goto("/#/chat")
    page.get_by_label("Message").fill("How do I get from Paris to Lyon by train?")
    page.get_by_label("Message").press("Enter")
    expect(page.get_by_role("log").locator("article.message-assistant")).to_have_attribute("data-status", "complete")
    expect(page.locator("#chat-title")).to_have_text("Trains from Paris to Lyon")
    chats = page.get_by_role("navigation", name="Chats")
    expect(chats.get_by_role("link", name=re.compile("^Trains from Paris to Lyon"))).to_be_visible()
    session_id = page.url.rsplit("/", 1)[1]
    stored = requests.get(f"{dashboard_server.base_url}/api/sessions/{session_id}", headers=admin_headers, timeout=10)
    assert stored.json()["name"] == "Trains from Paris to Lyon"
    assert page.problems == []
