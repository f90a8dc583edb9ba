"""A remote agent's card: fetched through the guard (no redirect, at most MAX_CARD_BYTES, CARD_TIMEOUT_S), read
with a2a-sdk's own parser and types, and checked to name an interface this client speaks.

The stored card is the SDK's AgentCard as A2A 1.0 JSON (a 0.3 card is read into 1.0 fields, its interface
keeping protocolVersion 0.3, so calls use the SDK's 0.3 transport). The SDK's client imports starlette
(as its server side does): this module is imported on first use, never at start-up.
"""

from __future__ import annotations

import json
import logging
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from a2a.client.card_resolver import parse_agent_card
from a2a.types import AgentCard
from a2a.utils.constants import AGENT_CARD_WELL_KNOWN_PATH, TransportProtocol
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError

from a2a_app.guard import RemoteRefused, guarded_client, url_pinned
from agentsite.core.errors import AppError

logger = logging.getLogger(__name__)

MAX_CARD_BYTES = 256 * 1024
CARD_TIMEOUT_S = 15.0
# The bindings the SDK's client speaks over plain HTTP (gRPC would need a channel of its own).
BINDINGS = (TransportProtocol.JSONRPC.value, TransportProtocol.HTTP_JSON.value)


def card_url_for(url: str) -> str:
    """The URL the card is read from: `url` itself when its path ends in `.json` (a card URL), else the
    well-known path under its path, its query kept (a base URL: `https://host/agents/x?k=1` ->
    `https://host/agents/x/.well-known/agent-card.json?k=1`); a fragment is never sent."""
    parts = urlsplit(url)
    if parts.path.endswith(".json"):
        return urlunsplit(parts._replace(fragment=""))
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + AGENT_CARD_WELL_KNOWN_PATH, fragment=""))


async def card_fetch(url: str, *, headers: dict[str, str]) -> dict[str, Any]:
    """The remote's card as stored (1.0 JSON), read from `card_url_for(url)` with `headers`.

    Raises AppError 400 `invalid` (the guard refused the URL or the card's interface URL; details `url`), 502
    `remote_unreachable` (connect error, timeout, a status other than 200, a body over MAX_CARD_BYTES), 422
    `card_invalid` (not JSON, not an agent card, no name, no interface over JSONRPC or HTTP+JSON).
    """
    target = card_url_for(url)
    body = await _get(target, headers)
    card = card_parsed(body, target)
    await _check_interface(card)
    return MessageToDict(card)


def card_loaded(stored: dict[str, Any]) -> AgentCard:
    """The stored card as the SDK's AgentCard (it was checked when stored)."""
    return ParseDict(stored, AgentCard(), ignore_unknown_fields=True)


async def _get(target: str, headers: dict[str, str]) -> bytes:
    try:
        async with guarded_client(headers=headers, timeout=CARD_TIMEOUT_S) as client, \
                client.stream("GET", target, headers={"Accept": "application/json"}) as response:
            if response.status_code != 200:
                raise _unreachable(target, f"it answered HTTP {response.status_code}"
                                           + (" (redirects are not followed)" if response.is_redirect else ""))
            body = bytearray()
            async for chunk in response.aiter_bytes():
                body += chunk
                if len(body) > MAX_CARD_BYTES:
                    raise _unreachable(target, f"the card is larger than {MAX_CARD_BYTES // 1024} KiB")
            return bytes(body)
    except RemoteRefused as exc:
        raise AppError("invalid", str(exc), 400, {"url": [str(exc)]}) from None
    except httpx.TimeoutException:
        raise _unreachable(target, f"no answer within {CARD_TIMEOUT_S:g} s") from None
    except httpx.HTTPError as exc:
        raise _unreachable(target, f"{type(exc).__name__}: {exc}") from None


def card_parsed(body: bytes, target: str = "the card") -> AgentCard:
    """The SDK's AgentCard read from a card's JSON. Raises AppError 422 `card_invalid` saying why."""
    try:
        data = json.loads(body)
        card = parse_agent_card(data)
    except (ValueError, ParseError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise _card_invalid(target, f"{exc}") from None
    if not card.name:
        raise _card_invalid(target, "it has no name")
    if not any(interface.protocol_binding in BINDINGS for interface in card.supported_interfaces):
        raise _card_invalid(target, "it names no interface over JSONRPC or HTTP+JSON (supportedInterfaces, or a "
                                    "0.3 card's url)")
    return card


async def _check_interface(card: AgentCard) -> None:
    """The interface calls will use must be http(s) and pass the guard now (it is checked again on every call)."""
    interface = next(item for item in card.supported_interfaces if item.protocol_binding in BINDINGS)
    try:
        url = httpx.URL(interface.url)
    except httpx.InvalidURL:
        url = None
    if url is None or url.scheme not in ("http", "https") or not url.host:
        raise _card_invalid(interface.url or "the card", "its interface URL is not an http(s) URL")
    try:
        await url_pinned(url)
    except RemoteRefused as exc:
        message = f"The card's interface {interface.url}: {exc}"
        raise AppError("invalid", message, 400, {"url": [message]}) from None


def _unreachable(target: str, why: str) -> AppError:
    return AppError("remote_unreachable", f"Could not read the agent card at {target}: {why}.", 502,
                    {"url": [why]})


def _card_invalid(target: str, why: str) -> AppError:
    return AppError("card_invalid", f"{target} is not an A2A agent card: {why}.", 422, {"url": [why]})
