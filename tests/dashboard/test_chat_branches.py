"""The chat's branches in a real Chromium against a real server: regenerate a reply and switch between the
answers, edit a question (with its Edit button and with Up arrow) and switch between the questions, and stop
a reply (the Stop button, Escape) so that the server keeps it `stopped` with the text so far."""

from __future__ import annotations

import json
import re
import threading
import time

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import PHONE
from tests.fakes.llm import Raw, Text

# The model's title is held back for as long as a test needs: the default 5 s could lapse under a loaded CI.
LIVE_SERVER_ENV = {"AGENTSITE_CHAT_TITLE_TIMEOUT_S": "60"}

pytestmark = pytest.mark.e2e

SLOW_WORDS = [f"word{number} " for number in range(40)]  # 40 deltas, 0.25 s apart: 10 s unless stopped


def log(page):
    return page.get_by_role("log")


def new_chat(page) -> str:
    page.get_by_role("button", name="New chat", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/chat/[0-9a-f-]{36}$"))
    return page.url.rsplit("/", 1)[1]


def ask(page, text: str) -> None:
    replies = log(page).locator("article.message-assistant")
    count = replies.count()
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")
    expect(replies).to_have_count(count + 1)
    expect(replies.last).to_have_attribute("data-status", "complete")


def shown(page) -> list[str]:
    """The log's messages, in order, as `role: text` (the body only)."""
    expect(log(page)).to_have_attribute("aria-busy", "false")
    return [f"{article.get_attribute('class').split('message-')[1].split()[0]}: "
            f"{article.locator('.message-body').inner_text().strip()}"
            for article in log(page).locator("article.message").all()]


def tree(server, headers, session_id) -> dict:
    answer = requests.get(f"{server.base_url}/api/sessions/{session_id}/messages", headers=headers, timeout=10)
    answer.raise_for_status()
    return answer.json()


def sent(upstream) -> list[str]:
    return [message["content"] for message in upstream.bodies()[-1]["messages"] if message["role"] != "system"]


def test_regenerate_streams_a_second_answer_and_the_arrows_switch_between_them(
        chat_upstream, logged_in_page, dashboard_server, admin_headers, shot):
    page = logged_in_page
    # The first exchange names the chat: the model is asked for its title right after the first answer.
    chat_upstream.script(Text("The first answer."), Text("Saying something"), Text("The second answer."),
                         Text("You are welcome."))
    session_id = new_chat(page)
    ask(page, "Say something")
    assert shown(page) == ["user: Say something", "assistant: The first answer."]
    page.get_by_role("button", name="Regenerate").click()
    expect(log(page).locator("article.message-assistant")).to_have_text(re.compile("The second answer."))
    assert shown(page) == ["user: Say something", "assistant: The second answer."]
    assert sent(chat_upstream) == ["Say something"]  # the same history, without the first answer
    reply = log(page).locator("article.message-assistant")
    expect(reply.get_by_role("group", name="Reply 2 of 2")).to_contain_text("2/2")
    expect(reply.get_by_role("button", name="Next reply")).to_be_disabled()
    shot(page, "chat-branches-1280")

    reply.get_by_role("button", name="Previous reply").click()
    expect(reply.locator(".branch-position")).to_have_text("1/2")
    assert shown(page) == ["user: Say something", "assistant: The first answer."]
    stored = tree(dashboard_server, admin_headers, session_id)
    first, second = (message for message in stored["results"] if message["role"] == "assistant")
    assert stored["current"] == first["id"] and first["parent"] == second["parent"]
    # The focus stayed on the arrows: the keyboard goes back to the second answer.
    expect(page.get_by_role("button", name="Next reply")).to_be_focused()
    page.keyboard.press("Enter")
    expect(log(page).locator(".branch-position")).to_have_text("2/2")
    assert shown(page) == ["user: Say something", "assistant: The second answer."]
    page.get_by_role("button", name="Previous reply").click()
    expect(log(page).locator(".branch-position")).to_have_text("1/2")

    page.reload()  # the selection is the server's
    expect(log(page).locator(".branch-position")).to_have_text("1/2")
    assert shown(page) == ["user: Say something", "assistant: The first answer."]
    # Another tab selects the second answer: a question asked here still follows the answer shown here.
    requests.patch(f"{dashboard_server.base_url}/api/sessions/{session_id}", headers=admin_headers, timeout=10,
                   json={"current": second["id"]}).raise_for_status()
    ask(page, "Thanks")
    assert sent(chat_upstream) == ["Say something", "The first answer.", "Thanks"]
    assert page.problems == []


def held_title(title: str, step: threading.Semaphore) -> Raw:
    """A non-streamed chat completion naming the chat `title`, its end sent once the test releases `step`."""
    body = json.dumps({"id": "chatcmpl-title", "object": "chat.completion", "created": 0, "model": "fake-model",
                       "choices": [{"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": title}}],
                       "usage": {"prompt_tokens": 40, "completion_tokens": 3, "total_tokens": 43}})
    return Raw(body, content_type="application/json", pieces=[body[:20], body[20:]], step=step)


