"""Knowledge base benchmark: ingest throughput, and search latency beside the bare NumPy floor.

    /work/venv/bin/python bench/kb.py [--ingest-mb 10] [--queries 300]
    /work/venv/bin/python bench/kb.py --collections 20 [--chunks 100000] [--queries 300]

Sets Django up on its own temporary data directory and SQLite database (DATABASE_URL and REDIS_URL are
ignored; `--database-url postgres://...` runs on that PostgreSQL database instead, its bench users replaced),
with the dense model off (AGENTSITE_KB_DENSE=false: the default install), generates a corpus of
Zipf-distributed pseudo-words in sentences and paragraphs, and measures:

- ingest: MB (10^6 bytes of UTF-8 text) per second through `document_ingest` (chunk, embed, store), cold
  word-hash cache included;
- search: p50/p99 of `chunk_search` (top 5) in mode `vector` at 10,000 and 100,000 chunks, each beside the
  floor: the same matrix times the query vector plus `argpartition`, with nothing else; and p50/p99 of the
  modes `vector`, `lexical` (FTS5 BM25) and `hybrid` (both, fused: the default) over the same queries, as wall
  time and as this thread's CPU time (run with OPENBLAS_NUM_THREADS=1 so a search is one thread's work: its CPU
  time is then what it takes on an idle core, a figure a shared machine does not distort).

With `--collections N`: one user's `--chunks` chunks in one collection, and as many again in N collections of
`--chunks / N` each (the same corpus); then, per mode, `chunk_search` (top 5) over the one collection, over all
N at once (one ranking: each ranker's best of each collection, merged, fused) and over one of the N, the three
interleaved query by query, as wall and CPU p50/p99, and the ratio N collections ÷ one (target <= 1.5x).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT_CHARS = 250_000  # ~500 chunks per document


def setup_django(data_dir: str, database_url: str | None = None) -> None:
    sys.path.insert(0, str(ROOT))
    os.environ["AGENTSITE_DATA_DIR"] = data_dir
    os.environ["AGENTSITE_LOG_LEVEL"] = "WARNING"
    os.environ["AGENTSITE_KB_QUOTA_MB"] = "0"  # 100,000 chunks are more than one user's default quota
    os.environ["AGENTSITE_KB_DENSE"] = "false"  # the default install (bench/dense.py measures the model)
    os.environ.pop("DATABASE_URL", None)
    if database_url:
        os.environ["DATABASE_URL"] = database_url  # PostgreSQL: a database of its own, emptied first
    os.environ.pop("REDIS_URL", None)
    os.environ["DJANGO_SETTINGS_MODULE"] = "agentsite.settings"
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


class Corpus:
    """Deterministic English-like text: a 30,000-word vocabulary drawn with Zipf frequencies."""

    def __init__(self, seed: int = 1) -> None:
        self.rng = np.random.default_rng(seed)
        letters = np.array(list("etaoinshrdlucmfwypvbgkjqxz"))
        lengths = self.rng.integers(2, 11, size=30_000)
        self.vocabulary = np.array(["".join(self.rng.choice(letters, size=n)) for n in lengths])

    def words(self, count: int) -> np.ndarray:
        ranks = np.minimum(self.rng.zipf(1.2, size=count), len(self.vocabulary)) - 1
        return self.vocabulary[ranks]

    def document(self, chars: int) -> str:
        words = self.words(chars // 5)
        sentence_ends = np.cumsum(self.rng.integers(6, 25, size=len(words)))
        parts, start = [], 0
        for number, end in enumerate(sentence_ends):
            if start >= len(words):
                break
            sentence = " ".join(words[start:end])
            parts.append(sentence[:1].upper() + sentence[1:] + (".\n\n" if number % 6 == 5 else ". "))
            start = end
        return "".join(parts)[:chars]

    def query(self) -> str:
        return " ".join(self.words(int(self.rng.integers(3, 9))))


def user(name: str):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(username=name, password=None)


def ingest(owner_id: int, texts: list[str], collection=None) -> tuple[float, int]:
    """Seconds to ingest texts one document at a time (into the collection; None: the personal one), and the
    chunks made."""
    from knowledge.services import document_ingest

    chunks = 0
    started = time.perf_counter()
    for number, text in enumerate(texts):
        chunks += document_ingest(owner_id=owner_id, filename=f"doc{number}.txt", content=text,
                                  collection=collection).chunk_count
    return time.perf_counter() - started, chunks


def fill_to(owner_id: int, corpus: Corpus, chunks: int, collection=None) -> int:
    """Ingest documents for owner (into the collection; None: the personal one) until it has about `chunks`
    chunks; the last one is cut to fit."""
    from knowledge.models import Chunk

    made = 0
    while made < chunks:
        missing = chunks - made
        made += ingest(owner_id, [corpus.document(min(DOCUMENT_CHARS, missing * 450 + 50))], collection)[1]
    if collection is not None:
        return Chunk.objects.filter(document__collection=collection).count()
    return Chunk.objects.filter(document__owner_id=owner_id).count()


def percentiles(samples: list[float]) -> tuple[float, float]:
    values = np.array(samples) * 1000
    return float(np.percentile(values, 50)), float(np.percentile(values, 99))


def timed(function, *args) -> float:
    started = time.perf_counter()
    function(*args)
    return time.perf_counter() - started


def timed_cpu(function, *args) -> tuple[float, float]:
    """(wall, CPU of this thread) seconds: with one BLAS thread a search runs on this thread alone, so its CPU
    time is what it would take on an idle core, whatever else the shared machine runs."""
    started, cpu = time.perf_counter(), time.thread_time()
    function(*args)
    return time.perf_counter() - started, time.thread_time() - cpu


def bare_numpy_top5(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    scores = matrix @ vector
    return np.argpartition(scores, len(scores) - 5)[-5:]


def search_latency(owner_id: int, queries: list[str]) -> dict[str, float]:
    from knowledge import index
    from knowledge.embedding import embed
    from knowledge.selectors import chunk_search

    def search(query: str) -> None:
        chunk_search(owner_id=owner_id, query=query, top_k=5, mode="vector")

    build_s = timed(search, queries[0])  # the first search builds the matrix from the database
    matrix = index.cached_matrix(owner_id).vectors
    service: list[float] = []
    floor: list[float] = []
    for number, query in enumerate(queries):
        vector = embed(query)
        # Alternate which goes first: a BLAS call right after another one finds its threads still awake.
        if number % 2:
            floor.append(timed(bare_numpy_top5, matrix, vector))
            service.append(timed(search, query))
        else:
            service.append(timed(search, query))
            floor.append(timed(bare_numpy_top5, matrix, vector))
    (p50, p99), (floor50, floor99) = percentiles(service), percentiles(floor)
    figures = {"chunks": len(matrix), "build_s": build_s, "p50": p50, "p99": p99, "floor50": floor50,
               "floor99": floor99}
    for mode in ("vector", "lexical", "hybrid"):
        samples = [timed_cpu(partial(chunk_search, owner_id=owner_id, top_k=5, mode=mode, query=query))
                   for query in queries]
        figures[f"{mode}50"], figures[f"{mode}99"] = percentiles([wall for wall, _ in samples])
        figures[f"{mode}cpu50"], figures[f"{mode}cpu99"] = percentiles([cpu for _, cpu in samples])
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ingest-mb", type=float, default=10.0, help="size of the ingest corpus (MB)")
    parser.add_argument("--queries", type=int, default=300, help="searches timed at each size")
    parser.add_argument("--database-url", help="a PostgreSQL database to run on (its knowledge tables are "
                        "emptied first) instead of a temporary SQLite one")
    parser.add_argument("--collections", type=int, default=0,
                        help="time a search over this many collections against one (0: the ingest and search runs)")
    parser.add_argument("--chunks", type=int, default=100_000, help="chunks in all, with --collections")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="agentsite-bench-kb-")
    try:
        setup_django(data_dir, args.database_url)
        if args.database_url:
            from django.contrib.auth import get_user_model

            get_user_model().objects.filter(username__in=["ingest", "search10000", "search100000",
                                                          "collections"]).delete()
        if args.collections:
            run_collections(args.collections, args.chunks, args.queries)
        else:
            run(args.ingest_mb, args.queries)
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def run(ingest_mb: float, query_count: int) -> None:
    corpus = Corpus()
    texts = [corpus.document(DOCUMENT_CHARS) for _ in range(int(ingest_mb * 1e6 / DOCUMENT_CHARS) + 1)]
    total_bytes = sum(len(text.encode()) for text in texts)
    cpu = time.process_time()
    seconds, chunks = ingest(user("ingest").pk, texts)
    cpu = time.process_time() - cpu
    print(f"ingest: {total_bytes / 1e6:.1f} MB in {len(texts)} documents -> {chunks} chunks "
          f"in {seconds:.2f} s = {total_bytes / 1e6 / seconds:.1f} MB/s (target >= 5); process CPU {cpu:.2f} s "
          f"= {total_bytes / 1e6 / cpu:.1f} MB/s")

    queries = [corpus.query() for _ in range(query_count)]
    for size in (10_000, 100_000):
        owner = user(f"search{size}")
        fill_to(owner.pk, corpus, size)
        figures = search_latency(owner.pk, queries)
        print(f"search @ {figures['chunks']} chunks: chunk_search p50 {figures['p50']:.2f} ms, "
              f"p99 {figures['p99']:.2f} ms | floor (matvec + argpartition) p50 {figures['floor50']:.2f} ms, "
              f"p99 {figures['floor99']:.2f} ms | ratio p50 {figures['p50'] / figures['floor50']:.2f}x, "
              f"p99 {figures['p99'] / figures['floor99']:.2f}x | matrix build {figures['build_s']:.2f} s")
        for mode in ("vector", "lexical", "hybrid"):
            print(f"search @ {figures['chunks']} chunks, mode {mode}: wall p50 {figures[mode + '50']:.2f} ms, "
                  f"p99 {figures[mode + '99']:.2f} ms | CPU p50 {figures[mode + 'cpu50']:.2f} ms, "
                  f"p99 {figures[mode + 'cpu99']:.2f} ms" + (f" (target p50 <= {5 if size == 10_000 else 20} ms)"
                                                            if mode == "hybrid" else ""))


def run_collections(count: int, total: int, query_count: int) -> None:
    from knowledge.selectors import chunk_search
    from knowledge.services import collection_create

    owner = user("collections")
    one = collection_create(owner_id=owner.pk, name="one")
    started = time.perf_counter()
    chunks = fill_to(owner.pk, Corpus(), total, one)
    print(f"built: {chunks} chunks in one collection in {time.perf_counter() - started:.1f} s")
    corpus = Corpus()  # the same text again, cut into `count` collections
    many = [collection_create(owner_id=owner.pk, name=f"part{number}") for number in range(count)]
    started = time.perf_counter()
    chunks = sum(fill_to(owner.pk, corpus, total // count, collection) for collection in many)
    print(f"built: {chunks} chunks in {count} collections in {time.perf_counter() - started:.1f} s")

    queries = [corpus.query() for _ in range(query_count)]
    cases = {"one": [one], f"all {count}": many, f"one of the {count}": many[:1]}
    for mode in ("vector", "lexical", "hybrid"):
        for collections in cases.values():  # builds the matrices; the first search of each pays for it
            chunk_search(query=queries[0], top_k=5, mode=mode, collections=collections)
        samples: dict[str, list[tuple[float, float]]] = {name: [] for name in cases}
        for number, query in enumerate(queries):
            order = list(cases.items())
            for name, collections in order[number % 3:] + order[:number % 3]:  # rotate who goes first
                samples[name].append(timed_cpu(partial(chunk_search, query=query, top_k=5, mode=mode,
                                                       collections=collections)))
        figures = {}
        for name, taken in samples.items():
            (wall50, wall99), (cpu50, cpu99) = (percentiles([wall for wall, _ in taken]),
                                                percentiles([cpu for _, cpu in taken]))
            figures[name] = (wall50, cpu50)
            print(f"mode {mode}, {name} ({sum(len(c.documents.all()) for c in cases[name])} documents): wall p50 "
                  f"{wall50:.2f} ms, p99 {wall99:.2f} ms | CPU p50 {cpu50:.2f} ms, p99 {cpu99:.2f} ms")
        many_wall, many_cpu = figures[f"all {count}"]
        one_wall, one_cpu = figures["one"]
        print(f"mode {mode}: {count} collections / one at {total} chunks: wall p50 {many_wall / one_wall:.2f}x, "
              f"CPU p50 {many_cpu / one_cpu:.2f}x (target <= 1.5x)")


if __name__ == "__main__":
    main()
