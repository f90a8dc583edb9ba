"""The dashboard's shell and chat in a real Chromium against a real server: log-in, the CSP, streaming,
stopping, sanitising, and the page at phone and desktop widths."""

from __future__ import annotations

import re

import pytest
import requests
from playwright.sync_api import TimeoutError as PlaywrightTimeout
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE, log_in
from tests.e2e import poll
from tests.fakes.llm import Call, Hang, Text, ToolCalls

pytestmark = pytest.mark.e2e

# A reply (and a user message) trying every way to run script through Markdown: raw HTML with an event
# handler, a script element, javascript: links in Markdown and in HTML, an SVG handler, a data: HTML link.
# Each sets window.__pwned (or opens a dialog) if it ever runs.
HOSTILE = (
    "Here is **bold** text and a [safe link](https://example.com/).\n\n"
    '<img src=x onerror="window.__pwned = \'img\'; alert(1)">\n\n'
    "<script>window.__pwned = 'script'; alert(2)</script>\n\n"
    "[click me](javascript:window.__pwned='md-link';alert(3))\n\n"
    '<a href="javascript:window.__pwned=\'html-link\'">raw link</a>\n\n'
    '<svg onload="window.__pwned=\'svg\'"><circle r="4"/></svg>\n\n'
    '<a href="data:text/html,<script>alert(4)</script>">data link</a>\n\n'
    '<div onmouseover="window.__pwned=\'hover\'">hover me</div>'
)


def conversation(page):
    return page.get_by_role("log")


def last_reply(page):
    return conversation(page).locator("article.message-assistant").last


def test_the_page_forbids_inline_script_and_other_origins(dashboard_server, page, shot):
    answer = requests.get(f"{dashboard_server.base_url}/", timeout=10)
    assert answer.status_code == 200
    assert answer.headers["Content-Type"].startswith("text/html")
    policy = {part.split()[0]: part.split()[1:] for part in answer.headers["Content-Security-Policy"].split("; ")}
    assert policy["script-src"] == ["'self'"]
    assert policy["default-src"] == ["'self'"]
    assert policy["connect-src"] == ["'self'"]
    assert policy["frame-ancestors"] == ["'none'"]
    assert policy["object-src"] == ["'none'"]
    assert not any("unsafe-inline" in value or "unsafe-eval" in value for values in policy.values() for value in values)
    assert answer.headers["X-Frame-Options"] == "DENY"

    page.set_viewport_size(PHONE)
    page.goto("/")
    expect(page.get_by_role("button", name="Log in")).to_be_visible()  # our own modules run
    expect(page.get_by_role("button", name="Create an account")).to_be_visible()
    shot(page, "login-375")
    page.evaluate("""() => {
        const script = document.createElement('script');
        script.textContent = 'window.__inline = 1';
        document.body.append(script);
        const img = document.createElement('img');
        img.setAttribute('onerror', 'window.__handler = 1');
        img.src = 'x';
        document.body.append(img);
    }""")
    page.wait_for_function("() => document.querySelector('img[onerror]').complete")
    assert page.evaluate("() => [window.__inline, window.__handler]") == [None, None]
    assert any("Content Security Policy" in problem for problem in page.problems), page.problems


def test_admin_logs_in_through_the_form_and_out_again(dashboard_server, page):
    page.goto("/")
    page.get_by_label("Username").fill("admin")
    page.get_by_label("Password").fill("not-the-password")
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("alert").filter(has_text="wrong")).to_be_visible()

    page.get_by_label("Password").fill(dashboard_server.admin_password)
    page.get_by_label("Password").press("Enter")
    for name in ("Chat", "Knowledge", "Scheduler", "Workflows", "MCP", "Settings"):
        expect(page.get_by_role("link", name=name, exact=True)).to_be_visible()
    expect(page.get_by_text("admin", exact=True).first).to_be_visible()
    assert re.search(r"#/chat$", page.url)
    # The tokens live in sessionStorage: never in a cookie or the address.
    assert page.context.cookies() == []
    stored = page.evaluate("() => JSON.parse(sessionStorage.getItem('agentsite.auth'))")
    assert stored["token"] not in page.url and stored["user"]["is_admin"] is True

    page.get_by_role("button", name="Log out").click()
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    assert page.evaluate("() => sessionStorage.getItem('agentsite.auth')") is None
    # The refresh token was blacklisted on the server, not only forgotten here.
    refused = requests.post(f"{dashboard_server.base_url}/api/auth/refresh", json={"refresh": stored["refresh"]},
                            timeout=10)
    assert refused.status_code == 401


