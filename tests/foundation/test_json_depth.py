"""The JSON depth check (agentsite.core.jsonbody.json_too_deep) gives the answer of the plain scan it replaced, on
bodies with strings, escapes, brackets inside strings and unterminated strings, and stays cheap on a 10 MB body
of tiny objects (it runs on the event loop, before every JSON body is handed on)."""

from __future__ import annotations

import json
import random
import re
import time

from agentsite.core.jsonbody import MAX_JSON_DEPTH, json_too_deep

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


def _reference(raw: bytes, limit: int) -> bool:
    depth = 0
    for byte in _STRING.sub(b"", raw):
        if byte in b"[{":
            depth += 1
            if depth > limit:
                return True
        elif byte in b"]}":
            depth -= 1
    return False


def _random_body(rng: random.Random) -> bytes:
    """Brackets and strings, the strings holding brackets, escaped quotes and backslashes. Backslashes only
    inside strings and every string closed, as in any JSON (otherwise the body is malformed, a 400 whatever
    the depth check says)."""
    inside = [b"a", b"[", b"]", b"{", b"}", b'\\"', b"\\\\", b"\\n", b" "]
    outside = [b"[", b"]", b"{", b"}", b":", b",", b"1", b" "]
    parts = []
    for _ in range(rng.randint(0, 200)):
        if rng.random() < 0.3:
            parts.append(b'"' + b"".join(rng.choice(inside) for _ in range(rng.randint(0, 6))) + b'"')
        else:
            parts.append(rng.choice(outside))
    return b"".join(parts)


def test_the_depth_check_agrees_with_a_plain_scan_on_random_bodies():
    rng = random.Random(41)
    for _ in range(5000):
        raw = _random_body(rng)
        for limit in (0, 1, 2, 5):
            assert json_too_deep(raw, limit) == _reference(raw, limit), (raw, limit)
    # An unterminated string counts its brackets (its end is unknown), at and past the limit.
    assert json_too_deep(b'["a", "b' + b"[" * 99) is False
    assert json_too_deep(b'["a", "b' + b"[" * 100) is True


def test_the_depth_check_agrees_past_the_vectorised_threshold():
    flat = json.dumps({"messages": [{"role": "user", "content": "x[{"} for _ in range(5000)]}).encode()
    assert json_too_deep(flat) is False and _reference(flat, MAX_JSON_DEPTH) is False
    nested = b"[" * 50 + flat + b"]" * 50
    for limit in (51, 52, 53):
        assert json_too_deep(nested, limit) == _reference(nested, limit), limit
    deep = b"[1," * 5000 + b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1) + b"]" * 5000
    assert json_too_deep(deep) is True


def test_a_10_mb_body_of_tiny_objects_is_checked_in_well_under_a_second():
    one = {"role": "user", "content": "x"}
    raw = json.dumps({"messages": [one] * (10 * 1024 * 1024 // 32)}).encode()
    json_too_deep(raw[:200_000] + b"]}")  # numpy's import is not what is measured
    started = time.thread_time()
    assert json_too_deep(raw) is False
    # CPU seconds (a loaded machine slows them little): ~0.03 s here; the plain scan it replaced took ~0.4.
    assert time.thread_time() - started < 0.2
