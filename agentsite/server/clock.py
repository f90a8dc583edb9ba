"""manage.py clock: the loops one host runs beside its task cluster (the scheduler's timer), for a deployment
that starts the pieces itself; `serve` runs them on threads of its own (agentsite.core.startup)."""

from __future__ import annotations

import signal
import threading

from django.core.management.base import BaseCommand

from agentsite.core.startup import service_loops_start


class Command(BaseCommand):
    help = "Run the service loops (the scheduler's timer) until SIGINT/SIGTERM: one a host, beside qcluster."

    def handle(self, *args, **options) -> None:
        stopping = threading.Event()
        signal.signal(signal.SIGINT, lambda *_: stopping.set())
        signal.signal(signal.SIGTERM, lambda *_: stopping.set())
        loops = service_loops_start()
        self.stdout.write("agentsite: clock running (Ctrl-C stops)")
        while not stopping.wait(0.5):
            pass
        loops.stop()
        self.stdout.write("agentsite: clock stopped.")