def test_an_expired_access_token_is_refreshed_and_a_dead_refresh_token_logs_out(dashboard_server, logged_in_page):
    page = logged_in_page
    page.evaluate("""() => {
        const auth = JSON.parse(sessionStorage.getItem('agentsite.auth'));
        auth.token = 'expired.' + auth.token.split('.')[1] + '.x';
        sessionStorage.setItem('agentsite.auth', JSON.stringify(auth));
    }""")
    page.reload()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    token = page.evaluate("() => JSON.parse(sessionStorage.getItem('agentsite.auth')).token")
    assert not token.startswith("expired.")
    me = requests.get(f"{dashboard_server.base_url}/api/auth/me", headers={"Authorization": f"Bearer {token}"},
                      timeout=10)
    assert me.status_code == 200 and me.json()["username"] == "admin"

    page.evaluate("""() => {
        const auth = JSON.parse(sessionStorage.getItem('agentsite.auth'));
        auth.token = 'expired'; auth.refresh = 'revoked';
        sessionStorage.setItem('agentsite.auth', JSON.stringify(auth));
    }""")
    page.reload()
    expect(page.get_by_role("button", name="Log in")).to_be_visible()
    expect(page.get_by_text("Your session has expired")).to_be_visible()


def test_a_new_user_registers_through_the_form_when_registration_is_open(dashboard_server, page):
    page.goto("/")
    page.get_by_role("button", name="Create an account").click()
    page.get_by_label("Username").fill("new-person")
    page.get_by_label("Password").fill("short")
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("alert").filter(has_text="password")).to_be_visible()  # a 400 shown, not a crash
    page.get_by_label("Password").fill("a-long-enough-password-77")
    page.get_by_role("button", name="Create account").click()
    expect(page.get_by_role("button", name="Log out")).to_be_visible()
    expect(page.get_by_text("new-person")).to_be_visible()


