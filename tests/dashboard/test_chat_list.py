"""The chat list and the composer in a real Chromium against a real server: pinned chats first and archived
ones apart (each from the keyboard), a draft per chat that outlives a reload and goes once sent, files
dropped on the conversation and images pasted into the box sent as attachments, and the page on a 375 px
touch screen: nothing wider than the screen, the list, the composer and a message's actions within reach."""

from __future__ import annotations

import base64
import re
import secrets

import pytest
import requests
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.dashboard.conftest import PHONE, TIMEOUT_MS, log_in
from tests.dashboard.test_chat_media import png_bytes
from tests.fakes.llm import Text

pytestmark = pytest.mark.e2e

DRAFTS = "agentsite.draft."
MAX_DRAFTS = 50  # drafts.js
LONG_LINE = "total = " + " + ".join(f"value_{index}" for index in range(60))
LONG_WORD = "supercalifragilistic" * 12


@pytest.fixture
def call(dashboard_server, admin_headers):
    """The API as the admin: call(method, path, json=...) -> the decoded answer (asserting a 2xx)."""

    def request(method: str, path: str, **kwargs):
        answer = requests.request(method, f"{dashboard_server.base_url}{path}", headers=admin_headers, timeout=10,
                                  **kwargs)
        assert answer.status_code < 300, f"{method} {path}: {answer.status_code} {answer.text}"
        return answer.json() if answer.content else None

    return request


def chats(call, **params) -> list[dict]:
    return call("GET", "/api/sessions", params={"limit": 200, **params})["results"]


def new_chats(call, *names: str) -> list[dict]:
    """Chats made through the API in this order (the last one the most recently updated)."""
    return [call("POST", "/api/sessions", json={"name": name}) for name in names]


def unique(word: str) -> str:
    return f"{word} {secrets.token_hex(3)}"


def chat_list(page):
    return page.get_by_role("navigation", name="Chats")


def composer_box(page):
    return page.get_by_label("Message")


def draft_keys(page) -> dict[str, str]:
    return page.evaluate("""(prefix) => Object.fromEntries(Object.keys(localStorage)
        .filter((key) => key.startsWith(prefix)).map((key) => [key, JSON.parse(localStorage.getItem(key)).text]))""",
                         DRAFTS)


def test_a_pinned_chat_is_listed_first_and_stays_first_after_a_reload(call, logged_in_page, shot):
    page = logged_in_page
    older, newer = new_chats(call, unique("Older"), unique("Newer"))
    page.goto(f"/#/chat/{newer['id']}")
    first = chat_list(page).locator(".session-link").first
    expect(first).to_contain_text(newer["name"])
    expect(chat_list(page).get_by_role("list", name="Pinned")).to_have_count(0)

    chat_list(page).get_by_role("button", name=f"Pin {older['name']}").focus()  # from the keyboard
    page.keyboard.press("Enter")
    pinned = chat_list(page).get_by_role("list", name="Pinned")
    expect(pinned.get_by_role("link")).to_have_count(1)
    expect(pinned.get_by_role("link")).to_contain_text(older["name"])
    expect(first).to_contain_text(older["name"])
    pin = chat_list(page).get_by_role("button", name=f"Pin {older['name']}")
    expect(pin).to_be_focused()
    expect(pin).to_have_attribute("aria-pressed", "true")
    assert next(chat for chat in chats(call) if chat["id"] == older["id"])["pinned"] is True

    page.reload()
    expect(chat_list(page).get_by_role("list", name="Pinned").get_by_role("link")).to_contain_text(older["name"])
    expect(chat_list(page).locator(".session-link").first).to_contain_text(older["name"])
    expect(chat_list(page).get_by_role("list", name="Chats").get_by_role("link", name=re.compile(
        re.escape(newer["name"])))).to_be_visible()
    shot(page, "chat-list-pinned-1280")

    chat_list(page).get_by_role("button", name=f"Pin {older['name']}").click()
    expect(chat_list(page).get_by_role("list", name="Pinned")).to_have_count(0)
    expect(chat_list(page).get_by_role("list", name="Chats").get_by_role("link", name=re.compile(
        re.escape(older["name"])))).to_be_visible()
    assert next(chat for chat in chats(call) if chat["id"] == older["id"])["pinned"] is False
    assert page.problems == []


