"""The audit log's front door: `audit(action, ...)` from any layer.

Each event is one JSON line on the logger `agentsite.audit` and one append-only row, through the store `accounts`
registers in its ready(). An event names the action (from ACTIONS), the outcome, the actor, the client address,
the user agent, the door, the target and details; details hold names, never secrets (keys in SECRET_KEYS are
replaced by `[set]`). Recording never raises into the action it records.

Refusals a client can repeat at will are coalesced (`coalesce=<code>`): like events in one clock minute are one
row with a `count`, and only the first in each process and minute is logged at INFO, so a flood fills neither
the table nor the log.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connection

logger = logging.getLogger("agentsite.audit")
_problems = logging.getLogger(__name__)

OUTCOMES = ("success", "failure", "refused")
ACTIONS = (
    "auth.login", "auth.logout", "auth.register", "auth.password_change", "auth.refresh_reuse", "auth.sso_failed",
    "admin.login", "user.activation", "config.change", "connection.create", "connection.update",
    "connection.delete", "alias.create", "alias.update", "alias.delete", "mcp.connect", "mcp.disconnect",
    "plugin.load", "plugin.reload", "plugin.error", "key.create", "key.revoke", "key.scope_refused",
    "budget.change", "webhook.refused", "group.create", "group.update", "group.delete", "group.member_add",
    "group.member_update", "group.member_remove", "access.change", "resource.transfer", "user.delete",
    "agent.create", "agent.update", "agent.delete", "agent.restore", "oauth.client_registered", "oauth.consent",
    "oauth.revoke", "oauth.token_reuse",
    "a2a_remote.create", "a2a_remote.delete", "a2a_remote.refresh",
)
SECRET_KEYS = ("password", "api_key", "secret", "token", "key", "authorization", "headers")

_store: list[Callable[[dict[str, Any]], None] | None] = [None]
_client_ip: list[Callable[[Any], str] | None] = [None]


def set_store(store: Callable[[dict[str, Any]], None], client_ip: Callable[[Any], str]) -> None:
    """accounts' ready(): where rows go, and how a request's client address is read."""
    _store[0], _client_ip[0] = store, client_ip


def _door(request: Any) -> str:
    if request is None:
        return "system"
    if getattr(request, "api_key", None) is not None:
        return "key"
    auth = getattr(request, "auth", None)
    user = getattr(request, "user", None)
    if auth is not None:
        return "jwt"
    if user is not None and getattr(user, "is_authenticated", False):
        return "session"
    return "anonymous"


def _scrub(details: dict[str, Any]) -> dict[str, Any]:
    clean: dict[str, Any] = {}
    for key, value in details.items():
        if any(word in key.lower() for word in SECRET_KEYS) and key not in ("fields", "scopes", "key_id"):
            clean[key] = "[set]"
        else:
            clean[key] = value
    return clean


def audit(action: str, *, outcome: str = "success", request: Any = None, actor: Any = None,
          actor_name: str = "", target: str = "", details: dict[str, Any] | None = None, door: str = "",
          coalesce: str = "") -> None:
    """Record one event (see the module docstring). `actor` is a user (default: the request's, if logged in);
    `actor_name` the username tried when there is no user (a failed login). `coalesce`: the refusal's code, to
    count like events of the minute in one row."""
    if action not in ACTIONS or outcome not in OUTCOMES:
        raise ValueError(f"Unknown audit action or outcome: {action!r}, {outcome!r}")
    if actor is None and request is not None:
        user = getattr(request, "user", None)
        actor = user if user is not None and getattr(user, "is_authenticated", False) else None
    ip = ""
    if request is not None and _client_ip[0] is not None:
        try:
            ip = _client_ip[0](request)
        except Exception:  # a boundary: an address we cannot read is left empty
            ip = ""
    meta = getattr(request, "META", {}) if request is not None else {}
    event = {
        "action": action, "outcome": outcome,
        "actor_id": getattr(actor, "pk", None), "actor": getattr(actor, "username", "") or actor_name[:150],
        "ip": ip, "user_agent": str(meta.get("HTTP_USER_AGENT", ""))[:256],
        "door": door or _door(request), "target": str(target)[:200], "details": _scrub(details or {}),
    }
    level = logging.INFO
    if coalesce:
        bucket = event["bucket"] = bucket_of(event, coalesce)
        level = logging.INFO if _first_here(bucket) else logging.DEBUG
    # One JSON line per event in any log format (AGENTSITE_LOG_FORMAT=json adds it as the field `audit` too).
    logger.log(level, "%s", json.dumps(event, default=str, sort_keys=True), extra={"audit": event})
    store = _store[0]
    if store is None:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        loop = None
    if loop is not None:  # on an event loop (an async door): the row is written on a thread, off the loop
        loop.run_in_executor(None, _stored_off_loop, store, event)
        return
    try:
        store(event)
    except Exception:  # a boundary: the audit row's failure must not undo the action
        _problems.exception("The audit event %s could not be stored", action)


def bucket_of(event: dict[str, Any], code: str, minute: int | None = None) -> str:
    """The key that like events of one minute share: a digest of action, outcome, actor, client address,
    target, code and the minute."""
    minute = int(time.time() // 60) if minute is None else minute
    parts = (event["action"], event["outcome"], event["actor_id"], event["ip"], event["target"], code, minute)
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


_logged: set[str] = set()
_logged_minute = [0]
_logged_lock = threading.Lock()


def _first_here(bucket: str) -> bool:
    """True for the first sighting of `bucket` in this process this minute (its log line at INFO)."""
    minute = int(time.time() // 60)
    with _logged_lock:
        if _logged_minute[0] != minute or len(_logged) > 10_000:
            _logged.clear()
            _logged_minute[0] = minute
        if bucket in _logged:
            return False
        _logged.add(bucket)
        return True


def _stored_off_loop(store: Callable[[dict[str, Any]], None], event: dict[str, Any]) -> None:
    try:
        store(event)
    except Exception:  # a boundary: as above
        _problems.exception("The audit event %s could not be stored", event["action"])
    finally:
        connection.close()
