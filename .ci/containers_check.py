"""Runs the image .ci/containers built: one container, then the compose deployment (docs/deploying.md, Containers).

python3 .ci/containers_check.py, with AGENTSITE_IMAGE naming the image and POSTGRES_IMAGE, REDIS_IMAGE,
PROXY_IMAGE the stand-ins where no registry is reached. Standard library only (it runs beside CI's own install);
a fake upstream LLM (tests/fakes) listens on the host, and the containers reach it as host.containers.internal.

One container: healthy within a minute, the first admin's password in its log, a chat turn streamed from the fake
upstream, /v1/chat/completions, a non-root user; `podman stop` mid-stream ends it within 10 s and the reply is
stored `interrupted` (seen after a restart, on the same volume).

The compose deployment: both app containers healthy behind the proxy, requests answered by both (the
X-Agentsite-Host debug header), one app container killed mid-stream while the other keeps serving, a scheduled
task firing once per occurrence across the two, and `down` then `up` keeping the data.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.llm import Echo, FakeOpenAI, Text  # noqa: E402

IMAGE = os.environ.get("AGENTSITE_IMAGE", "localhost/agentsite:ci")
PROJECT = "agentsite-ci"
HOST_FROM_CONTAINER = "host.containers.internal"
SLOW = Text("slow " * 60, pieces=["slow "] * 60, delay=0.5)  # 30 s of streaming: long enough to cut


def say(text: str) -> None:
    print(f"containers: {text}", flush=True)


def run(*command: str, check: bool = True, timeout: float = 300, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    if check and done.returncode != 0:
        raise SystemExit(f"containers: `{' '.join(command)}` failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return done


def wait_until(check: Callable[[], Any], what: str, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, http.client.HTTPException, ValueError) as error:
            last = error
        else:
            if last:
                return last
        time.sleep(0.5)
    raise SystemExit(f"containers: {what} did not happen within {timeout:g} s (last: {last!r})")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Api:
    """Requests to one origin, as JSON, with a bearer token once logged in."""

    def __init__(self, port: int):
        self.port = port
        self.token = ""

    def request(self, method: str, path: str, body: Any = None, timeout: float = 30) -> tuple[int, dict, Any]:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            connection.request(method, path, body=None if body is None else json.dumps(body), headers=self._headers())
            response = connection.getresponse()
            raw = response.read()
            headers = {name.lower(): value for name, value in response.getheaders()}
            as_json = raw and "json" in headers.get("content-type", "")
            return response.status, headers, json.loads(raw) if as_json else raw
        finally:
            connection.close()

    def ok(self, method: str, path: str, body: Any = None, status: int = 200) -> Any:
        got, _headers, answer = self.request(method, path, body)
        if got != status:
            raise SystemExit(f"containers: {method} {path} answered {got}, not {status}: {answer!r}")
        return answer

    def stream(self, path: str, body: Any) -> tuple[dict, Iterator[tuple[str, Any]]]:
        """POST `path` and read its text/event-stream: the response's headers and an iterator of (event, data)."""
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        connection.request("POST", path, body=json.dumps(body), headers=self._headers())
        response = connection.getresponse()
        if response.status != 200:
            raise SystemExit(f"containers: POST {path} answered {response.status}: {response.read()!r}")
        headers = {name.lower(): value for name, value in response.getheaders()}

        def events() -> Iterator[tuple[str, Any]]:
            name = ""
            try:
                for raw in response:
                    line = raw.decode().rstrip("\n")
                    if line.startswith("event: "):
                        name = line[7:]
                    elif line.startswith("data: "):
                        yield name, json.loads(line[6:])
            except (OSError, http.client.HTTPException):
                return  # the server went away mid-stream
            finally:
                connection.close()

        return headers, events()

    def login(self, password: str) -> None:
        self.token = self.ok("POST", "/api/auth/login", {"username": "admin", "password": password})["token"]

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers


def admin_password(log: str) -> str:
    found = re.search(r"^\s*password: (\S+)$", log, re.M)
    if not found:
        raise SystemExit(f"containers: no initial admin password in the log:\n{log[-3000:]}")
    return found.group(1)