def test_an_archived_chat_leaves_the_list_and_the_archived_view_restores_it(call, logged_in_page):
    page = logged_in_page
    shown, other = new_chats(call, unique("Shown"), unique("Other"))
    page.goto(f"/#/chat/{shown['id']}")
    expect(page.get_by_role("heading", name=shown["name"])).to_be_visible()
    expect(page.locator("main .loading")).to_have_count(0)

    # Archiving the chat that is open keeps it open, and says it is archived.
    chat_list(page).get_by_role("button", name=f"Archive {shown['name']}").focus()
    page.keyboard.press("Enter")
    expect(chat_list(page).get_by_role("link", name=re.compile(re.escape(shown["name"])))).to_have_count(0)
    expect(page).to_have_url(re.compile(f"#/chat/{shown['id']}$"))
    expect(page.get_by_role("heading", name=shown["name"])).to_be_visible()
    expect(chat_list(page)).to_contain_text("This chat is archived.")
    chat_list(page).get_by_role("button", name=f"Archive {other['name']}").click()
    expect(chat_list(page).get_by_role("link", name=re.compile(re.escape(other["name"])))).to_have_count(0)
    listed = {chat["id"] for chat in chats(call)}
    assert shown["id"] not in listed and other["id"] not in listed
    assert {shown["id"], other["id"]} <= {chat["id"] for chat in chats(call, archived="true")}

    page.reload()  # an archived chat opened by its address still shows its name
    expect(page.get_by_role("heading", name=shown["name"])).to_be_visible()
    expect(chat_list(page)).to_contain_text("This chat is archived.")

    view = chat_list(page).get_by_role("button", name="Archived")
    view.click()
    expect(view).to_have_attribute("aria-pressed", "true")
    archived = chat_list(page).get_by_role("list", name="Archived")
    expect(archived.get_by_role("link", name=re.compile(re.escape(other["name"])))).to_be_visible()
    expect(archived.get_by_role("link", name=re.compile(re.escape(shown["name"])))).to_be_visible()
    expect(archived.get_by_role("button", name=re.compile("^Pin "))).to_have_count(0)
    archived.get_by_role("button", name=f"Unarchive {other['name']}").click()
    expect(archived.get_by_role("link", name=re.compile(re.escape(other["name"])))).to_have_count(0)
    assert other["id"] in {chat["id"] for chat in chats(call)}

    view.click()  # back to the chats: the restored one is there, the open one is not
    expect(view).to_have_attribute("aria-pressed", "false")
    expect(chat_list(page).get_by_role("link", name=re.compile(re.escape(other["name"])))).to_be_visible()
    expect(chat_list(page).get_by_role("link", name=re.compile(re.escape(shown["name"])))).to_have_count(0)
    chat_list(page).get_by_role("button", name="Unarchive it").click()  # the open chat's note
    expect(chat_list(page).get_by_role("link", name=re.compile(re.escape(shown["name"])))).to_be_visible()
    expect(chat_list(page)).not_to_contain_text("This chat is archived.")
    assert shown["id"] in {chat["id"] for chat in chats(call)}
    assert page.problems == []


def test_a_draft_outlives_a_reload_stays_with_its_chat_and_goes_once_sent(call, chat_upstream, logged_in_page):
    page = logged_in_page
    chat_upstream.script(Text("Noted."), Text("Started."))
    first, second = new_chats(call, unique("Drafted"), unique("Elsewhere"))
    page.goto(f"/#/chat/{first['id']}")
    expect(page.locator("main .loading")).to_have_count(0)
    composer_box(page).fill("half a thought")
    page.reload()
    expect(composer_box(page)).to_have_value("half a thought")
    page.goto(f"/#/chat/{second['id']}")  # another chat has its own (empty) draft
    expect(page.get_by_role("heading", name=second["name"])).to_be_visible()
    expect(composer_box(page)).to_have_value("")
    page.goto(f"/#/chat/{first['id']}")
    expect(composer_box(page)).to_have_value("half a thought")

    composer_box(page).press("Enter")
    expect(page.get_by_role("log").locator("article.message-assistant")).to_have_attribute("data-status", "complete")
    expect(composer_box(page)).to_have_value("")
    assert draft_keys(page) == {}
    page.reload()
    expect(page.get_by_role("log").locator("article.message-user")).to_contain_text("half a thought")
    expect(composer_box(page)).to_have_value("")

    # A chat not started yet keeps its draft too, and sending it (which starts the chat) forgets it.
    page.goto("/#/chat")
    composer_box(page).fill("an opening line")
    page.reload()
    expect(composer_box(page)).to_have_value("an opening line")
    composer_box(page).press("Enter")
    expect(page).to_have_url(re.compile(r"#/chat/[0-9a-f-]{36}$"))
    expect(page.get_by_role("log").locator("article.message-assistant")).to_have_attribute("data-status", "complete")
    assert draft_keys(page) == {}
    page.goto("/#/chat")
    expect(composer_box(page)).to_have_value("")
    assert page.problems == []