def test_a_session_is_created_and_the_reply_streams_in(chat_upstream, logged_in_page, shot):
    page = logged_in_page
    pieces = ["The ", "streamed ", "answer ", "arrives ", "piece ", "by ", "piece."]
    chat_upstream.script(Text("".join(pieces), pieces=pieces, delay=0.15), Text("Two lines"))
    page.get_by_role("button", name="New chat", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/chat/[0-9a-f-]{36}$"))
    session_id = page.url.rsplit("/", 1)[1]

    message = page.get_by_label("Message")
    message.fill("First line")
    message.press("Shift+Enter")
    message.press_sequentially("second line")
    assert message.input_value() == "First line\nsecond line"  # Shift+Enter breaks the line, sends nothing
    message.press("Enter")

    reply = last_reply(page)
    # Seen while it streams (read in the first frame that shows it): part of the answer, the reply not
    # finished yet, the Stop button offered.
    seen = page.wait_for_function("""() => {
        const reply = [...document.querySelectorAll('[role=log] article.message-assistant')].pop();
        const body = reply?.querySelector('.message-body')?.textContent || '';
        if (!body.includes('streamed')) return null;
        return {streaming: reply.classList.contains('streaming'), body,
                stop: !document.querySelector('.chat-composer button.danger').hidden};
    }""").json_value()
    assert seen["streaming"] and seen["stop"] and "piece." not in seen["body"], seen
    expect(reply).to_have_attribute("data-status", "complete")
    expect(reply.locator(".message-body")).to_have_text("The streamed answer arrives piece by piece.")
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_hidden()
    expect(conversation(page).locator("article.message-user")).to_contain_text("second line")
    # The new chat is named after its first exchange, by the model (the second request).
    expect(page.get_by_role("link", name=re.compile("^Two lines"))).to_contain_text("2 messages")

    sent = chat_upstream.bodies()[0]["messages"][-1]
    assert sent == {"role": "user", "content": "First line\nsecond line"}
    shot(page, "chat-1280")
    page.reload()
    expect(last_reply(page).locator(".message-body")).to_have_text("The streamed answer arrives piece by piece.")
    assert page.url.endswith(session_id)


def test_a_message_sent_while_the_history_loads_waits_for_it_and_stays_in_the_log(chat_upstream, logged_in_page):
    # The history arriving after a message was sent replaced the log: the message and its streaming reply
    # vanished behind "No messages yet" (seen on PostgreSQL, where the load is slower). Here the load is held.
    page = logged_in_page
    chat_upstream.script(Text("An answer that stays."))
    held = []
    page.route(re.compile(r"/api/sessions/[0-9a-f-]{36}/messages"), lambda route: held.append(route))
    page.get_by_role("button", name="New chat", exact=True).click()
    expect(page).to_have_url(re.compile(r"#/chat/[0-9a-f-]{36}$"))
    for _ in range(200):  # Playwright calls the route handler only while the page is waited on
        if held:
            break
        page.wait_for_timeout(50)
    assert held, "the history's request was never made"
    page.get_by_label("Message").fill("Sent before the history came")
    page.get_by_label("Message").press("Enter")
    page.wait_for_timeout(300)
    assert chat_upstream.bodies() == []  # nothing is sent before the history is shown
    held[0].continue_()
    reply = last_reply(page)
    expect(reply).to_have_attribute("data-status", "complete")
    expect(reply.locator(".message-body")).to_have_text("An answer that stays.")
    expect(conversation(page).locator("article.message-user")).to_have_text(re.compile("Sent before the history came"))
    expect(conversation(page).locator(".chat-empty")).to_have_count(0)


def test_leaving_the_page_hangs_up_and_the_reply_is_kept_as_interrupted(chat_upstream, logged_in_page, dashboard_server,
                                                                       admin_headers):
    # Stop keeps a reply `stopped` (test_chat_branches); going to another page hangs up the stream instead.
    page = logged_in_page
    chat_upstream.script(Hang("A partial answer that never ends"))
    page.goto("/#/chat")
    page.get_by_label("Message").fill("Tell me a very long story")
    page.get_by_role("button", name="Send").click()
    # Sending from #/chat starts a new chat and shows it in the address.
    expect(page).to_have_url(re.compile(r"#/chat/[0-9a-f-]{36}$"))
    chat_url = page.url
    reply = last_reply(page)
    expect(reply).to_contain_text("A partial answer")
    page.get_by_role("link", name="Knowledge", exact=True).click()
    chat_upstream.wait_for_hangups_sync(1)  # the server hung up on the model too
    messages = f"{dashboard_server.base_url}/api/sessions/{chat_url.rsplit('/', 1)[1]}/messages"
    poll(lambda: requests.get(messages, headers=admin_headers, timeout=10).json()["results"][-1]["status"]
         == "interrupted", "the reply left behind is stored interrupted")

    page.goto(chat_url)
    expect(last_reply(page)).to_have_attribute("data-status", "interrupted")
    expect(last_reply(page).get_by_text("Interrupted", exact=True)).to_be_visible()
    page.reload()
    stored = last_reply(page)
    expect(stored).to_have_attribute("data-status", "interrupted")
    expect(stored).to_contain_text("A partial answer that never ends")
    # A chat is named after a complete exchange: one that was stopped leaves it "New chat".
    expect(page.get_by_role("heading", name="New chat")).to_be_visible()


def test_markdown_from_the_model_and_the_user_runs_no_script(chat_upstream, logged_in_page):
    page = logged_in_page
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    chat_upstream.script(Text(HOSTILE))
    page.goto("/#/chat")
    page.get_by_label("Message").fill(HOSTILE)
    page.get_by_label("Message").press("Enter")
    reply = last_reply(page)
    expect(reply).to_have_attribute("data-status", "complete")
    log = conversation(page)
    expect(log.locator("article.message-user strong")).to_have_text("bold")  # Markdown still rendered
    expect(reply.get_by_role("link", name="safe link")).to_have_attribute("href", "https://example.com/")

    for text in ("click me", "raw link", "data link"):
        for link in log.get_by_text(text).all():
            link.click()
    log.get_by_text("hover me").first.hover()

    found = page.evaluate("""() => {
        const log = document.querySelector('[role=log]');
        const handlers = [...log.querySelectorAll('*')].flatMap(
            (element) => [...element.attributes].filter((a) => a.name.startsWith('on')).map((a) => a.name));
        const names = ['href', 'src', 'action', 'formaction', 'xlink:href'];
        const urls = [...log.querySelectorAll('*')].flatMap(
            (element) => [...element.attributes].filter((a) => names.includes(a.name)).map((a) => a.value))
            .filter((value) => /^\\s*(javascript|data|vbscript):/i.test(value));
        return {handlers, urls, scripts: log.querySelectorAll('script, svg, iframe, object, embed').length,
                pwned: window.__pwned ?? null};
    }""")
    assert found == {"handlers": [], "urls": [], "scripts": 0, "pwned": None}
    assert dialogs == []
    assert not [problem for problem in page.problems if "page error" in problem], page.problems


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375", "1280"])
def test_chat_fits_phone_and_desktop_screens(chat_upstream, dashboard_server, page, shot, viewport):
    page.set_viewport_size(viewport)
    log_in(page, dashboard_server, "admin", dashboard_server.admin_password)
    chat_upstream.script(Text("A short answer with a list:\n\n- one\n- two\n\n```\ncode block\n```"))
    page.get_by_label("Message").fill("Show me a list")
    page.get_by_role("button", name="Send").click()
    expect(last_reply(page)).to_have_attribute("data-status", "complete")
    overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
    assert overflow <= 0, f"the page is {overflow} px wider than a {viewport['width']} px screen"
    for name in ("Chat", "Knowledge", "Scheduler", "Workflows", "MCP", "Settings"):
        expect(page.get_by_role("link", name=name, exact=True)).to_be_in_viewport()  # no link scrolled out of sight
    if viewport is PHONE:
        # The chat list folds away on a phone, behind a button.
        expect(page.get_by_role("button", name="New chat", exact=True)).to_be_hidden()
        page.get_by_role("button", name="Chats").click()
        expect(page.get_by_role("button", name="New chat", exact=True)).to_be_visible()
    shot(page, f"chat-{viewport['width']}")


def test_a_session_is_renamed_and_deleted_by_keyboard(dashboard_server, admin_headers, logged_in_page):
    page = logged_in_page
    headers = admin_headers
    session = requests.post(f"{dashboard_server.base_url}/api/sessions", json={"name": "To rename"}, headers=headers,
                            timeout=10).json()
    page.goto(f"/#/chat/{session['id']}")
    # The page settled first: a button focused while the page still mounts can be replaced under the focus, and
    # Enter then presses nothing (CI on a loaded machine).
    expect(page.get_by_role("heading", name="To rename")).to_be_visible()
    expect(page.locator("main .loading")).to_have_count(0)
    page.get_by_role("button", name="Rename To rename").focus()
    page.keyboard.press("Enter")
    page.get_by_label("Chat name").fill("Renamed chat")
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Renamed chat")).to_be_visible()

    page.get_by_role("button", name="Delete Renamed chat").focus()
    page.keyboard.press("Enter")
    expect(page.get_by_role("dialog")).to_be_visible()
    page.keyboard.press("Tab")  # from Cancel to Delete
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(r"#/chat$"))
    poll(lambda: requests.get(f"{dashboard_server.base_url}/api/sessions/{session['id']}", headers=headers,
                              timeout=10).status_code == 404, "the session was deleted on the server")
    expect(page.get_by_role("link", name=re.compile("Renamed chat"))).to_have_count(0)


