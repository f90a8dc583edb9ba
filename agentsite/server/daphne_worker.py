"""A daphne worker process: `python -m agentsite.server.daphne_worker [daphne's options] agentsite.asgi:application`.

`serve` starts each HTTP worker with this instead of `python -m daphne`; the tests' live servers do too. It is
daphne's own command line, on the event loop AGENTSITE_EVENT_LOOP names:

- `uvloop` (the default): libuv's loop (the uvloop package). A streamed reply is a wake-up of this process
  per upstream read; uvloop does the loop's part of each (epoll, callbacks, socket calls) in C
  (bench/RESULTS.md has the figures).
- `asyncio`: the standard library's selector loop, as `python -m daphne` runs. Also what a platform without
  uvloop gets, with a warning.

Connections: `serve --workers N` runs N of these on one listening socket, and each takes **one connection per
wake-up** (`accept_one_at_a_time`). Twisted's listening port accepts up to 100 at a time, and more the more it
finds: the first worker to wake took most of a burst (seen: 91/37, 128/0 of 128 kept-alive connections), and
kept-alive connections stay where they landed. One at a time, a busy worker takes its next connection only
after the rest of its loop's turn, so the others get a share of a burst. The split is closer, not even (on
average 16 connections of 128 off an even split, against 29: bench/RESULTS.md): a worker already running
still accepts before an idle one has woken.

Contract: the loop is chosen before anything imports daphne's server module. daphne makes its loop (and
installs Twisted's asyncio reactor on it) when that module is first imported, with whatever policy is set
then; a policy set later would change nothing. `event_loop_choice()` is the one reader of the variable, so
`serve` (through the settings) refuses a bad value before it starts a worker that would refuse it in turn.
"""

from __future__ import annotations

import asyncio
import os
import sys

from agentsite.core.env import env_str

EVENT_LOOPS = ("uvloop", "asyncio")


def event_loop_choice() -> str:
    """AGENTSITE_EVENT_LOOP, checked: one of EVENT_LOOPS (default the first)."""
    from django.core.exceptions import ImproperlyConfigured

    choice = env_str("AGENTSITE_EVENT_LOOP", EVENT_LOOPS[0]).strip().lower()
    if choice not in EVENT_LOOPS:
        raise ImproperlyConfigured(f"AGENTSITE_EVENT_LOOP must be {' or '.join(EVENT_LOOPS)} (got {choice!r}).")
    return choice


def install_event_loop(choice: str) -> str:
    """Make `choice` the loop that asyncio.new_event_loop() gives from now on, in this process; returns the
    loop installed (`asyncio` where uvloop cannot be imported)."""
    if choice == "uvloop":
        try:
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
    from twisted.internet import tcp

    tcp.Port.numberAccepts = property(lambda port: 1, lambda port, value: None)  # type: ignore[assignment]


def no_websocket_accelerator() -> None:
    """autobahn (daphne's WebSocket layer) without its native UTF-8 validator and XOR masker, unless the
    environment asks (AUTOBAHN_USE_NVX, autobahn's own switch). Loading them parses C declarations with cffi's
    pycparser at import: ~80 ms of CPU for every worker start. agentsite serves no WebSocket (an upgrade is
    refused at the handshake, agentsite/server/asgi_limits.py), so nothing runs them."""
    os.environ.setdefault("AUTOBAHN_USE_NVX", "0")


def main() -> None:
    if "daphne.server" in sys.modules:  # the contract above: too late to choose
        raise RuntimeError("daphne's server module was imported before the event loop was chosen")
    loop = install_event_loop(event_loop_choice())
    accept_one_at_a_time()
    no_websocket_accelerator()
    print(f"agentsite: HTTP worker {os.getpid()} on the {loop} event loop", file=sys.stderr, flush=True)
    from daphne.cli import CommandLineInterface

    CommandLineInterface.entrypoint()


if __name__ == "__main__":
    main()
