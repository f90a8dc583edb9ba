"""Browser tests of the dashboard: Playwright for Python driving Debian's Chromium against a real server.

Fixtures:
- `dashboard_server` (module): a real server (daphne, or `manage.py serve` when the module sets
  `LIVE_SERVER_COMMAND = "serve"`, for pages that need the task cluster) on the embedded default: SQLite,
  the offline provider. Shared by the modules that ask for the same command and `LIVE_SERVER_ENV`; a module
  that needs one no other module has used sets `OWN_SERVER = True`.
- `chat_upstream`: points that server's `openai` provider at the fake OpenAI upstream (tests/fakes/llm.py)
  for one test, so a test scripts the model's replies (slow streams, hangs, hostile Markdown); the server
  goes back to the offline provider afterwards.
- `browser` (package): one Chromium for all the tests of tests/dashboard. `page`: a fresh context
  (1280x800) per test, with `page.problems`, the page errors and console errors seen (CSP refusals included).
- `logged_in_page`: `page` logged in as the initial admin through the log-in form; `user_page` the same
  for a normal registered user (`normal_user` gives its credentials).
- `shot(page, name)`: saves a full-page screenshot to tests/dashboard/screenshots/ (or
  $DASHBOARD_SCREENSHOTS), printed at the end of the run.

Without Playwright or Chromium the tests skip with the reason; with CI=true they fail instead (.ci/run
installs both).
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from tests.needs import unavailable
from tests.server import LiveServer

CHROMIUM = os.environ.get("DASHBOARD_CHROMIUM", "/usr/bin/chromium")
SCREENSHOTS = Path(os.environ.get("DASHBOARD_SCREENSHOTS") or Path(__file__).parent / "screenshots")
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 375, "height": 740}
# Playwright's waits (expect, locators) give up after this; every wait in these tests is on a local server, and
# returns as soon as what it waits for is there. 5 s ran out in CI while the other shards and the container build
# kept both cores busy.
TIMEOUT_MS = 15000
USER_PASSWORD = "dashboard-user-pass-42"
SPOKEN = "hello world, the weather is sunny today"

_saved: list[Path] = []


def _missing() -> str | None:
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "the dashboard tests need Playwright: pip install -e '.[dev]'"
    if not (shutil.which(CHROMIUM) or Path(CHROMIUM).exists()):
        return f"the dashboard tests need Chromium at {CHROMIUM}: apt-get install chromium (.ci/run installs it)"
    return None


def _spoken_words(directory: Path) -> Path | None:
    """A WAV of espeak-ng saying SPOKEN, which Chromium's fake microphone plays in a loop (None without espeak-ng)."""
    espeak = shutil.which("espeak-ng")
    if not espeak:
        return None
    path = directory / "spoken.wav"
    subprocess.run([espeak, "-w", str(path), SPOKEN], check=True, capture_output=True, timeout=30)
    return path


@pytest.fixture(scope="session")
def spoken_wav(tmp_path_factory: pytest.TempPathFactory) -> Path | None:
    return _spoken_words(tmp_path_factory.mktemp("dashboard-audio"))


# Package scope: while Playwright's sync API is open, this thread has an asyncio loop running, and Django
# refuses sync database work in such a thread; the browser must be gone before the rest of the suite runs.
@pytest.fixture(scope="package")
def browser(spoken_wav: Path | None) -> Iterator:
    reason = _missing()
    if reason:
        unavailable(reason)
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=TIMEOUT_MS)
    # --no-sandbox: the tests run as root, where Chromium's sandbox refuses to start (docs/notes.md). The fake
    # media device stands in for a microphone (a context still has to be granted it, as a person would).
    args = ["--no-sandbox", "--use-fake-device-for-media-stream", "--autoplay-policy=no-user-gesture-required"]
    if spoken_wav:
        args.append(f"--use-file-for-fake-audio-capture={spoken_wav}")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=args)
        yield browser
        browser.close()


@pytest.fixture(scope="package")
def _shared_servers() -> Iterator[dict[tuple, LiveServer]]:
    """The servers the package's modules share, one for each command and environment, stopped at its end."""
    servers: dict[tuple, LiveServer] = {}
    yield servers
    for server in servers.values():
        server.stop()