def test_the_form_offers_no_registration_while_it_is_closed(dashboard_server, admin_headers, page):
    config = f"{dashboard_server.base_url}/api/config"
    requests.patch(config, headers=admin_headers, json={"allow_registration": False}, timeout=10).raise_for_status()
    try:
        page.goto("/")
        expect(page.get_by_role("button", name="Log in")).to_be_visible()
        # Network idle: the form's registration probe has answered, so a button it would add is there by now.
        page.wait_for_load_state("networkidle")
        expect(page.get_by_role("button", name="Create an account")).to_have_count(0)
    finally:
        requests.patch(config, headers=admin_headers, json={"allow_registration": True}, timeout=10).raise_for_status()


@pytest.mark.parametrize("viewport", [PHONE, DESKTOP], ids=["375", "1280"])
def test_a_reply_with_a_tool_call_scrolls_fully_into_view(chat_upstream, dashboard_server, page, viewport):
    page.set_viewport_size(viewport)
    log_in(page, dashboard_server, "admin", dashboard_server.admin_password)
    answer = "\n\n".join(f"Paragraph {number} of what the page said." for number in range(1, 31))
    # The tool's round, then the whole answer in one delta: the log grows by far more than a screen at once.
    chat_upstream.script(ToolCalls([Call("web_fetch", {"url": "http://127.0.0.1:9/private"}, id="call_1")]),
                         Text(answer, pieces=[answer]))
    page.get_by_label("Message").fill("Fetch http://127.0.0.1:9/private and tell me all about it")
    page.get_by_role("button", name="Send").click()
    reply = last_reply(page)
    expect(reply).to_have_attribute("data-status", "complete")
    expect(reply.locator("details.tool-call")).to_have_count(1)
    # Polled: the last scroll may land a frame after the status changes.
    gap = """() => {
        const log = document.querySelector('[role=log]');
        const reply = [...log.querySelectorAll('article.message-assistant')].pop();
        return reply.getBoundingClientRect().bottom - log.getBoundingClientRect().bottom;
    }"""
    try:
        page.wait_for_function(f"() => ({gap})() <= 1")
    except PlaywrightTimeout:
        pytest.fail(f"the reply's end stayed {page.evaluate(gap):.0f} px below the conversation's visible part")
    expect(reply.get_by_role("button", name="Read aloud")).to_be_in_viewport()
    assert page.problems == []
