"""Run a fake upstream on its own: `python -m tests.fakes openai|anthropic [--port N]`.

It prints its base URL and answers with Echo until stopped (Ctrl-C / SIGTERM); script it over HTTP with
POST /_fake/script (see tests/fakes/llm.py).
"""

from __future__ import annotations

import argparse
import signal
import threading

from tests.fakes.llm import Echo, FakeAnthropic, FakeOpenAI


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("kind", choices=["openai", "anthropic"])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    fake = (FakeOpenAI if args.kind == "openai" else FakeAnthropic)(port=args.port, default_reply=Echo())
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    with fake:
        print(fake.base_url, flush=True)
        stop.wait()


if __name__ == "__main__":
    main()
