"""The file cache of a deployment without Redis (agentsite/core/filecache.py): counts made by concurrent
writers add up, `add` stores once, and an increment keeps the entry's expiry. Each writer opens the lock file
itself, as another process would (flock locks belong to an open file, not to a process)."""

from __future__ import annotations

import threading
import time

from agentsite.core.filecache import SharedFileCache


def _cache(tmp_path) -> SharedFileCache:
    return SharedFileCache(str(tmp_path / "cache"), {"OPTIONS": {"MAX_ENTRIES": 10_000}})


def test_concurrent_increments_add_up(tmp_path):
    cache = _cache(tmp_path)
    cache.add("count", 0, timeout=60)
    start = threading.Barrier(8)

    def count() -> None:
        mine = _cache(tmp_path)  # its own instance, as each worker process has
        start.wait()
        for _ in range(50):
            mine.incr("count")

    threads = [threading.Thread(target=count) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert cache.get("count") == 400


def test_add_stores_for_exactly_one_of_racing_writers(tmp_path):
    start = threading.Barrier(8)
    stored: dict[int, bool] = {}

    def add(index: int) -> None:
        mine = _cache(tmp_path)
        start.wait()
        stored[index] = mine.add("first", index, timeout=60)

    threads = [threading.Thread(target=add, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [index for index, won in stored.items() if won]
    assert len(winners) == 1, stored
    assert _cache(tmp_path).get("first") == winners[0]


def test_an_increment_keeps_the_expiry_and_a_missing_key_raises(tmp_path):
    cache = _cache(tmp_path)
    cache.add("window", 1, timeout=1)
    assert cache.incr("window", 2) == 3
    assert cache.decr("window") == 2
    deadline = time.monotonic() + 3
    while cache.get("window") is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert cache.get("window") is None  # expired on time: not pushed to the 300 s default by the increments
    try:
        cache.incr("window")
    except ValueError:
        pass
    else:
        raise AssertionError("incr of a missing key must raise ValueError, as Django's caches do")
