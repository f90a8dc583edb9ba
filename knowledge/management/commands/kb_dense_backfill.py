"""manage.py kb_dense_backfill: dense vectors for the chunks stored before the dense model was installed."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from knowledge import dense, services


class Command(BaseCommand):
    help = ("Embed, with the dense model (the `dense` extra), the knowledge-base chunks that have no dense vector "
            "yet: those stored before the model was installed. Safe to run while the server runs, and again.")

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", help="Only the documents of the collections this user owns (a username).")

    def handle(self, *args, user: str | None = None, **options) -> None:
        if not dense.available():
            raise CommandError(f"The dense embedding model is not installed ({dense.INSTALL_HINT}), "
                               "or AGENTSITE_KB_DENSE is false.")
        owner_id = None
        if user:
            owner = get_user_model().objects.filter(username=user).first()
            if owner is None:
                raise CommandError(f"No user named {user!r}.")
            owner_id = owner.pk
        verbosity = options.get("verbosity", 1)

        def progress(document_id, filled: int) -> None:
            if verbosity > 1:
                self.stdout.write(f"{document_id}: {filled} chunks")

        documents, chunks = services.dense_backfill(owner_id=owner_id, on_document=progress)
        self.stdout.write(f"Dense vectors ({dense.MODEL_NAME}) added to {chunks} chunks of {documents} documents.")