def healthy(name: str) -> bool:
    """The container's HEALTHCHECK passes, run now (Podman runs it on a timer only under systemd)."""
    return run("podman", "healthcheck", "run", name, check=False).returncode == 0


def connect_fake(api: Api, fake: FakeOpenAI) -> None:
    api.ok("POST", "/api/connections", {"name": "fake", "provider": "openai", "models": ["fake-model"],
                                        "base_url": f"http://{HOST_FROM_CONTAINER}:{fake.port}/v1"}, status=201)


def chat(api: Api, fake: FakeOpenAI, text: str) -> tuple[str, str]:
    """A chat turn streamed through `api` from the fake upstream: (session id, the reply's text)."""
    session = api.ok("POST", "/api/sessions", {"model": "fake/fake-model"}, status=201)
    fake.script(Text(f"the answer to {text}"))
    _headers, events = api.stream(f"/api/sessions/{session['id']}/chat", {"message": text})
    deltas, done = [], None
    for event, data in events:
        if event == "delta":
            deltas.append(data["content"])
        elif event in ("done", "error"):
            done = (event, data)
    if done is None or done[0] != "done" or done[1]["status"] != "complete":
        raise SystemExit(f"containers: the chat turn did not complete: {done!r}")
    if len(deltas) < 2 or "".join(deltas) != f"the answer to {text}":
        raise SystemExit(f"containers: the reply did not stream in pieces: {deltas!r}")
    return session["id"], "".join(deltas)


def completion(api: Api) -> None:
    answer = api.ok("POST", "/v1/chat/completions",
                    {"model": "fake/fake-model", "messages": [{"role": "user", "content": "ping"}]})
    if answer["choices"][0]["message"]["content"] != "echo: ping":
        raise SystemExit(f"containers: /v1/chat/completions answered {answer!r}")


def slow_turn(api: Api, fake: FakeOpenAI) -> tuple[str, dict, Iterator[tuple[str, Any]]]:
    """A chat turn that streams for 30 s, read until its second delta: (session id, headers, the rest)."""
    session = api.ok("POST", "/api/sessions", {"model": "fake/fake-model"}, status=201)
    fake.script(SLOW)
    headers, events = api.stream(f"/api/sessions/{session['id']}/chat", {"message": "go slowly"})
    deltas = 0
    for event, _data in events:
        deltas += event == "delta"
        if deltas == 2:
            return session["id"], headers, events
    raise SystemExit("containers: the slow reply ended before its second delta")


def last_reply(api: Api, session_id: str) -> dict:
    messages = api.ok("GET", f"/api/sessions/{session_id}/messages")
    messages = messages.get("results", messages) if isinstance(messages, dict) else messages
    return [message for message in messages if message["role"] == "assistant"][-1]


# --- one container ----------------------------------------------------------------------------------------------

def one_container(fake: FakeOpenAI) -> None:
    name, volume, port = f"{PROJECT}-one", f"{PROJECT}-one-data", free_port()
    run("podman", "rm", "-f", name, check=False)
    run("podman", "volume", "rm", "-f", volume, check=False)
    try:
        started = time.monotonic()
        run("podman", "run", "-d", "--name", name, "-p", f"127.0.0.1:{port}:8000", "-v", f"{volume}:/data", IMAGE)
        api = Api(port)
        wait_until(lambda: api.request("GET", "/api/health")[0] == 200, "the container answering /api/health", 60)
        say(f"one container: /api/health answered {time.monotonic() - started:.1f} s after podman run")
        wait_until(lambda: healthy(name), "the container's HEALTHCHECK passing", 60)
        user = run("podman", "exec", name, "id", "-u").stdout.strip()
        if user == "0":
            raise SystemExit("containers: the server runs as root in the container")
        api.login(admin_password(run("podman", "logs", name).stdout))
        connect_fake(api, fake)
        _session, reply = chat(api, fake, "the container")
        completion(api)
        say(f"one container: healthy, user {user}, the admin logged in, a chat turn streamed ({reply!r}), "
            "/v1/chat/completions answered")

        session_id, _headers, _events = slow_turn(api, fake)
        started = time.monotonic()
        run("podman", "stop", "-t", "10", name, timeout=60)
        took = time.monotonic() - started
        if took >= 10:
            raise SystemExit(f"containers: podman stop took {took:.1f} s: serve did not end on SIGTERM within 10 s")
        code = run("podman", "inspect", name, "--format", "{{.State.ExitCode}}").stdout.strip()
        run("podman", "start", name)
        wait_until(lambda: api.request("GET", "/api/health")[0] == 200, "the restarted container answering", 60)
        reply = last_reply(api, session_id)
        if reply["status"] != "interrupted" or not reply["content"].startswith("slow"):
            raise SystemExit(f"containers: a reply streaming at the stop is stored as {reply['status']!r} "
                             f"with {reply['content']!r}, not interrupted with what had streamed")
        say(f"one container: podman stop mid-stream took {took:.1f} s (exit code {code}); the reply was stored "
            f"interrupted with {len(reply['content'])} characters, the data kept across the restart")
    finally:
        run("podman", "rm", "-f", "-t", "0", name, check=False)
        run("podman", "volume", "rm", "-f", volume, check=False)


