"""Per-process caches kept correct across processes: a change is announced, and every process drops what it
cached of it.

A cache registers `subscribe(topic, drop)` and calls `listen()` before each load; the code that changes what it
caches calls `announce(topic, key)` once committed. `drop(key)` then runs at once in this process, and in every
other process: over one Redis channel with REDIS_URL, else on SQLite over Unix datagram sockets registered under
`<DATA_DIR>/run/invalidate/` (one host). PostgreSQL without Redis has no channel: `connected()` is False.
`drop(None)` means "drop everything", sent whenever the listener (re)connects, since announcements are not kept.

Contract for a subscriber: `drop` is cheap, thread-safe and never raises; entries still expire after a time to
live of the cache's choosing, which bounds how long a change no announcement reaches (a queryset `update()`)
stays unseen.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from django.conf import settings

from agentsite.core import localwake

if TYPE_CHECKING:
    import redis

logger = logging.getLogger(__name__)

Drop = Callable[[str | None], None]

_subscribers: dict[str, list[Drop]] = {}
_lock = threading.Lock()
_listener: tuple[int, threading.Thread] | None = None  # (pid, thread): a forked child starts its own
_connected = threading.Event()
RECONNECT_MAX_S = 5.0
FIRST_SUBSCRIBE_WAIT_S = 2.0


def channel() -> str:
    return f"{os.environ.get('AGENTSITE_CACHE_PREFIX', 'agentsite')}:invalidate"


def subscribe(topic: str, drop: Drop) -> None:
    """Call `drop(key)` when `topic` changes (key None: everything), here and, with Redis, anywhere."""
    with _lock:
        if drop not in _subscribers.setdefault(topic, []):
            _subscribers[topic].append(drop)


def drop_here(topic: str, key: object = None) -> None:
    """Drop `topic` at `key` in this process only (a change not yet committed: `announce` it after)."""
    _apply(topic, None if key is None else str(key))


def announce(topic: str, key: object = None) -> None:
    """`topic` changed at `key` (None: all of it). Call it after the change is committed. It returns once every
    other listening process has applied it (each confirms; at most ACK_WAIT_S): the request that made a change
    answers only after no process can serve it from its old cache."""
    key_text = None if key is None else str(key)
    _apply(topic, key_text)
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        if _local_dir() is not None:
            _local_announce(topic, key_text)
        return
    try:
        client = _redis(url)
        reply = f"{channel()}:applied:{uuid.uuid4().hex}"
        listeners = client.publish(channel(), json.dumps([topic, key_text, _origin(), reply]))
        _confirmed(client, reply, listeners, topic)
    except Exception:  # noqa: BLE001 - Redis down: the others' caches expire after their time to live
        logger.warning("Could not announce a change of %s to other processes (Redis unreachable); their caches "
                       "expire within seconds.", topic, exc_info=True)


def _confirmed(client: redis.Redis, reply: str, listeners: int, topic: str) -> None:
    """Wait until the `listeners` that received an announcement have applied it (each pushes onto `reply`), at
    most ACK_WAIT_S: as on the host's channel (_local_announce), a change is dropped everywhere before the
    request that made it answers."""
    deadline = time.monotonic() + ACK_WAIT_S
    while listeners > 0 and (left := deadline - time.monotonic()) > 0:
        if client.blpop([reply], timeout=max(left, 0.01)) is None:
            break
        listeners -= 1
    if listeners > 0:
        logger.warning("%d listener(s) did not confirm a change of %s within %.1f s", listeners, topic, ACK_WAIT_S)
    client.delete(reply)


def connected() -> bool:
    """Whether this process's listener receives the others' announcements (Redis subscribed, or the host's
    channel on SQLite); always False on PostgreSQL without Redis, and in a forked child until it listens."""
    local = _local
    if local is not None:
        return local[0] == os.getpid()
    listener = _listener
    return _connected.is_set() and listener is not None and listener[0] == os.getpid()


CONNECTED_TTL_S = 60.0


def ttl(base: float) -> float:
    """A cache's time to live: `base`, or CONNECTED_TTL_S when longer and this process hears every announced
    change (connected): only a change no announcement reaches then waits for it."""
    return max(base, CONNECTED_TTL_S) if connected() else base


def _apply(topic: str, key: str | None) -> None:
    with _lock:
        drops = list(_subscribers.get(topic, ()))
    for drop in drops:
        try:
            drop(key)
        except Exception:  # noqa: BLE001 - a cache's bug must not stop the others from dropping
            logger.exception("A cache subscribed to %s failed to drop %r", topic, key)


def _apply_all() -> None:
    with _lock:
        topics = list(_subscribers)
    for topic in topics:
        _apply(topic, None)


_clients: dict[tuple[int, str], redis.Redis] = {}
_origins: dict[int, str] = {}


def _origin() -> str:
    """This process's name on the channel: unique across hosts and forks (a pid alone is not)."""
    pid = os.getpid()
    if pid not in _origins:
        _origins[pid] = uuid.uuid4().hex
    return _origins[pid]


