"""The chat's tool calls, attachments and voice in a real Chromium: what the model did folds under the reply,
files reach the model, dictation and read-aloud work through the server's speech providers, and every
failure (a refused microphone, a provider that cannot work) is shown, never swallowed."""

from __future__ import annotations

import io
import re
from collections.abc import Iterator

import pytest
import requests
from playwright.sync_api import expect

from tests.fakes.llm import Text
from tests.needs import unavailable

pytestmark = pytest.mark.e2e


def last_reply(page):
    return page.get_by_role("log").locator("article.message-assistant").last


@pytest.fixture
def voice_config(dashboard_server, admin_headers) -> Iterator:
    """Set the server's speech providers for one test: voice_config(stt_provider=..., tts_provider=...)."""
    url = f"{dashboard_server.base_url}/api/config"
    before = requests.get(url, headers=admin_headers, timeout=10).json()

    def apply(**fields: str) -> None:
        requests.patch(url, headers=admin_headers, json=fields, timeout=10).raise_for_status()

    yield apply
    apply(stt_provider=before["stt_provider"], tts_provider=before["tts_provider"])


def png_bytes() -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (8, 6), (30, 160, 90)).save(buffer, "PNG")
    return buffer.getvalue()


def test_image_and_file_attachments_are_uploaded_and_sent_with_the_message(chat_upstream, logged_in_page, tmp_path):
    page = logged_in_page
    chat_upstream.script(Text("I see a green picture and your notes."))
    image, notes = tmp_path / "green.png", tmp_path / "notes.txt"
    image.write_bytes(png_bytes())
    notes.write_text("The launch code word is PAPAYA.")
    with page.expect_file_chooser() as chooser:
        page.get_by_role("button", name="Attach files").click()
    chooser.value.set_files([str(image), str(notes)])
    attachments = page.get_by_role("list", name="Files to send")
    expect(attachments.get_by_text("notes.txt")).to_be_visible()
    expect(attachments).not_to_contain_text("uploading")
    page.get_by_label("Message").fill("What is in these?")
    page.get_by_role("button", name="Send").click()
    expect(last_reply(page)).to_have_attribute("data-status", "complete")

    content = chat_upstream.bodies()[0]["messages"][-1]["content"]  # the turn's (a title request may follow)
    kinds = [part["type"] for part in content]
    assert "image_url" in kinds
    assert next(part for part in content if part["type"] == "image_url")["image_url"]["url"].startswith(
        "data:image/png;base64,")
    assert any("PAPAYA" in part.get("text", "") for part in content)

    mine = page.get_by_role("log").locator("article.message-user").last
    expect(mine.get_by_role("img", name="green.png")).to_have_attribute("src", re.compile(r"^blob:"))
    expect(mine).to_contain_text("notes.txt")
    expect(attachments.locator("li")).to_have_count(0)  # the composer's list is emptied once sent


def test_dictation_shows_an_error_when_the_microphone_is_refused(logged_in_page):
    page = logged_in_page  # the context was never granted the microphone
    page.get_by_role("button", name="Dictate").click()
    expect(page.get_by_role("alert").filter(has_text="microphone is blocked").first).to_be_visible()
    expect(page.get_by_role("button", name="Dictate")).to_have_attribute("aria-pressed", "false")


def test_dictation_through_a_provider_that_cannot_work_says_why(voice_config, logged_in_page):
    voice_config(stt_provider="hosted")  # hosted speech needs an OpenAI-compatible provider; this one is offline
    page = logged_in_page
    page.context.grant_permissions(["microphone"])
    page.get_by_role("button", name="Dictate").click()
    expect(page.get_by_role("button", name="Finish dictation")).to_be_visible()
    page.wait_for_timeout(1000)  # a second of sound from the fake microphone: what a person would say
    page.get_by_role("button", name="Finish dictation").click()
    expect(page.get_by_role("alert").filter(has_text="Dictation failed").first).to_contain_text("Hosted speech")
    expect(page.get_by_role("button", name="Dictate")).to_be_enabled()


def test_dictation_with_the_local_provider_writes_what_was_said(voice_config, logged_in_page, spoken_wav):
    if spoken_wav is None:
        unavailable("espeak-ng is not installed (apt-get install espeak-ng): the fake microphone has nothing to say")
    voice_config(stt_provider="local")
    page = logged_in_page
    page.context.grant_permissions(["microphone"])
    page.get_by_role("button", name="Dictate").click()
    expect(page.get_by_role("button", name="Finish dictation")).to_be_visible()
    page.wait_for_timeout(2600)  # the fake microphone says the sentence (2.5 s) at least once
    page.get_by_role("button", name="Finish dictation").click()
    message = page.get_by_label("Message")
    expect(message).to_have_value(re.compile(r"weather|sunny|hello", re.IGNORECASE), timeout=20_000)