@pytest.fixture(scope="module")
def dashboard_server(request: pytest.FixtureRequest, _shared_servers: dict[tuple, LiveServer]) -> LiveServer:
    """The module's server: shared with the package's other modules that ask for the same command and environment
    (a start costs ~1.6 s of CPU, a browser test ~1.4), unless the module says OWN_SERVER = True because its
    tests count on a server no other module has used. So a module's tests must not count on being the first
    to use it: they look for what they made (by its unique name), not at how many there are."""
    command = getattr(request.module, "LIVE_SERVER_COMMAND", "daphne")
    reason = _missing()
    if reason:
        unavailable(reason)
    # Every test logs in through the form: the per-IP login limit (10 a minute) would refuse the run.
    env = {"AGENTSITE_LOGIN_RATE_LIMIT": "1000", **getattr(request.module, "LIVE_SERVER_ENV", {})}
    if getattr(request.module, "OWN_SERVER", False):
        server = LiveServer(command=command, env=env).start()
        request.addfinalizer(server.stop)
        return server
    key = (command, tuple(sorted(env.items())))
    if key not in _shared_servers:
        _shared_servers[key] = LiveServer(command=command, env=env).start()
    return _shared_servers[key]


@pytest.fixture(scope="module")
def admin_headers(dashboard_server: LiveServer) -> dict[str, str]:
    """The initial admin's bearer header for API calls a test makes itself (one password check per module)."""
    return {"Authorization": f"Bearer {dashboard_server.login()['token']}"}


@pytest.fixture
def chat_upstream(dashboard_server: LiveServer, admin_headers: dict[str, str], fake_openai) -> Iterator:
    """The fake OpenAI upstream as this server's model for one test (script it with fake_openai.script)."""
    headers = admin_headers
    answer = requests.patch(f"{dashboard_server.base_url}/api/config", headers=headers, timeout=10, json={
        "provider": "openai", "base_url": fake_openai.base_url, "api_key": "sk-dashboard-test", "model": "fake-model"})
    answer.raise_for_status()
    yield fake_openai
    requests.patch(f"{dashboard_server.base_url}/api/config", headers=headers, timeout=10,
                   json={"provider": "offline"}).raise_for_status()


@pytest.fixture
def page(browser, dashboard_server: LiveServer) -> Iterator:
    context = browser.new_context(viewport=DESKTOP, base_url=dashboard_server.base_url)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.problems = []
    page.on("pageerror", lambda error: page.problems.append(f"page error: {error}"))
    page.on("console", lambda message: message.type == "error" and page.problems.append(f"console: {message.text}"))
    yield page
    context.close()


def log_in(page, dashboard_server: LiveServer, username: str, password: str) -> None:
    from playwright.sync_api import expect

    page.goto("/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("link", name="Chat", exact=True)).to_be_visible()


@pytest.fixture
def logged_in_page(page, dashboard_server: LiveServer):
    log_in(page, dashboard_server, "admin", dashboard_server.admin_password)
    return page


@pytest.fixture(scope="module")
def normal_user(dashboard_server: LiveServer) -> dict[str, str]:
    """A user registered through the API (registration is open by default)."""
    username = f"user-{secrets.token_hex(3)}"
    answer = requests.post(f"{dashboard_server.base_url}/api/auth/register", timeout=10,
                           json={"username": username, "password": USER_PASSWORD})
    answer.raise_for_status()
    return {"username": username, "password": USER_PASSWORD, "token": answer.json()["token"]}


@pytest.fixture
def user_page(page, dashboard_server: LiveServer, normal_user: dict[str, str]):
    log_in(page, dashboard_server, normal_user["username"], normal_user["password"])
    return page


def save_shot(page, name: str) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    _saved.append(path)
    return path


@pytest.fixture
def shot() -> Callable:
    return save_shot


def pytest_terminal_summary(terminalreporter) -> None:
    if _saved:
        terminalreporter.write_line(f"dashboard screenshots ({len(_saved)}): {SCREENSHOTS}")