# --- the compose deployment -------------------------------------------------------------------------------------

class Compose:
    """compose.yaml in a directory of its own (its env file is written there, not into the checkout)."""

    def __init__(self, port: int):
        self.directory = Path(tempfile.mkdtemp(prefix="agentsite-compose-"))
        shutil.copy(ROOT / "compose.yaml", self.directory / "compose.yaml")
        (self.directory / "deploy").mkdir()
        shutil.copy(ROOT / "deploy" / "nginx.conf", self.directory / "deploy" / "nginx.conf")
        password = secrets.token_urlsafe(24)
        # As docs/deploying.md has it generated, plus the debug header that tells the two hosts apart.
        (self.directory / "deploy" / "agentsite.env").write_text(
            f"AGENTSITE_SECRET_KEY={secrets.token_urlsafe(64)}\nAGENTSITE_JWT_SIGNING_KEY={secrets.token_urlsafe(64)}\n"
            f"POSTGRES_PASSWORD={password}\nDATABASE_URL=postgres://agentsite:{password}@postgres:5432/agentsite\n"
            "AGENTSITE_WORKER_HEADER=1\n")
        self.env = {**os.environ, "AGENTSITE_PORT": str(port), "AGENTSITE_IMAGE": IMAGE}

    def __call__(self, *args: str, timeout: float = 600) -> str:
        return run("podman-compose", "-p", PROJECT, "-f", "compose.yaml", *args, env=self.env, cwd=self.directory,
                   timeout=timeout).stdout

    def container(self, service: str) -> str:
        return f"{PROJECT}_{service}_1"

    def remove(self) -> None:
        """`down -v` and the project's network (which podman-compose leaves): nothing of the project is left."""
        run("podman-compose", "-p", PROJECT, "-f", "compose.yaml", "down", "-v", env=self.env, cwd=self.directory,
            check=False, timeout=300)
        run("podman", "network", "rm", "-f", f"{PROJECT}_default", check=False)


def both_healthy(compose: Compose, api: Api, what: str) -> None:
    started = time.monotonic()
    wait_until(lambda: all(healthy(compose.container(app)) for app in ("app1", "app2")),
               f"both app containers healthy ({what})", 180)
    wait_until(lambda: api.request("GET", "/api/health")[0] == 200, f"the proxy answering ({what})", 60)
    say(f"compose: both app containers healthy behind the proxy {time.monotonic() - started:.1f} s after up ({what})")


def hosts_answering(api: Api, count: int = 20) -> set[str]:
    return {api.request("GET", "/api/health")[1].get("x-agentsite-host", "?") for _ in range(count)}