def test_the_next_question_is_sent_while_the_first_answer_is_still_being_titled(
        chat_upstream, logged_in_page, dashboard_server):
    page = logged_in_page
    step, second_step = threading.Semaphore(0), threading.Semaphore(0)
    # The second exchange asks for a title too (the chat still has none when it ends): held until the first's is in.
    chat_upstream.script(Text("Paris."), held_title("European capitals", step), Text("Madrid."),
                         held_title("Spanish capitals", second_step))
    new_chat(page)
    ask(page, "Capital of France?")
    deadline = time.monotonic() + 15
    while len(chat_upstream.bodies()) < 2:  # the title's request has reached the model, which holds it
        assert time.monotonic() < deadline, "the server never asked the model for the chat's title"
        time.sleep(0.05)
    # The first reply is done: Send is back, the Stop button gone, while its stream still waits for the title.
    expect(page.get_by_role("button", name="Send")).to_be_enabled()
    expect(page.locator(".chat-composer button", has_text="Stop")).to_be_hidden()
    expect(log(page)).to_have_attribute("aria-busy", "false")
    ask(page, "And of Spain?")
    assert shown(page)[-2:] == ["user: And of Spain?", "assistant: Madrid."]
    expect(page.locator("#chat-title")).to_have_text("New chat")
    step.release()
    expect(page.locator("#chat-title")).to_have_text("European capitals")  # the first stream, read on, named it
    second_step.release()  # the later title finds the chat named, and leaves it so (sessions_app/titles.py)
    expect(log(page).locator("article.message-assistant").first).to_have_attribute("data-status", "complete")
    assert page.problems == []


