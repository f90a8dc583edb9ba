"""The dense model's signal: each owner's dense chunk vectors as a matrix, ranked by cosine similarity.

The matrix is kept like the hash vectors' (knowledge/index.py): labelled with the owner's stamp, patched after
this process's writes, in the same cache under the same byte budget. Only documents whose chunks all have a
dense vector are in it (`manage.py kb_dense_backfill` gives older chunks one). `DenseRanker` is registered when
the model is installed, so `hybrid` fuses three signals and `mode: "dense"` ranks by it alone; nothing loads the
model unless a search or an ingest asks for a dense vector.
"""

from __future__ import annotations

import numpy as np

from knowledge import dense, index, ranking

DENSE = index.Signal("dense", dense.DIMENSIONS, prefix="dense", complete_only=True)


def dense_rank(owner_id: int, query: str, k: int) -> list[tuple[int, float]]:
    """At most k (chunk_id, cosine similarity) of the owner's chunks for query, best first; only positive ones."""
    if k < 1 or not query.strip() or not dense.available():
        return []
    matrix = index.matrix_for(owner_id, DENSE)
    if matrix.size == 0:
        return []
    query_vector = dense.embedder().embed_one(query)
    scores = matrix.vectors @ query_vector
    count = min(k, len(scores))
    rows = np.argpartition(scores, len(scores) - count)[len(scores) - count:] if count < len(scores) \
        else np.arange(count)
    rows = rows[np.argsort(-scores[rows], kind="stable")]
    rows = rows[scores[rows] > 0]
    return [(int(chunk_id), round(min(float(score), 1.0), 6))
            for chunk_id, score in zip(matrix.ids[rows].tolist(), scores[rows].tolist(), strict=True)]


class DenseRanker(ranking.Ranker):
    """The cosine similarity of the dense model's vectors (see dense_rank)."""

    name = "dense"
    # Its share in hybrid's weighted fusion (vector 0.2, lexical 1.0): chosen on bench/retrieval_dense.py's
    # sweep, where 1.5 was above 1.0 on both halves of the questions and 2.0 was not above 1.5 (bench/RESULTS.md).
    weight = 1.5

    def rank(self, owner_id: int, query: str, k: int) -> ranking.Ranking:
        return dense_rank(owner_id, query, k)
