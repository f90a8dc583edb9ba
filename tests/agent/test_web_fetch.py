"""web_fetch against loopback servers: conversion, redirects, limits, and the private-address guard."""

from __future__ import annotations

import ipaddress
import math

import pytest

from agentsite.agent.builtin.netguard import AddressPolicy, address_problem
from agentsite.agent.builtin.web_fetch import fetch
from agentsite.agent.tools import ToolContext, ToolError, registry
from tests.fakes.http import Chunk, FakeResponse
from tests.fakes.web import FakeWebServer

CTX = ToolContext(user_id=1, is_admin=False)  # resolved: no database lookup
ARTICLE = """<html><head><title>Tides &amp; Moons</title><script>var tracking = 1;</script></head><body>
<nav><a href="/">Home</a></nav>
<article><h1>How tides work</h1>
<p>The Moon's gravity pulls the oceans into two bulges, one facing the Moon and one on the far side of the Earth.</p>
<p>As the Earth turns, each coast passes through both bulges, so most places see two high tides a day.
See <a href="https://example.org/tides">the tide tables</a> for times.</p>
</article><footer>Copyright</footer></body></html>"""


@pytest.fixture
def private_allowed(settings):
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True


@pytest.fixture
def private_refused(settings):
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = False


async def web_fetch(url: str, **arguments):
    return await registry.call("web_fetch", {"url": url, **arguments}, CTX)


# --- with private addresses allowed (the fake web lives on 127.0.0.1) ---


async def test_web_fetch_turns_html_into_markdown(fake_web, private_allowed):
    fake_web.page("/tides", ARTICLE)

    result = await web_fetch(fake_web.url("/tides"))

    assert not result.is_error, result.text
    assert result.text.startswith(f"URL: {fake_web.url('/tides')}\nTitle: Tides & Moons\n")
    assert "# How tides work" in result.text
    assert "two bulges" in result.text
    assert "[the tide tables](https://example.org/tides)" in result.text
    assert "tracking" not in result.text


async def test_web_fetch_can_return_plain_text(fake_web, private_allowed):
    fake_web.page("/tides", ARTICLE)

    result = await web_fetch(fake_web.url("/tides"), format="text")

    assert "two bulges" in result.text
    assert "](https://example.org/tides)" not in result.text


async def test_web_fetch_returns_text_and_json_as_they_are(fake_web, private_allowed):
    fake_web.page("/notes.txt", "line one\nline two", content_type="text/plain; charset=utf-8")
    fake_web.route("/data.json", FakeResponse.json({"answer": 42}))

    text = await web_fetch(fake_web.url("/notes.txt"))
    data = await web_fetch(fake_web.url("/data.json"))

    assert text.text.endswith("\nline one\nline two")
    assert data.text.endswith('\n{"answer": 42}')


async def test_web_fetch_refuses_content_that_is_not_text(fake_web, private_allowed):
    fake_web.route("/cat.png", FakeResponse(body=b"\x89PNG\r\n\x1a\n", content_type="image/png"))

    result = await web_fetch(fake_web.url("/cat.png"))

    assert result.is_error
    assert "image/png" in result.text


async def test_web_fetch_reports_an_error_status(fake_web, private_allowed):
    result = await web_fetch(fake_web.url("/missing"))

    assert result.is_error
    assert "HTTP 404" in result.text


async def test_web_fetch_follows_five_redirects_but_not_six(fake_web, private_allowed):
    for hop in range(6):
        fake_web.redirect(f"/hop{hop}", f"/hop{hop + 1}" if hop % 2 else fake_web.url(f"/hop{hop + 1}"))
    fake_web.page("/hop6", "arrived", content_type="text/plain")

    five = await web_fetch(fake_web.url("/hop1"))
    six = await web_fetch(fake_web.url("/hop0"))

    assert not five.is_error, five.text
    assert five.text.startswith(f"URL: {fake_web.url('/hop6')}\n")
    assert six.is_error
    assert "redirected more than 5 times" in six.text