def test_read_aloud_plays_server_speech_and_shows_a_provider_failure(voice_config, chat_upstream, logged_in_page):
    page = logged_in_page
    chat_upstream.script(Text("Hello there."))
    page.get_by_label("Message").fill("Say hello")
    page.get_by_label("Message").press("Enter")
    reply = last_reply(page)
    expect(reply).to_have_attribute("data-status", "complete")

    voice_config(tts_provider="local")
    with page.expect_response(re.compile(r"/api/voice/tts$")) as spoken:
        reply.get_by_role("button", name="Read aloud").click()
    assert spoken.value.status == 200
    assert spoken.value.headers["content-type"].startswith("audio/")
    assert spoken.value.request.post_data_json["text"] == "Hello there."

    voice_config(tts_provider="hosted")
    page.reload()
    last_reply(page).get_by_role("button", name="Read aloud").click()
    # Hosted speech goes where the LLM goes: the fake upstream, which has no speech endpoint.
    expect(page.get_by_role("alert").filter(has_text="Read-aloud failed").first).to_contain_text(
        re.compile("hosted speech", re.IGNORECASE))


# The browser's own speech services stand in here: Chromium's recognition sends the audio to Google's servers
# (not reachable offline), and its synthesis has no voices without a speech daemon. These replace them in the
# page with objects that behave as the Web Speech API says, so the page's own code is what is tested.
BROWSER_SPEECH = """
window.__recognitionFails = null;
window.__synthesisFails = null;
window.__spoken = [];
class StandInRecognition extends EventTarget {
  start() {
    if (window.__recognitionFails) {
      setTimeout(() => {
        const failure = new Event("error");
        failure.error = window.__recognitionFails;
        this.dispatchEvent(failure);
        this.dispatchEvent(new Event("end"));
      }, 50);
    }
  }
  stop() {
    const heard = new Event("result");
    heard.resultIndex = 0;
    const result = [{ transcript: "hello from the browser" }];
    result.isFinal = true;
    heard.results = [result];
    this.dispatchEvent(heard);
    this.dispatchEvent(new Event("end"));
  }
  abort() { this.dispatchEvent(new Event("end")); }
}
window.SpeechRecognition = StandInRecognition;
window.webkitSpeechRecognition = StandInRecognition;
window.speechSynthesis.speak = (utterance) => {
  window.__spoken.push(utterance.text);
  setTimeout(() => {
    if (window.__synthesisFails) {
      const failure = new Event("error");
      failure.error = window.__synthesisFails;
      utterance.dispatchEvent(failure);
    } else {
      utterance.dispatchEvent(new Event("start"));
      utterance.dispatchEvent(new Event("end"));
    }
  }, 20);
};
"""


def test_the_browser_provider_uses_the_browsers_recognition_and_synthesis_and_shows_their_failures(
        voice_config, chat_upstream, logged_in_page):
    page = logged_in_page
    voice_config(stt_provider="browser", tts_provider="browser")
    page.add_init_script(BROWSER_SPEECH)
    page.reload()
    to_server = []
    page.on("request", lambda request: "/api/voice/" in request.url and to_server.append(request.url))

    page.get_by_role("button", name="Dictate").click()
    page.get_by_role("button", name="Finish dictation").click()
    expect(page.get_by_label("Message")).to_have_value("hello from the browser")

    page.evaluate("window.__recognitionFails = 'network'")
    page.get_by_role("button", name="Dictate").click()
    # Shown as soon as the recognition gives up, without another click.
    expect(page.get_by_role("alert").filter(has_text="Speech recognition failed: network").first).to_be_visible()
    expect(page.get_by_role("button", name="Dictate")).to_be_enabled()

    chat_upstream.script(Text("Hello there."))
    page.get_by_label("Message").fill("Say hello")
    page.get_by_label("Message").press("Enter")
    reply = last_reply(page)
    expect(reply).to_have_attribute("data-status", "complete")
    reply.get_by_role("button", name="Read aloud").click()
    expect(reply.get_by_role("button", name="Read aloud")).to_be_visible()  # spoken to its end
    assert page.evaluate("window.__spoken") == ["Hello there."]

    page.evaluate("window.__synthesisFails = 'synthesis-failed'")
    reply.get_by_role("button", name="Read aloud").click()
    expect(page.get_by_role("alert").filter(has_text="Read-aloud failed").first).to_contain_text("synthesis-failed")
    assert to_server == []  # neither dictation nor read-aloud went to the server's speech providers
