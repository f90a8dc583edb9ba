"""manage.py recover: the start-up work of every facet (serve runs it; so must a deployment, once per start)."""

from __future__ import annotations

from django.core.management.base import BaseCommand

from agentsite.core.startup import run_start_hooks


class Command(BaseCommand):
    help = "Run the facets' start-up recovery: runs left `running` by a stopped service are marked `error`."

    def handle(self, *args, **options) -> None:
        for name, result in run_start_hooks().items():
            self.stdout.write(f"agentsite: {name}: {result}")
