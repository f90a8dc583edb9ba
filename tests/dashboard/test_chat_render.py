"""How one chat message renders, in a real Chromium against a real server: code highlighted with its language and
a Copy button, math typeset (and a price left alone), hostile math and code inert, the knowledge sources as chips
that open the passage, tool steps as rows that unfold, a reply's details on hover or focus, and `stopped` told
apart. One server and one logged-in page serve the whole module (the clipboard granted to its context)."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import requests
from playwright.sync_api import expect

from tests.dashboard.conftest import DESKTOP, PHONE, TIMEOUT_MS, log_in
from tests.fakes.llm import Call, Hang, Text, ToolCalls

pytestmark = pytest.mark.e2e

CODE = 'def greet(name):\n    return f"Hello, {name}!"  # a comment\n\n\nprint(greet("$HOME"))'
RICH = (
    "Here is the code:\n\n"
    f"```python\n{CODE}\n```\n\n"
    "Euler: $e^{i\\pi}+1=0$, and the sum\n\n"
    "$$\\sum_{k=1}^{n} k_i = \\frac{n(n+1)}{2}$$\n\n"
    "Also \\(a_b * c_d\\) inline. It costs $5 and $10 (so $5-$10); set $HOME and $PATH, as `$a` and `$b` are.\n"
)
# Each tries to run script or reach out through math or a code block's language; window.__pwned is set if one does.
HOSTILE_MATH = (
    "Link: $\\href{javascript:window.__pwned='href'}{click}$ and $\\url{javascript:window.__pwned='url'}$\n\n"
    "Class: $\\htmlClass{nav}{x}$, style: $\\htmlStyle{position:fixed;inset:0}{y}$, "
    "data: $\\htmlData{onclick=window.__pwned}{z}$\n\n"
    "Image: $<img src=x onerror=\"window.__pwned='img'\">$ and $$\\includegraphics{x.png}$$\n\n"
    "Huge: $\\rule{900em}{900em}$ and loop: $\\def\\a{\\a\\a}\\a$\n\n"
    "```<img src=x onerror=\"window.__pwned='lang'\">\nprint(1)\n```\n"
)
INERT = """() => {
    const log = document.querySelector('[role=log]');
    const all = [...log.querySelectorAll('*')];
    const handlers = all.flatMap((element) => [...element.attributes].filter((a) => a.name.startsWith('on'))
        .map((a) => a.name));
    const urls = all.flatMap((element) => ['href', 'src', 'xlink:href'].map((name) => element.getAttribute(name)))
        .filter((value) => value && /^\\s*(javascript|data|vbscript):/i.test(value));
    return {handlers, urls, images: log.querySelectorAll('img, script, iframe, object, embed, foreignObject').length,
            links: log.querySelectorAll('.katex a').length, pwned: window.__pwned ?? null};
}"""


@pytest.fixture(scope="module")
def chat_page(browser, dashboard_server) -> Iterator:
    """One logged-in page for the module, allowed to use the clipboard."""
    context = browser.new_context(viewport=DESKTOP, base_url=dashboard_server.base_url)
    context.set_default_timeout(TIMEOUT_MS)
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    page = context.new_page()
    page.problems = []
    page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
    page.on("console", lambda message: message.type == "error" and page.problems.append(f"console: {message.text}"))
    page.dialogs = []
    page.on("dialog", lambda dialog: (page.dialogs.append(dialog.message), dialog.dismiss()))
    log_in(page, dashboard_server, "admin", dashboard_server.admin_password)
    yield page
    context.close()


def ask(page, text: str):
    """A new chat with this message; the reply once complete."""
    page.set_viewport_size(DESKTOP)
    page.goto("/#/chat")
    page.get_by_label("Message").fill(text)
    page.get_by_label("Message").press("Enter")
    expect(page).to_have_url(re.compile(r"#/chat/[0-9a-f-]{36}$"))
    reply = page.get_by_role("log").locator("article.message-assistant").last
    expect(reply).to_have_attribute("data-status", re.compile("complete|stopped"))
    return reply


def clipboard(page) -> str:
    return page.evaluate("() => navigator.clipboard.readText()")


def loaded_vendor_files(page) -> list[str]:
    return page.evaluate("""() => performance.getEntriesByType('resource').map((entry) => entry.name)
        .filter((name) => /vendor\\/(highlight|katex)/.test(name))""")


def test_code_is_highlighted_with_its_language_and_copied_exactly_and_math_is_typeset(chat_upstream, chat_page,
                                                                                        shot):
    page = chat_page
    page.goto("/#/chat")
    expect(page.get_by_label("Message")).to_be_visible()
    assert loaded_vendor_files(page) == []  # the first paint pays for neither library
    chat_upstream.script(Text(RICH))
    reply = ask(page, "Show me code and math")

    block = reply.locator(".code-block")
    expect(block.locator(".code-language")).to_have_text("python")
    expect(block.locator("code .hljs-keyword").first).to_have_text("def")
    expect(block.locator("code .hljs-string").first).to_be_visible()
    expect(block.locator("code")).to_have_text(CODE)
    block.get_by_role("button", name="Copy code").click()
    expect(block.get_by_role("button", name="Copy code")).to_have_text("Copied")
    assert clipboard(page) == CODE

    math = reply.locator(".katex")
    expect(math).to_have_count(3)
    expect(math.nth(0).locator("annotation")).to_have_text("e^{i\\pi}+1=0")
    expect(reply.locator(".math-display .katex-display")).to_have_count(1)
    expect(reply.locator(".math-display annotation")).to_have_text("\\sum_{k=1}^{n} k_i = \\frac{n(n+1)}{2}")
    expect(math.nth(2).locator("annotation")).to_have_text("a_b * c_d")  # not emphasis: protected from Markdown
    # Pandoc's rule: no closing `$` after a space or before a digit; nothing in a code span is math.
    expect(reply.locator(".message-body p").last).to_have_text(
        re.compile(r"It costs \$5 and \$10 \(so \$5-\$10\); set \$HOME and \$PATH, as \$a and \$b are\.$"))
    expect(reply.locator(".message-body p code")).to_have_text(["$a", "$b"])
    # KaTeX's layout (set through the CSSOM, the policy refusing style attributes) survived the sanitiser.
    assert page.evaluate("() => document.querySelector('.math-display .vlist').style.height").endswith("em")
    assert {"highlight.esm.js", "katex.min.js", "katex.min.css"} <= {
        name.rsplit("/", 1)[1] for name in loaded_vendor_files(page)}

    reply.get_by_role("button", name="Copy", exact=True).click()
    assert clipboard(page) == RICH
    mine = page.get_by_role("log").locator("article.message-user").last
    mine.get_by_role("button", name="Copy", exact=True).click()
    assert clipboard(page) == "Show me code and math"
    assert page.problems == []

    page.reload()  # the stored reply renders the same
    stored = page.get_by_role("log").locator("article.message-assistant").last
    expect(stored.locator(".katex")).to_have_count(3)
    expect(stored.locator("code .hljs-keyword").first).to_have_text("def")
    for viewport in (PHONE, DESKTOP):
        page.set_viewport_size(viewport)
        overflow = page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")
        assert overflow <= 0, f"the page is {overflow} px wider than a {viewport['width']} px screen"
        box = stored.locator(".code-block").bounding_box()
        assert box["width"] <= viewport["width"], box
        shot(page, f"chat-render-{viewport['width']}")
    assert page.problems == []


def test_hostile_math_and_code_languages_stay_inert(chat_upstream, chat_page):
    page = chat_page
    chat_upstream.script(Text(HOSTILE_MATH))
    reply = ask(page, "Mine: $<img src=x onerror=\"window.__pwned='mine'\">$ and $\\href{javascript:alert(1)}{a}$")
    expect(reply.locator(".katex").first).to_be_visible()
    for formula in reply.locator(".katex-html").all():
        formula.click()
    found = page.evaluate(INERT)
    assert found == {"handlers": [], "urls": [], "images": 0, "links": 0, "pwned": None}
    assert page.dialogs == []
    # \htmlClass, \htmlStyle and \htmlData need trust: shown as errors, no class or style of theirs applied.
    trusted = "() => document.querySelectorAll('[role=log] .katex .nav, [role=log] [data-onclick]').length"
    assert page.evaluate(trusted) == 0
    # \rule is capped by maxSize (25 em), the self-expanding macro by maxExpand: neither fills or hangs the page.
    assert reply.bounding_box()["height"] < 2000
    # The code block's language was HTML: the block shows unlabelled ("text") and unhighlighted.
    expect(reply.locator(".code-language")).to_have_text("text")
    expect(reply.locator(".code-block code")).to_have_text("print(1)")
    assert page.problems == []


def test_the_renderers_sanitiser_keeps_their_layout_and_nothing_that_links_loads_or_runs(chat_page):
    # sanitizeRendered (ui.js) on what a broken or hostile renderer could hand it: as DOM (KaTeX's way, styles
    # through the CSSOM) and as HTML (highlight.js's way), built in an inert document (nothing loads or runs).
    page = chat_page
    before = len(page.problems)
    found = page.evaluate("""async () => {
        const {sanitizeRendered} = await import('/static/agentsite/dashboard/ui.js');
        const doc = document.implementation.createHTMLDocument('');
        const make = (ns, tag, attributes = {}) => {
            const element = ns ? doc.createElementNS(ns, tag) : doc.createElement(tag);
            for (const [name, value] of Object.entries(attributes)) element.setAttribute(name, value);
            return element;
        };
        const svg = 'http://www.w3.org/2000/svg', mathml = 'http://www.w3.org/1998/Math/MathML';
        const root = make(null, 'span', {class: 'katex', onclick: 'window.__pwned = 1', 'data-x': 'y', id: 'nav'});
        Object.assign(root.style, {height: '1.2em', color: 'red', position: 'fixed',
                                   backgroundImage: 'url(https://example.com/x.png)'});
        const inner = make(null, 'span', {class: 'vlist'});
        inner.style.position = 'relative';
        inner.style.top = '-0.5em';
        const shape = make(svg, 'svg', {viewBox: '0 0 10 10'});
        shape.append(make(svg, 'path', {d: 'M0 0h10'}), make(svg, 'use', {href: '#x'}),
                     make(svg, 'foreignObject'), make(svg, 'a', {href: 'javascript:window.__pwned = 2'}));
        const formula = make(mathml, 'math');
        const semantics = make(mathml, 'semantics');
        const annotation = make(mathml, 'annotation', {encoding: 'application/x-tex'});
        annotation.textContent = 'x';
        semantics.append(make(mathml, 'mi'), annotation, make(mathml, 'annotation-xml'));
        formula.append(semantics);
        const link = make(null, 'a', {href: 'javascript:window.__pwned = 3'});
        link.textContent = 'text kept';
        root.append(inner, shape, formula, link, make(null, 'img', {src: 'x'}), make(null, 'button'));
        const dom = sanitizeRendered(root);
        const html = sanitizeRendered('<span class="hljs-keyword" onmouseover="x">def</span><script>x()</script>'
            + '<img src=x onerror="window.__pwned = 4"><a href="javascript:x">y</a><style>*{}</style>');
        const holder = document.createElement('div');
        holder.append(html);
        return {root: dom === root, style: root.getAttribute('style'), inner: inner.getAttribute('style'),
                attributes: [...root.attributes].map((a) => a.name).sort(),
                tags: [...root.querySelectorAll('*')].map((e) => e.localName), text: root.textContent,
                html: holder.innerHTML};
    }""")
    # Chromium reports the handlers and the <style> of the test's own inert markup to the page's policy as refused:
    # those reports only, no page error.
    refused, page.problems[:] = page.problems[before:], page.problems[:before]
    assert all("violates the following Content Security Policy" in problem for problem in refused), refused
    assert found["root"]  # sanitised in place
    assert found["style"] == "height: 1.2em; color: red;"  # no position: fixed, no url()
    assert found["inner"] == "position: relative; top: -0.5em;"
    assert found["attributes"] == ["class", "style"]
    assert found["tags"] == ["span", "svg", "path", "math", "semantics", "mi", "annotation"]
    assert found["text"] == "xtext kept"
    assert found["html"] == '<span class="hljs-keyword">def</span>y'
    assert page.evaluate("() => window.__pwned ?? null") is None


def test_sources_are_chips_that_open_the_passage(chat_upstream, dashboard_server, admin_headers, chat_page, shot):
    page = chat_page
    requests.post(f"{dashboard_server.base_url}/api/kb/documents", headers=admin_headers, timeout=10, json={
        "filename": "tides-notes.md", "content": TIDES}).raise_for_status()
    chat_upstream.script(Text("The moon's pull causes them [1]."))
    reply = ask(page, "What causes the tides and the spring tides?")
    assert "gravitational pull" in str(chat_upstream.bodies()[0]["messages"])  # the turn's request (then the title's)

    chips = reply.get_by_role("list", name="Sources")
    chip = chips.get_by_role("button", name="[1] tides-notes.md")
    expect(chip).to_be_visible()
    chip.click()
    dialog = page.get_by_role("dialog", name="[1] tides-notes.md")
    expect(dialog).to_be_visible()
    expect(dialog.locator(".passage-text")).to_contain_text("gravitational pull")
    expect(dialog).to_contain_text(re.compile(r"Score 0\.\d{3}"))
    expect(dialog).to_contain_text("Part 1")
    shot(page, "chat-source-1280")
    page.keyboard.press("Escape")
    expect(dialog).to_have_count(0)
    expect(chip).to_be_focused()

    page.reload()
    stored = page.get_by_role("log").locator("article.message-assistant").last
    stored.get_by_role("button", name="[1] tides-notes.md").click()
    expect(page.get_by_role("dialog").locator(".passage-text")).to_contain_text("gravitational pull")
    page.get_by_role("dialog").get_by_role("button", name="Close").click()
    expect(page.get_by_role("dialog")).to_have_count(0)
    assert page.problems == []


def test_a_tool_step_unfolds_to_its_arguments_and_result_and_the_details_show_on_hover(
        chat_upstream, dashboard_server, admin_headers, chat_page, shot):
    page = chat_page
    chat_upstream.script(ToolCalls([Call("web_fetch", {"url": "http://127.0.0.1:9/private"}, id="call_1")]),
                         Text("The page could not be fetched."))
    reply = ask(page, "Fetch http://127.0.0.1:9/private for me")
    stored = requests.get(f"{dashboard_server.base_url}/api/sessions/{page.url.rsplit('/', 1)[1]}/messages",
                          headers=admin_headers, timeout=10).json()["results"]
    record = next(message for message in stored if message["id"] == reply.get_attribute("data-message-id"))
    step = record["steps"][0]

    row = reply.locator("details.step")
    expect(row).to_have_count(1)
    summary = row.locator("summary")
    expect(summary.locator(".step-name")).to_have_text("web_fetch")
    expect(summary.locator(".badge")).to_have_text("error" if step["is_error"] else "ok")
    expect(summary.locator(".step-duration")).to_have_text(re.compile(r"^\d+ ms$|^\d+\.\d+ s$"))
    expect(row.locator(".step-arguments")).to_be_hidden()
    summary.click()
    expect(row.locator(".step-arguments")).to_have_text('{\n  "url": "http://127.0.0.1:9/private"\n}')
    expect(row.locator(".step-result")).to_have_text(step["result"])

    facts = reply.locator(".message-facts")
    page.get_by_label("Message").focus()  # the focus leaves the message (the summary had it)
    page.mouse.move(0, 0)
    expect(facts).to_have_css("opacity", "0")  # transparent, still read by a screen reader
    reply.locator(".message-body").hover()
    expect(facts).to_have_css("opacity", "1")
    expect(facts).to_contain_text(f"Model: {record['model']}")
    expect(facts).to_contain_text(f"Tokens: {record['usage']['total_tokens']} (")
    expect(facts).to_contain_text("First token: ")
    expect(reply.locator(".message-role time")).to_have_attribute("datetime", re.compile(r"^\d{4}-\d\d-\d\dT"))
    page.mouse.move(0, 0)
    expect(facts).to_have_css("opacity", "0")
    reply.get_by_role("button", name="Copy", exact=True).focus()  # by keyboard too
    expect(facts).to_have_css("opacity", "1")
    summary.click()
    shot(page, "chat-steps-1280")

    page.reload()  # the stored steps show the same row
    stored = page.get_by_role("log").locator("article.message-assistant").last
    expect(stored.locator("details.step summary .step-name")).to_have_text("web_fetch")
    expect(stored.locator("details.step .step-duration")).to_be_attached()
    expect(page.get_by_role("log").locator("article.message-user time")).to_have_count(1)
    assert page.problems == []


def test_a_stopped_reply_is_told_apart_from_an_interrupted_one(chat_upstream, dashboard_server, admin_headers,
                                                               chat_page):
    page = chat_page
    chat_upstream.script(Hang("A partial answer that never ends"))
    page.goto("/#/chat")
    page.get_by_label("Message").fill("Tell me a long story")
    page.get_by_label("Message").press("Enter")
    reply = page.get_by_role("log").locator("article.message-assistant").last
    expect(reply).to_contain_text("A partial answer")
    session = page.url.rsplit("/", 1)[1]
    message = reply.get_attribute("data-message-id")
    requests.post(f"{dashboard_server.base_url}/api/sessions/{session}/messages/{message}/stop", headers=admin_headers,
                  timeout=10).raise_for_status()
    expect(reply).to_have_attribute("data-status", "stopped")
    expect(reply.locator(".message-status .badge")).to_have_text("Stopped")
    expect(page.get_by_role("log")).to_have_attribute("aria-busy", "false")
    page.reload()
    stored = page.get_by_role("log").locator("article.message-assistant").last
    expect(stored).to_have_attribute("data-status", "stopped")
    expect(stored.locator(".message-status .badge")).to_have_text("Stopped")
    expect(stored.locator(".message-body")).to_have_text("A partial answer that never ends")
    assert page.problems == []


TIDES = (
    "Tides are caused mainly by the moon's gravitational pull on the oceans. The sun adds a smaller pull; when "
    "sun and moon line up, at new and full moon, the tides are strongest: these are the spring tides."
)
