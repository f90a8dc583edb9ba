"""A daphne worker process: `python -m agentsite.server.daphne_worker [daphne's options] agentsite.asgi:application`.

`serve` (and the tests' live servers) start each HTTP worker with this instead of `python -m daphne`: daphne's
own command line, on the event loop AGENTSITE_EVENT_LOOP names (`uvloop`, the default, or `asyncio`), and
accepting one connection per wake-up, so that the workers sharing a listening socket split a burst between them
instead of the first one awake taking most of it.

The loop is chosen before anything imports daphne's server module, which makes its loop on first import;
`event_loop_choice()` is the one reader of the variable, so `serve` refuses a bad value before starting a worker.
"""

from __future__ import annotations

import asyncio
import os
import sys

from django.core.exceptions import ImproperlyConfigured

from agentsite.core.env import env_str
from agentsite.server import heap

EVENT_LOOPS = ("uvloop", "asyncio")


def event_loop_choice() -> str:
    """AGENTSITE_EVENT_LOOP, checked: one of EVENT_LOOPS (default the first)."""
    choice = env_str("AGENTSITE_EVENT_LOOP", EVENT_LOOPS[0]).strip().lower()
    if choice not in EVENT_LOOPS:
        raise ImproperlyConfigured(f"AGENTSITE_EVENT_LOOP must be {' or '.join(EVENT_LOOPS)} (got {choice!r}).")
    return choice


def install_event_loop(choice: str) -> str:
    """Make `choice` the loop that asyncio.new_event_loop() gives from now on, in this process; returns the
    loop installed (`asyncio` where uvloop cannot be imported)."""
    if choice == "uvloop":
        try:
            # Optional: uvloop may be missing (then asyncio's loop).
            import uvloop
        except ImportError:
            print("agentsite: uvloop is not installed here; serving on asyncio's own event loop "
                  "(AGENTSITE_EVENT_LOOP=asyncio says so without this warning)", file=sys.stderr)
            return "asyncio"
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    return choice


def accept_one_at_a_time() -> None:
    """Every Twisted TCP listening port of this process accepts one connection per readiness of its socket.

    Twisted's `tcp.Port.doRead` accepts `self.numberAccepts` connections in a loop and adapts that number
    (100 to start, +20 after a full loop); here it reads 1 always and its adaptations are dropped
    (tests/foundation/test_dependency_hooks.py checks doRead still reads it)."""
    # Twisted's modules are imported after the reactor this worker chose is installed.
    from twisted.internet import tcp

    tcp.Port.numberAccepts = property(lambda port: 1, lambda port, value: None)  # type: ignore[assignment]


def no_websocket_accelerator() -> None:
    """autobahn (daphne's WebSocket layer) without its native UTF-8 validator and XOR masker, unless the
    environment asks (AUTOBAHN_USE_NVX, autobahn's own switch). Loading them parses C declarations with cffi's
    pycparser at import: ~80 ms of CPU for every worker start. agentsite serves no WebSocket (an upgrade is
    refused at the handshake, agentsite/server/asgi_limits.py), so nothing runs them."""
    os.environ.setdefault("AUTOBAHN_USE_NVX", "0")


def main(argv: list[str] | None = None) -> None:
    """daphne's command line with `argv` (default: this process's arguments); `serve` calls it in the
    workers it forks."""
    if "daphne.server" in sys.modules:  # the contract above: too late to choose
        raise RuntimeError("daphne's server module was imported before the event loop was chosen")
    heap.declare_server_process()
    loop = install_event_loop(event_loop_choice())
    accept_one_at_a_time()
    no_websocket_accelerator()
    print(f"agentsite: HTTP worker {os.getpid()} on the {loop} event loop", file=sys.stderr, flush=True)
    # Twisted's modules are imported after the reactor this worker chose is installed.
    from daphne.cli import CommandLineInterface

    CommandLineInterface().run(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    main()