def test_editing_questions_makes_siblings_and_the_arrows_switch_between_the_questions(
        chat_upstream, logged_in_page, dashboard_server, admin_headers, shot):
    page = logged_in_page
    page.set_viewport_size(PHONE)
    chat_upstream.script(Text("Paris."), Text("Capitals"), Text("Madrid."), Text("Rome."), Text("Berlin."))
    session_id = new_chat(page)
    ask(page, "Capital of France?")
    ask(page, "And of Spain?")

    # Up arrow in the empty composer edits the last question; Escape leaves it as it was.
    page.get_by_label("Message").press("ArrowUp")
    editor = page.get_by_label("Edit your message")
    expect(editor).to_be_focused()
    expect(editor).to_have_value("And of Spain?")
    editor.press("Escape")
    expect(editor).to_have_count(0)
    assert shown(page)[-2:] == ["user: And of Spain?", "assistant: Madrid."]
    page.get_by_label("Message").press("ArrowUp")
    page.get_by_label("Edit your message").fill("And of Italy?")
    page.get_by_role("button", name="Save").click()
    expect(log(page).locator("article.message-assistant").last).to_have_text(re.compile("Rome."))
    assert shown(page) == ["user: Capital of France?", "assistant: Paris.", "user: And of Italy?", "assistant: Rome."]
    assert sent(chat_upstream) == ["Capital of France?", "Paris.", "And of Italy?"]
    question = log(page).locator("article.message-user").last
    expect(question.locator(".branch-position")).to_have_text("2/2")
    shot(page, "chat-edit-375")

    question.get_by_role("button", name="Previous question").click()
    expect(question.locator(".branch-position")).to_have_text("1/2")
    assert shown(page)[-2:] == ["user: And of Spain?", "assistant: Madrid."]

    # The first question, with its Edit button: a new first question (parent null), alone on its branch.
    log(page).locator("article.message-user").first.get_by_role("button", name="Edit").click()
    page.get_by_label("Edit your message").fill("Capital of Germany?")
    page.get_by_label("Edit your message").press("Enter")
    expect(log(page).locator("article.message-assistant").last).to_have_text(re.compile("Berlin."))
    assert shown(page) == ["user: Capital of Germany?", "assistant: Berlin."]
    assert sent(chat_upstream) == ["Capital of Germany?"]
    roots = [message for message in tree(dashboard_server, admin_headers, session_id)["results"]
             if message["parent"] is None]
    assert [message["content"] for message in roots] == ["Capital of France?", "Capital of Germany?"]
    log(page).locator("article.message-user").first.get_by_role("button", name="Previous question").click()
    expect(log(page).locator("article.message-user").first.locator(".branch-position")).to_have_text("1/2")
    # The branch through the first question comes back at its newest end (the API's rule): the edit about Italy.
    assert shown(page) == ["user: Capital of France?", "assistant: Paris.", "user: And of Italy?", "assistant: Rome."]
    assert page.problems == []


def test_stop_keeps_the_reply_stopped_with_its_text_by_the_button_and_by_escape(
        chat_upstream, logged_in_page, dashboard_server, admin_headers):
    page = logged_in_page
    chat_upstream.script(*[Text("".join(SLOW_WORDS), pieces=SLOW_WORDS, delay=0.25) for _ in range(3)])
    session_id = new_chat(page)
    replies = log(page).locator("article.message-assistant")

    def stop_slow_reply(question: str, stop) -> dict:
        page.get_by_label("Message").fill(question)
        page.get_by_label("Message").press("Enter")
        expect(replies.last).to_contain_text("word1")
        stop()
        expect(replies.last).to_have_attribute("data-status", re.compile("stopped|interrupted"))
        expect(page.get_by_role("button", name="Stop", exact=True)).to_be_hidden()
        return tree(dashboard_server, admin_headers, session_id)["results"][-1]

    stored = stop_slow_reply("A long one, please", lambda: page.get_by_role("button", name="Stop", exact=True).click())
    expect(replies.last).to_have_attribute("data-status", "stopped")
    expect(replies.last.get_by_text("Stopped", exact=True)).to_be_visible()
    assert stored["status"] == "stopped" and stored["content"].startswith("word0 word1")
    assert "word39" not in stored["content"]
    assert replies.last.locator(".message-body").inner_text().strip() == stored["content"].strip()

    stored = stop_slow_reply("Another long one", lambda: page.keyboard.press("Escape"))
    expect(replies.last).to_have_attribute("data-status", "stopped")
    assert stored["status"] == "stopped" and stored["content"].startswith("word0") and "word39" not in stored["content"]

    # A stop the server does not take: the page hangs up instead, and the reply is kept interrupted.
    page.route(re.compile(r"/messages/[0-9a-f-]{36}/stop$"), lambda route: route.fulfill(status=503, body="{}"))
    stored = stop_slow_reply("A third one", lambda: page.keyboard.press("Escape"))
    expect(replies.last).to_have_attribute("data-status", "interrupted")
    chat_upstream.wait_for_hangups_sync(1)
    page.reload()
    expect(replies).to_have_count(3)
    assert [reply.get_attribute("data-status") for reply in replies.all()] == ["stopped", "stopped", "interrupted"]
    assert [problem for problem in page.problems if "503" not in problem] == []
