"""Stopping a streaming reply from whichever process or host the request lands on.

POST /api/sessions/:id/messages/:mid/stop marks the reply `stopped` in the database (services.message_stop,
which keeps the reply's `process`) and announces it on the invalidation channel (agentsite.core.invalidation:
Redis, or the host's Unix sockets on SQLite). The process whose turn generates the reply finds it here among its
running turns and stops it: the turn stores what it generated as `stopped`, and its stream ends with `done`.
An announcement that never arrives is covered by the turn's next checkpoint, which a stopped reply refuses
(the turn then stops itself), and a process that died is covered by the sweep, which leaves the reply `stopped`
with its last checkpoint. The request waits for the final store, at most STOP_WAIT_S, and answers the reply.

Invariant: a reply is stored `stopped` only on a stop request, and a stopped reply never streams again.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING

from django.db import transaction

from agentsite.core import invalidation
from agentsite.core.errors import AppError
from sessions_app import services
from sessions_app.models import ChatMessage

if TYPE_CHECKING:
    from sessions_app.turns import ChatTurn

TOPIC = "chat.stop"
STOP_WAIT_S = 5.0
POLL_S = 0.05

_running: dict[str, ChatTurn] = {}  # reply id -> the turn generating it in this process
_lock = threading.Lock()


def running(turn: ChatTurn) -> None:
    """The turn generates its reply in this process from now on (ChatTurn.batches)."""
    with _lock:
        _running[str(turn.reply_id)] = turn


def ended(turn: ChatTurn) -> None:
    with _lock:
        if _running.get(str(turn.reply_id)) is turn:
            del _running[str(turn.reply_id)]


def _on_stop(key: str | None) -> None:
    """The invalidation subscriber: stop the announced reply's turn if it runs here (None, sent when the
    channel reconnects: nothing; a stop announced meanwhile reaches the turn through its next checkpoint)."""
    if key is None:
        return
    with _lock:
        turn = _running.get(key)
    if turn is not None:
        turn.stop_threadsafe()


def connect() -> None:
    """Take stop requests (SessionsConfig.ready)."""
    invalidation.subscribe(TOPIC, _on_stop)


def listening() -> None:
    """Make sure this process hears stop requests before it starts a turn (sync: its first call may wait for
    the channel; a turn's opening calls it on its database thread)."""
    invalidation.listen()


def reply_stop(*, message: ChatMessage) -> ChatMessage:
    """Stop a streaming reply and answer it as stored once its turn stored it (or after STOP_WAIT_S, as it is
    then: `stopped` with its last checkpoint). A reply that had already ended is answered as it ended."""
    if message.role != "assistant":
        raise AppError("not_found", "No such reply in this session: stop names an assistant message.", 404)
    if services.message_stop(message=message):
        transaction.on_commit(lambda: invalidation.announce(TOPIC, message.pk))
        _wait_stored(message.pk)
    message.refresh_from_db()
    return message


def _wait_stored(message_id: uuid.UUID) -> None:
    """Until the turn's final store cleared `process` (or the reply is gone), at most STOP_WAIT_S."""
    deadline = time.monotonic() + STOP_WAIT_S
    while time.monotonic() < deadline:
        row = ChatMessage.objects.filter(pk=message_id).values_list("status", "process").first()
        if row is None or row[0] != "stopped" or not row[1]:
            return
        time.sleep(POLL_S)