def test_drafts_are_bounded_the_oldest_go_first(call, logged_in_page):
    page = logged_in_page
    chat = new_chats(call, unique("Bounded"))[0]
    page.goto(f"/#/chat/{chat['id']}")
    expect(page.locator("main .loading")).to_have_count(0)
    # Other chats' drafts, one a minute apart: MAX_DRAFTS - 1 of them, and one older than the 30 days kept.
    page.evaluate("""([prefix, count]) => {
        const now = Date.now();
        for (let index = 0; index < count; index++) {
            const draft = {text: `draft ${index}`, at: now - (index + 1) * 60000};
            localStorage.setItem(`${prefix}seeded.${index}`, JSON.stringify(draft));
        }
        localStorage.setItem(`${prefix}seeded.stale`, JSON.stringify({text: 'stale', at: now - 31 * 24 * 3600 * 1000}));
    }""", [DRAFTS, MAX_DRAFTS - 1])
    composer_box(page).fill("the fiftieth")
    kept = draft_keys(page)
    assert len(kept) == MAX_DRAFTS, f"{MAX_DRAFTS} drafts fit: {len(kept)}"
    assert f"{DRAFTS}seeded.stale" not in kept, "a draft older than 30 days goes"
    assert "the fiftieth" in kept.values()

    other = new_chats(call, unique("One more"))[0]
    page.goto(f"/#/chat/{other['id']}")
    expect(page.get_by_role("heading", name=other["name"])).to_be_visible()
    composer_box(page).fill("one past the limit")
    kept = draft_keys(page)
    assert len(kept) == MAX_DRAFTS
    assert f"{DRAFTS}seeded.{MAX_DRAFTS - 2}" not in kept, "the oldest draft made room"
    assert f"{DRAFTS}seeded.{MAX_DRAFTS - 3}" in kept
    assert {"the fiftieth", "one past the limit"} <= set(kept.values())
    page.evaluate("(prefix) => Object.keys(localStorage).filter((key) => key.startsWith(prefix))"
                  ".forEach((key) => localStorage.removeItem(key))", DRAFTS)
    assert page.problems == []


# A DataTransfer holding one file, made in the page (as a drag from the desktop or a paste brings one).
FILES = """([name, type, data]) => {
    const transfer = new DataTransfer();
    const bytes = Uint8Array.from(atob(data), (char) => char.charCodeAt(0));
    transfer.items.add(new File([bytes], name, {type}));
    return transfer;
}"""


def test_a_file_dropped_on_the_conversation_and_a_pasted_image_are_sent_with_the_message(
        call, chat_upstream, logged_in_page):
    page = logged_in_page
    chat_upstream.script(Text("A green square and your notes."))
    chat = new_chats(call, unique("Attachments"))[0]
    page.goto(f"/#/chat/{chat['id']}")
    expect(page.locator("main .loading")).to_have_count(0)

    notes = page.evaluate_handle(FILES, ["notes.txt", "text/plain",
                                         base64.b64encode(b"The code word is KUMQUAT.").decode()])
    log = page.get_by_role("log")
    hint = page.get_by_text("Drop files to attach them")
    expect(hint).to_be_hidden()
    log.dispatch_event("dragover", {"dataTransfer": notes})
    expect(hint).to_be_visible()  # the drop target shows while files are over the conversation
    log.dispatch_event("drop", {"dataTransfer": notes})  # on the messages, not on the composer
    expect(hint).to_be_hidden()
    attachments = page.get_by_role("list", name="Files to send")
    expect(attachments.locator("li")).to_have_count(1)
    expect(attachments.get_by_text("notes.txt")).to_be_visible()

    image = page.evaluate_handle(FILES, ["image.png", "image/png", base64.b64encode(png_bytes()).decode()])
    composer_box(page).evaluate("""(box, transfer) => box.dispatchEvent(new ClipboardEvent('paste', {
        clipboardData: transfer, bubbles: true, cancelable: true}))""", image)
    expect(attachments.locator("li")).to_have_count(2)
    expect(attachments.get_by_role("img", name="image.png")).to_have_attribute("src", re.compile(r"^blob:"))
    expect(attachments).not_to_contain_text("uploading")

    composer_box(page).fill("What are these?")
    page.get_by_role("button", name="Send").click()
    expect(log.locator("article.message-assistant")).to_have_attribute("data-status", "complete")
    expect(attachments.locator("li")).to_have_count(0)
    mine = log.locator("article.message-user").last
    expect(mine.get_by_role("img", name="image.png")).to_be_visible()
    expect(mine).to_contain_text("notes.txt")

    stored = call("GET", f"/api/sessions/{chat['id']}/messages")["results"]
    question = next(message for message in stored if message["role"] == "user")
    assert question["content"] == "What are these?"
    uploads = {upload["id"]: upload for upload in call("GET", "/api/uploads", params={"limit": 200})["results"]}
    assert sorted(uploads[upload_id]["filename"] for upload_id in question["attachments"]) == ["image.png", "notes.txt"]
    sent = chat_upstream.bodies()[-1]["messages"][-1]["content"]
    assert any(part["type"] == "image_url" for part in sent)
    assert any("KUMQUAT" in part.get("text", "") for part in sent)
    assert page.problems == []


