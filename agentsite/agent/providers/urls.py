"""An upstream's base URL: the endpoint URLs built from it, its credentials, and the form it is shown in.

A base URL may carry credentials: a `user:password@` (sent as HTTP Basic auth, never left in the URL the
request goes to) and query values (a gateway's `?key=`, kept after the path on every request). The invariant:
a base URL is only ever shown (errors, the API, the admin, logs) through `mask_url`, which replaces the
password (or a lone user name) and every query value with `***`.
"""

from __future__ import annotations

import base64
import functools
import urllib.parse

MASK = "***"


def _split(url: str) -> urllib.parse.SplitResult | None:
    try:
        return urllib.parse.urlsplit(url)
    except ValueError:  # e.g. an unbalanced IPv6 bracket
        return None


def _host(netloc: str) -> str:
    return netloc.rpartition("@")[2]


def mask_url(url: str) -> str:
    """`url` as it may be shown: `user:***@host` (`***@host` for a user name alone, often a token) and
    `?name=***` for every query value; a URL that does not parse is shown as `***`."""
    if not url:
        return url
    parts = _split(url)
    if parts is None:
        return MASK
    netloc = parts.netloc
    if "@" in netloc:
        user, colon, _ = netloc.rpartition("@")[0].partition(":")
        netloc = f"{user}:{MASK}@{_host(netloc)}" if colon else f"{MASK}@{_host(netloc)}"
    query = "&".join(_masked_pair(pair) for pair in parts.query.split("&")) if parts.query else ""
    return urllib.parse.urlunsplit((parts.scheme, netloc, parts.path, query, MASK if parts.fragment else ""))


def _masked_pair(pair: str) -> str:
    name, equals, value = pair.partition("=")
    if not equals:
        return MASK if name else ""
    return f"{name}={MASK if value else ''}"


def unmask_url(given: str, stored: str) -> str:
    """`given` with each `***` that stands where `mask_url(stored)` put one replaced by what `stored` holds there
    (the password of the same user, the value of the same query parameter, in order): a URL sent back as it was
    shown, or edited around its masked parts, keeps the stored credentials (as an edit that leaves the API key
    out keeps the key). A `***` with nothing stored behind it stays as sent."""
    if MASK not in given or not stored:
        return given
    new, old = _split(given), _split(stored)
    if new is None or old is None:
        return given
    netloc = _unmasked_netloc(new.netloc, old.netloc)
    stored_values: dict[str, list[str]] = {}
    for pair in old.query.split("&") if old.query else ():
        name, equals, value = pair.partition("=")
        stored_values.setdefault(name if equals else "", []).append(value if equals else name)
    pairs = []
    for pair in new.query.split("&") if new.query else ():
        name, equals, value = pair.partition("=")
        key, shown = (name, value) if equals else ("", name)
        if shown == MASK and stored_values.get(key):
            shown = stored_values[key].pop(0)
        pairs.append(f"{name}={shown}" if equals else shown)
    fragment = old.fragment if new.fragment == MASK and old.fragment else new.fragment
    return urllib.parse.urlunsplit((new.scheme, netloc, new.path, "&".join(pairs), fragment))


def _unmasked_netloc(new: str, old: str) -> str:
    if "@" not in new or "@" not in old:
        return new
    new_user, new_colon, new_password = new.rpartition("@")[0].partition(":")
    old_user, old_colon, old_password = old.rpartition("@")[0].partition(":")
    if new_colon and old_colon and new_password == MASK and new_user == old_user:
        return f"{new_user}:{old_password}@{_host(new)}"
    if not new_colon and not old_colon and new_user == MASK:
        return f"{old_user}@{_host(new)}"
    return new


@functools.lru_cache(maxsize=256)  # every request builds its endpoint: parse a base URL once
def join_url(base: str, path: str, *, drop_suffix: str = "") -> str:
    """The endpoint `path` under `base`: joined onto the base's path (less `drop_suffix`, when it ends with it),
    the base's query kept after it, its userinfo and fragment left out (see `basic_auth`)."""
    parts = _split(base)
    if parts is None:
        return base.rstrip("/") + "/" + path.lstrip("/")
    root = parts.path.rstrip("/")
    if drop_suffix and root.endswith(drop_suffix):
        root = root[: -len(drop_suffix)]
    return urllib.parse.urlunsplit((parts.scheme, _host(parts.netloc), f"{root}/{path.lstrip('/')}", parts.query, ""))


@functools.lru_cache(maxsize=256)
def basic_auth(base: str) -> str | None:
    """The `Authorization: Basic` value a base URL's `user:password@` stands for (None: it has none)."""
    parts = _split(base)
    if parts is None or "@" not in parts.netloc:
        return None
    user, _, password = parts.netloc.rpartition("@")[0].partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    return "Basic " + base64.b64encode(pair.encode()).decode("ascii")


def has_userinfo(url: str) -> bool:
    parts = _split(url)
    return parts is not None and "@" in parts.netloc


@functools.lru_cache(maxsize=256)
def url_secrets(url: str) -> tuple[str, ...]:
    """What of `url` must never appear in a message: the password (or a lone user name), every query value,
    each as written and decoded, and the Basic auth value they make."""
    parts = _split(url)
    if parts is None:
        return (url,) if url else ()
    found: list[str] = []
    if "@" in parts.netloc:
        user, colon, password = parts.netloc.rpartition("@")[0].partition(":")
        found += [password, urllib.parse.unquote(password)] if colon else [user, urllib.parse.unquote(user)]
        found.append((basic_auth(url) or "").removeprefix("Basic "))
    for pair in parts.query.split("&") if parts.query else ():
        name, equals, value = pair.partition("=")
        value = value if equals else name
        found += [value, urllib.parse.unquote_plus(value)]
    return tuple(secret for secret in dict.fromkeys(found) if secret)


def credentials_problem(provider: str, base_url: str, api_key: str) -> str | None:
    """Why a connection's credentials cannot all be sent (None: they can). An `openai` connection's key is a
    Bearer token in the Authorization header, where a base URL's `user:password@` (Basic auth) goes too; an
    `anthropic` key has a header of its own."""
    if provider == "openai" and api_key and has_userinfo(base_url):
        return ("A user:password@ in the base URL is sent as HTTP Basic auth and an openai connection's API key as "
                "a Bearer token: both are the Authorization header. Give one of them (a gateway's own key can go "
                "in headers).")
    return None