async def test_web_fetch_reads_at_most_two_megabytes(fake_web, private_allowed):
    big = b"a" * (3 * 1024 * 1024)
    fake_web.route("/big.txt", FakeResponse(body=big, content_type="text/plain"))
    fake_web.route("/streamed.txt", FakeResponse(content_type="text/plain",
                                                 chunks=[Chunk(b"b" * 65536) for _ in range(48)]))
    fake_web.route("/exact.txt", FakeResponse(body=b"c" * (2 * 1024 * 1024), content_type="text/plain"))

    declared = await fetch(fake_web.url("/big.txt"))
    streamed = await fetch(fake_web.url("/streamed.txt"))
    exact = await fetch(fake_web.url("/exact.txt"))
    result = await web_fetch(fake_web.url("/big.txt"), max_chars=1000)

    assert (len(declared.body), declared.truncated) == (2 * 1024 * 1024, True)
    assert (len(streamed.body), streamed.truncated) == (2 * 1024 * 1024, True)
    assert (len(exact.body), exact.truncated) == (2 * 1024 * 1024, False)
    assert "larger than 2 MB" in result.text
    assert "cut at 1000 characters" in result.text


async def test_web_fetch_gives_up_after_its_timeout(fake_web, private_allowed):
    fake_web.route("/slow", FakeResponse(delay=math.inf))

    with pytest.raises(ToolError, match="took longer than 0.3 seconds"):
        await fetch(fake_web.url("/slow"), timeout=0.3)
    await fake_web.wait_for_hangups(1, timeout=10)  # a deadline: seen at once when idle


@pytest.mark.parametrize("url", ["ftp://example.com/file", "file:///etc/passwd", "gopher://example.com/",
                                 "javascript:alert(1)", "not a url"])
async def test_web_fetch_only_fetches_http_and_https(url, private_allowed):
    result = await web_fetch(url)

    assert result.is_error
    assert "Only http and https" in result.text or "has no host" in result.text or "not a valid URL" in result.text


async def test_web_fetch_arguments_are_validated_before_the_fetch(fake_web, private_allowed):
    result = await registry.call("web_fetch", {"url": fake_web.url("/x"), "format": "pdf"}, CTX)

    assert result.is_error
    assert "Invalid arguments" in result.text
    assert fake_web.requests == []


# --- with private addresses refused (the default) ---


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.8.9.10", "::1", "10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "169.254.3.4",
    "fe80::1", "fc00::1", "fd00:ec2::254", "224.0.0.1", "239.255.255.250", "ff02::1", "ff0e::1", "0.0.0.0", "::",
    "::ffff:127.0.0.1", "::ffff:10.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "2002:a00:1::",
    "2001:0:4136:e378:8000:63bf:80ff:fffe", "100.100.100.200", "100.64.0.1", "192.0.0.192", "198.18.0.1",
    "240.0.0.1", "255.255.255.255", "192.0.2.1",
])
def test_non_public_addresses_are_refused(address):
    assert address_problem(ipaddress.ip_address(address)) is not None


@pytest.mark.parametrize("address", ["93.184.215.14", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111",
                                     "2a00:1450:4001:82a::200e", "64:ff9b::808:808", "::ffff:8.8.8.8"])
def test_public_addresses_are_allowed(address):
    assert address_problem(ipaddress.ip_address(address)) is None


def test_the_refusal_says_what_kind_of_address_it_is():
    assert address_problem(ipaddress.ip_address("169.254.169.254")) == "a cloud metadata address"
    assert address_problem(ipaddress.ip_address("127.0.0.1")) == "a loopback address"
    assert address_problem(ipaddress.ip_address("::ffff:192.168.0.1")) == "a private address (inside ::ffff:c0a8:1)"


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost", "[::1]", "2130706433", "0x7f000001", "[::ffff:127.0.0.1]"])
async def test_web_fetch_refuses_loopback_however_it_is_written(fake_web, private_refused, host):
    fake_web.page("/secret", "secret", content_type="text/plain")

    result = await web_fetch(f"http://{host}:{fake_web.port}/secret")

    assert result.is_error
    assert "Refusing to fetch" in result.text
    assert "AGENTSITE_ALLOW_PRIVATE_FETCH" in result.text
    assert fake_web.requests == []