@pytest.fixture
def phone_page(browser, dashboard_server):
    """A 375 px touch screen (no hover), logged in as the admin, with `problems` as `page` has them."""
    context = browser.new_context(viewport=PHONE, base_url=dashboard_server.base_url, has_touch=True,
                                  is_mobile=True)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.problems = []
    page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
    page.on("console", lambda message: message.type == "error" and page.problems.append(f"console: {message.text}"))
    log_in(page, dashboard_server, "admin", dashboard_server.admin_password)
    yield page
    context.close()


def test_the_chat_fits_a_375_px_touch_screen_with_a_long_code_line_and_a_long_word(
        call, chat_upstream, phone_page, shot):
    page = phone_page
    assert page.evaluate("matchMedia('(hover: none)').matches"), "the screen is a touch screen without hover"
    chat_upstream.script(Text(f"Here:\n\n```python\n{LONG_LINE}\n```\n\nand {LONG_WORD} too."))
    chat = new_chats(call, unique(f"Phone {LONG_WORD[:150]}"))[0]
    call("PATCH", f"/api/sessions/{chat['id']}", json={"pinned": True})
    page.goto(f"/#/chat/{chat['id']}")
    expect(page.locator("main .loading")).to_have_count(0)
    composer_box(page).fill(f"Write {LONG_WORD}")
    send = page.get_by_role("button", name="Send")
    expect(send).to_be_visible()
    send.tap()
    reply = page.get_by_role("log").locator("article.message-assistant").last
    expect(reply).to_have_attribute("data-status", "complete")

    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page is {width} px wide on a {PHONE['width']} px screen"
    code = reply.locator("pre").first
    # Polled: the block is drawn again once the highlighter has loaded (it loads with the first code block).
    scrolls = """() => { const block = [...document.querySelectorAll('[role=log] article.message-assistant')].pop()
        ?.querySelector('pre'); return Boolean(block) && block.scrollWidth > block.clientWidth; }"""
    try:
        page.wait_for_function(scrolls)
    except PlaywrightTimeout:
        pytest.fail("the long line does not scroll in its block: "
                    + code.evaluate("(block) => `${block.scrollWidth} / ${block.clientWidth} px`"))
    assert code.evaluate("(block) => block.getBoundingClientRect().right") <= PHONE["width"]
    # What a thumb needs is on the screen, not under something else: the composer's buttons, a reply's actions.
    composer_box(page).fill("Another question")
    for button in (send, page.get_by_role("button", name="Attach files"),
                   reply.get_by_role("button", name="Read aloud")):
        button.scroll_into_view_if_needed()
        expect(button).to_be_in_viewport(ratio=1)
        button.click(trial=True)  # fails when another element would take the tap
    shot(page, "chat-phone-long-375")

    # The list folds behind "Chats", and its actions fit the screen too.
    expect(page.get_by_role("button", name="New chat", exact=True)).to_be_hidden()
    page.get_by_role("button", name="Chats").tap()
    expect(page.get_by_role("button", name="New chat", exact=True)).to_be_in_viewport()
    pin = chat_list(page).get_by_role("button", name=f"Pin {chat['name']}")
    expect(pin).to_have_attribute("aria-pressed", "true")
    pin.click(trial=True)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the open list makes the page {width} px wide"
    shot(page, "chat-phone-list-375")
    assert page.problems == []
