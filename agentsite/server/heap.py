"""The garbage collector's settings in a server process: the heap it starts with frozen, young objects
collected in larger batches.

A daphne worker starts with ~150,000 tracked objects (Django, the apps, their modules) that live as long as it
does. CPython's cyclic collector still walks all of them on every full collection: 70-140 ms with the request
under way paused (a p99 of tens of ms on a 2 ms request), and with the default thresholds (700, 10, 10) a
collection of some generation ran every few requests, about 0.24 ms of CPU per /v1 request in all
(bench/RESULTS.md, "The garbage collector in a server process").

`settle()` collects once, then freezes what is left (gc.freeze: those objects are never walked again, nor
collected, which is what objects that live for the whole process need), and raises the first generation's
threshold so that a collection runs every YOUNG_THRESHOLD net allocations instead of 700. Most of a
request's objects are freed by reference counting as soon as it ends, so fewer, larger young collections
walk about the same survivors each time: less work in all. Cyclic garbage is still collected, a little later.

Invariants (tests/foundation/test_heap.py):
- it applies to a server process only (daphne, as `serve` and the README start it), never to a process that
  merely imports the ASGI module (tests, management commands);
- after it, the startup heap is frozen and the thresholds are (YOUNG_THRESHOLD, 10, 10);
- it runs once per process (a second call changes nothing).
"""

from __future__ import annotations

import gc
import os
import sys

YOUNG_THRESHOLD = 7000  # measured: 0.24 -> 0.05 ms of collector time per /v1 request (bench/RESULTS.md)

_settled = False


def is_server_process() -> bool:
    """True in a daphne process: `python -m agentsite.server.daphne_worker …` (serve's workers, the tests' live
    servers), `python -m daphne …` or the `daphne` console script (a deployment that runs daphne itself)."""
    main = sys.modules.get("__main__")
    spec = getattr(main, "__spec__", None)
    if spec is not None and (spec.name == "agentsite.server.daphne_worker" or spec.name.partition(".")[0] == "daphne"):
        return True
    return os.path.basename(sys.argv[0] if sys.argv else "") == "daphne"


def settle() -> bool:
    """Freeze the startup heap and raise the young generation's threshold; returns whether it did (once)."""
    global _settled
    if _settled:
        return False
    _settled = True
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
    return True