def _redis(url: str) -> redis.Redis:
    # Optional: the Redis client is imported only with REDIS_URL.
    import redis

    key = (os.getpid(), url)
    client = _clients.get(key)
    if client is None:
        client = _clients[key] = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    return client


def listen() -> None:
    """Start this process's listener thread once (per pid): on Redis when configured, else on the host's
    channel on SQLite. A cache calls it before it loads anything: a process that never caches never listens
    (manage.py commands, migrations)."""
    global _listener
    url = getattr(settings, "REDIS_URL", "")
    if not url:
        if _local_dir() is not None:
            _local_listen()
        return
    with _lock:
        if _listener is not None and _listener[0] == os.getpid() and _listener[1].is_alive():
            return
        _connected.clear()
        thread = threading.Thread(target=_listen_forever, args=(url,), name="agentsite-invalidation", daemon=True)
        _listener = (os.getpid(), thread)
        thread.start()
    # The first listen waits (briefly, once) until the subscription stands, so that whatever is announced after
    # this process's first load reaches it: a cool-down announced the moment after a worker started was missed
    # while its listener was still subscribing. Redis down: it goes on after the wait, as before.
    _connected.wait(FIRST_SUBSCRIBE_WAIT_S)


def _listen_forever(url: str) -> None:
    # Optional: the Redis client is imported only with REDIS_URL.
    import redis

    delay = 0.1
    while True:
        pubsub = None
        try:
            # Named after the channel, so an operator (and a test) can tell the listeners in CLIENT LIST.
            client = redis.Redis.from_url(url, socket_connect_timeout=2, health_check_interval=10,
                                          client_name=channel())
            pubsub = client.pubsub(ignore_subscribe_messages=False)
            pubsub.subscribe(channel())
            while True:
                message = pubsub.get_message(timeout=1.0)
                if message is None:
                    continue
                if message["type"] == "subscribe":
                    # Anything announced before this point was missed: start from nothing.
                    _apply_all()
                    _connected.set()
                    delay = 0.1
                elif message["type"] == "message":
                    topic, key, origin, *reply = json.loads(message["data"])
                    if origin != _origin():  # the announcer applied its own already
                        _apply(topic, key)
                    if reply and isinstance(reply[0], str):  # the announcer waits for every listener's word
                        confirm = client.pipeline()
                        confirm.rpush(reply[0], 1)
                        confirm.expire(reply[0], 10)
                        confirm.execute()
        except Exception:  # noqa: BLE001 - Redis went away: drop everything, then reconnect with backoff
            if _connected.is_set():
                logger.warning("Lost the invalidation channel on Redis; reconnecting.", exc_info=True)
            _connected.clear()
            _apply_all()
            time.sleep(delay)
            delay = min(delay * 2, RECONNECT_MAX_S)
        finally:
            if pubsub is not None:
                try:
                    pubsub.close()
                except Exception:  # noqa: BLE001
                    pass


# --- the host's channel (SQLite without Redis) ---------------------------------------------------------------