def compose_deployment(fake: FakeOpenAI) -> None:
    port = free_port()
    compose = Compose(port)
    api = Api(port)
    compose.remove()  # what an earlier run may have left
    try:
        compose("up", "-d")
        both_healthy(compose, api, "first start")
        logs = run("podman", "logs", compose.container("app1")).stdout + run(
            "podman", "logs", compose.container("app2")).stdout
        if logs.count("created the initial administrator") != 1:
            raise SystemExit("containers: the two app containers did not create exactly one initial administrator")
        password = admin_password(logs)
        stored = run("podman", "exec", compose.container("app1"), "cat", "/data/initial_admin.txt").stdout
        if f"password: {password}" not in stored:
            raise SystemExit("containers: /data/initial_admin.txt does not hold the logged password")
        api.login(password)

        hosts = hosts_answering(api)
        if hosts != {"app1", "app2"}:
            raise SystemExit(f"containers: the proxy's requests were answered by {hosts}, not by app1 and app2")
        connect_fake(api, fake)
        kept_session, _reply = chat(api, fake, "the deployment")
        completion(api)
        # On the agent's default model, not the fake: a tick must not take a reply scripted for a chat below.
        task = api.ok("POST", "/api/scheduler/tasks", {"name": "every minute", "cron": "* * * * *", "prompt": "tick"},
                      status=201)
        say("compose: requests answered by app1 and app2, a chat turn streamed, /v1 answered, a task every minute")

        session_id, headers, events = slow_turn(api, fake)
        streaming = headers.get("x-agentsite-host", "?")
        survivor = "app2" if streaming == "app1" else "app1"
        run("podman", "kill", compose.container(streaming))
        rest = sum(1 for _ in events)  # the stream ends with its host
        answered = {api.ok("GET", "/api/auth/me")["username"] for _ in range(10)}
        hosts = hosts_answering(api, 10)
        if answered != {"admin"} or hosts != {survivor}:
            raise SystemExit(f"containers: after {streaming} was killed, requests were answered by {hosts}")
        _session, _reply = chat(api, fake, "the survivor")
        say(f"compose: {streaming} killed mid-stream ({rest} more events reached the client); {survivor} "
            "kept serving every request, a new chat turn included")

        run("podman", "start", compose.container(streaming))
        both_healthy(compose, api, f"{streaming} started again")
        reply = last_reply(api, session_id)
        if reply["status"] != "interrupted":
            raise SystemExit(f"containers: the reply streaming on the killed host is {reply['status']!r}")

        first_minute = time.time()
        wait_until(lambda: runs_of(api, task["id"]), "a run of the every-minute task", 75)
        runs = runs_of(api, task["id"])
        instants = [run_["scheduled_for"] for run_ in runs]
        if len(instants) != len(set(instants)):
            raise SystemExit(f"containers: a scheduled occurrence ran more than once: {instants}")
        api.ok("PATCH", f"/api/scheduler/tasks/{task['id']}", {"enabled": False})
        say(f"compose: the task ran once per occurrence across both hosts ({len(runs)} run(s), "
            f"{time.time() - first_minute:.0f} s waited)")

        compose("down")
        compose("up", "-d")
        both_healthy(compose, api, "after down and up")
        api.login(password)
        if last_reply(api, kept_session)["content"] != "the answer to the deployment":
            raise SystemExit("containers: the chat made before `down` is gone after `up`")
        say("compose: down and up kept the database, the admin's password and the chats")
    finally:
        for service in ("app1", "app2", "proxy"):
            log = run("podman", "logs", "--tail", "30", compose.container(service), check=False)
            if log.returncode == 0 and sys.exc_info()[0] is not None:
                print(f"--- {service}'s last lines:\n{log.stdout}{log.stderr}")
        compose.remove()
        shutil.rmtree(compose.directory, ignore_errors=True)


def runs_of(api: Api, task_id: Any) -> list[dict]:
    runs = api.ok("GET", f"/api/scheduler/history?task={task_id}")
    return runs.get("results", runs) if isinstance(runs, dict) else runs


def main() -> None:
    parts = sys.argv[1:] or ["one", "compose"]  # one part alone: python3 .ci/containers_check.py compose
    fake = FakeOpenAI(host="0.0.0.0", default_reply=Echo())
    with fake:
        if "one" in parts:
            one_container(fake)
        if "compose" in parts:
            compose_deployment(fake)
    say("passed")


if __name__ == "__main__":
    main()
