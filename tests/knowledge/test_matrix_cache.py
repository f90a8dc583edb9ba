"""The in-memory matrix stays correct when another process writes to the same database."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote

import pytest
from django.conf import settings
from django.db import connection

from knowledge import index, services
from knowledge.selectors import chunk_search

pytestmark = pytest.mark.django_db(transaction=True)  # the other process must see committed rows

MOON = "The Moon orbits the Earth every 27 days. Astronauts of Apollo 11 first landed on the Moon in 1969."
BREAD = "To bake bread, mix flour, water, yeast and salt. Knead the dough, let it rise, then bake it hot."
OTHER_PROCESS = """
import sys
from knowledge import services
from knowledge.models import Document
owner_id, action, argument = int(sys.argv[1]), sys.argv[2], sys.argv[3]
if action == "add":
    filename, content = argument.split("|", 1)
    print(services.document_ingest(owner_id=owner_id, filename=filename, content=content).pk)
elif action == "delete":
    services.document_delete(owner_id=owner_id, document_id=Document.objects.get(filename=argument).pk)
elif action == "clear":
    services.documents_clear(owner_id=owner_id)
"""


def database_url_for_other_processes() -> str:
    """The URL of the database this test runs on (the test database), for another process."""
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{Path(db['NAME']).resolve()}"
    credentials = quote(db["USER"]) + (f":{quote(db['PASSWORD'])}" if db["PASSWORD"] else "")
    return f"postgres://{credentials}@{db['HOST'] or 'localhost'}:{db['PORT'] or 5432}/{quote(db['NAME'])}"


def in_another_process(owner_id: int, action: str, argument: str = "") -> str:
    env = {**os.environ, "DATABASE_URL": database_url_for_other_processes(),
           "AGENTSITE_DATA_DIR": str(settings.DATA_DIR), "DJANGO_SETTINGS_MODULE": "agentsite.settings"}
    script = "import django; django.setup()\n" + OTHER_PROCESS
    result = subprocess.run([sys.executable, "-c", script, str(owner_id), action, argument], env=env,
                            cwd=settings.BASE_DIR, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, f"the other process failed: {result.stderr}"
    return result.stdout.strip()


def filenames(owner_id: int, query: str) -> list[str]:
    return [hit.filename for hit in chunk_search(owner_id=owner_id, query=query, top_k=10)]


@pytest.mark.e2e
def test_search_sees_adds_deletes_and_clears_made_by_another_process(owner, monkeypatch):
    reads = []
    real_chunk_rows = index._chunk_rows
    monkeypatch.setattr(index, "_chunk_rows", lambda owner_id, documents, *rest: reads.append(documents) or
                        real_chunk_rows(owner_id, documents, *rest))

    services.document_ingest(owner_id=owner.pk, filename="moon.txt", content=MOON)
    assert filenames(owner.pk, "Moon astronauts") == ["moon.txt"]
    built = index.cached_matrix(owner.pk)
    assert filenames(owner.pk, "Apollo") == ["moon.txt"]
    assert index.cached_matrix(owner.pk) is built, "an unchanged matrix was rebuilt"

    bread_id = in_another_process(owner.pk, "add", f"bread.txt|{BREAD}")
    assert filenames(owner.pk, "knead the bread dough")[0] == "bread.txt"
    assert index.cached_matrix(owner.pk).size == 2
    assert reads == [None, {uuid.UUID(bread_id)}], "the refresh read more than the new document's chunks"

    in_another_process(owner.pk, "delete", "moon.txt")
    assert "moon.txt" not in filenames(owner.pk, "Moon astronauts")
    assert filenames(owner.pk, "bread") == ["bread.txt"]

    in_another_process(owner.pk, "clear")
    assert filenames(owner.pk, "bread") == []
    assert index.cached_matrix(owner.pk).size == 0
    assert reads[2:] == [set(), set()], "a deletion elsewhere made this process read chunks again"


def test_writes_in_this_process_patch_the_matrix_without_a_rebuild(owner, monkeypatch):
    services.document_ingest(owner_id=owner.pk, filename="moon.txt", content=MOON)
    assert filenames(owner.pk, "Moon") == ["moon.txt"]
    refreshes = []
    real_refresh = index._matrix_refresh
    monkeypatch.setattr(index, "_matrix_refresh", lambda *args: refreshes.append(args) or real_refresh(*args))

    bread = services.document_ingest(owner_id=owner.pk, filename="bread.txt", content=BREAD)
    assert filenames(owner.pk, "bread dough") == ["bread.txt"]
    services.document_delete(owner_id=owner.pk, document_id=bread.pk)
    assert "bread.txt" not in filenames(owner.pk, "bread dough")
    assert filenames(owner.pk, "Moon") == ["moon.txt"]
    services.documents_clear(owner_id=owner.pk)
    assert filenames(owner.pk, "Moon") == []
    assert refreshes == [], "a write in this process made the matrix read the database"


@pytest.mark.e2e
def test_search_stays_correct_when_writes_here_and_elsewhere_interleave(owner):
    services.document_ingest(owner_id=owner.pk, filename="moon.txt", content=MOON)
    assert filenames(owner.pk, "Moon") == ["moon.txt"]
    in_another_process(owner.pk, "add", f"bread.txt|{BREAD}")  # this process's matrix is now one write behind
    services.document_ingest(owner_id=owner.pk, filename="moon2.txt", content=MOON)
    assert sorted(filenames(owner.pk, "Moon astronauts bread")) == ["bread.txt", "moon.txt", "moon2.txt"]
    assert index.cached_matrix(owner.pk).size == 3


@pytest.mark.e2e
def test_an_owner_with_no_chunks_is_answered_without_ranking_until_another_process_adds_one(owner, monkeypatch):
    """A chat turn asks the knowledge base on every message: an owner known (from a current cached matrix) to
    have no chunks is answered from one stamp read; a document added by another process still shows."""
    from knowledge import ranking

    fused = []
    real_fuse = ranking.fuse
    monkeypatch.setattr(ranking, "fuse", lambda *args, **kwargs: fused.append(args) or real_fuse(*args, **kwargs))
    services.collection_personal(owner.pk)  # (before it exists, a search has nothing to rank)
    assert filenames(owner.pk, "Moon astronauts") == []  # nothing cached yet: the rankers look, and cache it
    assert fused and index.cached_matrix(owner.pk).size == 0
    fused.clear()
    assert filenames(owner.pk, "Moon astronauts") == []
    assert fused == [], "an owner known to have no chunks was ranked"

    in_another_process(owner.pk, "add", f"moon.txt|{MOON}")
    assert filenames(owner.pk, "Moon astronauts") == ["moon.txt"]