_ADDRESS_PREFIX = b"\0agentsite-invalidate-"
_local: tuple[int, socket.socket, Path] | None = None  # (pid, socket, registration file) of this process
SEND_TIMEOUT_S = 0.2  # a listener whose buffer is full gets this long to read before the announcement is lost
ACK_WAIT_S = 0.5  # how long an announcement waits for the host's other processes to confirm they applied it


def _local_dir() -> Path | None:
    """Where the host's listeners register (None: no host channel here: Redis, or not SQLite)."""
    if getattr(settings, "REDIS_URL", ""):
        return None

    return Path(settings.DATA_DIR) / "run" / "invalidate" if localwake.available() else None


def _local_address(name: str) -> bytes:
    return _ADDRESS_PREFIX + name.encode()


def _local_listen() -> None:
    """Bind this process's socket, register it, then start its listener thread (once per pid)."""
    global _local
    with _lock:
        if _local is not None and _local[0] == os.getpid():
            return
        directory = _local_dir()
        if directory is None:
            return
        name = _origin()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            sock.bind(_local_address(name))
            directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            registration = directory / name
            registration.touch(mode=0o600)
        except OSError:
            sock.close()
            logger.warning("Could not join this host's invalidation channel; other processes' changes are seen "
                           "when this one's caches expire.", exc_info=True)
            return
        # Registered before any load of this process: every change committed later reaches it.
        _local = (os.getpid(), sock, registration)
        atexit.register(_local_leave, os.getpid(), registration)
    threading.Thread(target=_local_receive, args=(sock,), name="agentsite-invalidation", daemon=True).start()


def _local_receive(sock: socket.socket) -> None:
    while True:
        try:
            data = sock.recv(65536)
            topic, key, origin, *reply = json.loads(data)
        except OSError:
            return  # closed (tests); a process that lost it re-registers on its next listen()
        except (ValueError, TypeError):
            continue  # not an announcement
        if origin != _origin():
            _apply(topic, key)
        if reply and isinstance(reply[0], str):  # the announcer waits until every process has dropped it
            try:
                sock.sendto(b"applied", _local_address(reply[0]))
            except OSError:
                pass  # it stopped waiting (ACK_WAIT_S)


def _local_announce(topic: str, key: str | None) -> None:
    """Send the announcement to every listener registered on this host but this process, and wait until each
    has applied it (at most ACK_WAIT_S): a change is dropped everywhere before the request that made it answers.
    Sent and forgotten, a datagram could still wait in another process's socket when the client's next request
    reached that process, whose request thread then read the cache before its listener thread ran."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as replies:
        reply = f"ack-{uuid.uuid4().hex}"
        try:
            replies.bind(_local_address(reply))
        except OSError:
            reply = ""
        sent = _local_send(json.dumps([topic, key, _origin(), *([reply] if reply else [])]).encode())
        if not reply:
            return
        deadline = time.monotonic() + ACK_WAIT_S
        while sent > 0 and (left := deadline - time.monotonic()) > 0:
            replies.settimeout(left)
            try:
                replies.recv(16)
            except OSError:  # timed out: that process applies it later, or its caches expire
                logger.warning("%d process(es) of this host did not confirm a change of %s within %.1f s", sent,
                               topic, ACK_WAIT_S)
                return
            sent -= 1


def _local_send(message: bytes) -> int:
    """Send an announcement to every listener registered on this host but this process; how many it reached."""
    directory = _local_dir()
    if directory is None:
        return 0
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return 0  # nobody has listened yet
    me = _origin()
    reached = 0
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.settimeout(SEND_TIMEOUT_S)
        for name in names:
            if name == me:
                continue
            try:
                sock.sendto(message, _local_address(name))
                reached += 1
            except (ConnectionRefusedError, FileNotFoundError):
                (directory / name).unlink(missing_ok=True)  # its process is gone
            except OSError:
                logger.warning("Could not announce a change to process %s of this host (its buffer stayed full); "
                               "its caches expire within their time to live.", name, exc_info=True)
    return reached


def _local_leave(pid: int, registration: Path) -> None:
    if os.getpid() == pid:
        registration.unlink(missing_ok=True)