async def test_web_fetch_refuses_the_cloud_metadata_address(private_refused):
    result = await web_fetch("http://169.254.169.254/latest/meta-data/")

    assert result.is_error
    assert "cloud metadata" in result.text


async def test_the_guard_follows_the_setting_on_every_call(fake_web, settings):
    fake_web.page("/page", "hello", content_type="text/plain")

    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = False
    refused = await web_fetch(fake_web.url("/page"))
    settings.AGENTSITE_ALLOW_PRIVATE_FETCH = True
    allowed = await web_fetch(fake_web.url("/page"))

    assert refused.is_error and not allowed.is_error


def resolver_of(table: dict[str, list[list[str]]], calls: list[str]):
    """A resolver answering each name with the next of its scripted answers (the last one repeats)."""

    async def resolve(host: str, port: int) -> list[str]:
        calls.append(host)
        answers = table[host]
        return answers.pop(0) if len(answers) > 1 else answers[0]

    return resolve


def trusting(trusted: str):
    """The real check, except that `trusted` (the fake web's loopback address) passes as public."""
    return lambda address: None if str(address) == trusted else address_problem(address)


async def test_a_name_that_resolves_to_a_private_address_is_refused(fake_web):
    calls: list[str] = []
    policy = AddressPolicy(resolver=resolver_of({"intranet.test": [["93.184.215.14", "10.1.2.3"]]}, calls))

    with pytest.raises(ToolError, match=r"intranet\.test \(10\.1\.2\.3\): it is a private address"):
        await fetch("http://intranet.test/wiki", policy=policy)


async def test_a_redirect_to_a_private_address_is_refused(fake_web):
    inner = FakeWebServer(host="127.0.0.2").start()
    try:
        inner.page("/admin", "secret", content_type="text/plain")
        fake_web.redirect("/to-literal", inner.url("/admin"))
        fake_web.redirect("/to-name", "http://intranet.test/admin")
        fake_web.redirect("/to-ipv6", "http://[::1]/admin", status=307)
        calls: list[str] = []
        policy = AddressPolicy(resolver=resolver_of({"intranet.test": [["10.9.9.9"]]}, calls),
                               check=trusting("127.0.0.1"))

        for path, refused in (("/to-literal", "127.0.0.2"), ("/to-name", "intranet.test"), ("/to-ipv6", "::1")):
            with pytest.raises(ToolError, match=f"Refusing to fetch from {refused}"):
                await fetch(fake_web.url(path), policy=policy)

        assert inner.requests == []
        assert [request.path for request in fake_web.requests] == ["/to-literal", "/to-name", "/to-ipv6"]
    finally:
        inner.stop()


async def test_the_connection_goes_to_the_address_that_was_checked(fake_web):
    # DNS rebinding: the name resolves to an allowed address when checked and to a refused one afterwards.
    fake_web.page("/page", "the checked server", content_type="text/plain")
    calls: list[str] = []
    policy = AddressPolicy(resolver=resolver_of({"rebind.test": [["127.0.0.1"], ["127.0.0.2"]]}, calls),
                           check=trusting("127.0.0.1"))

    page = await fetch(f"http://rebind.test:{fake_web.port}/page", policy=policy)

    assert page.body == b"the checked server"
    assert calls == ["rebind.test"]
    assert fake_web.requests[0].headers["host"] == f"rebind.test:{fake_web.port}"


async def test_each_redirect_hop_is_resolved_and_checked_again(fake_web):
    fake_web.redirect("/start", f"http://rebind.test:{fake_web.port}/next")
    calls: list[str] = []
    policy = AddressPolicy(resolver=resolver_of({"rebind.test": [["10.0.0.7"]]}, calls), check=trusting("127.0.0.1"))

    with pytest.raises(ToolError, match="10.0.0.7"):
        await fetch(fake_web.url("/start"), policy=policy)

    assert calls == ["rebind.test"]


async def test_a_name_that_does_not_resolve_is_a_clear_error(private_refused):
    result = await web_fetch("http://no-such-host.invalid/")

    assert result.is_error
    assert "Could not resolve no-such-host.invalid" in result.text
