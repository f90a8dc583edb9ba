"""Ranking an owner's chunks for a query: rankers (one signal each) and their fusion.

The "owner" is a collection, named by its integer key (knowledge/index.py); a search over several collections
asks each ranker for each collection's best and merges them by score first (`merged`), then fuses.

A `Ranker` is one signal (its docstring gives the contract). `fuse` combines any number of rankings, so a new
signal is one more `Ranker` registered with `register_ranker`. The modes of `chunk_search`: `vector` and
`lexical` use the one ranker of that name; `hybrid` fuses every registered ranker.

Fusion is a weighted sum, chosen by measurement (bench/retrieval.py): each list's scores divided by its best,
summed with the rankers' `weight`. Reciprocal rank fusion (`fuse_rrf`) is kept for the benchmark's comparison.
"""

from __future__ import annotations

import heapq
import itertools
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence

RRF_K = 60  # the constant of Cormack et al. (2009): damps the weight of the very first ranks
CANDIDATES = 50  # each ranker's list depth in a fusion (at least the k asked for)

Ranking = list[tuple[int, float]]  # (chunk_id, score), best first


class Ranker(ABC):
    """One ranking signal over an owner's chunks. Its contract, which every implementation keeps:

    - `rank(owner_id, query, k)` returns at most `k` `(chunk_id, score)` pairs, best first (score descending;
      ties in any stable order), of chunks that belong to `owner_id` and are in the database as of the call
      (never another owner's, never a deleted one once the deletion has committed).
    - Only matches: a chunk the signal has no evidence for (no word in common, a non-positive similarity) is
      left out, so a query that matches nothing gives `[]`. An empty or wordless query gives `[]`.
    - The score is the ranker's own (a cosine similarity, a BM25 value, ...), higher is better; fusion uses
      only the order, or the scores of the same ranker relative to each other, never compares rankers' scores.
    - No rebuild per query: a ranker reads an index kept in step with the chunks (an in-memory matrix checked
      against the owner's stamp, a full-text index written with the chunks).
    - Thread-safe, and `rank` may be called from any thread with a database connection.
    """

    name: str = ""
    weight: float = 1.0  # its share in the fused score (fuse_weighted)

    @abstractmethod
    def rank(self, owner_id: int, query: str, k: int) -> Ranking:
        """At most k (chunk_id, score) of the owner's chunks matching query, best first; [] for no match."""

    def rank_many(self, owner_ids: Sequence[int], query: str, k: int) -> Ranking:
        """`rank` over several owners as one list: each one's k best, merged by score (`merged`). A ranker may
        answer it in fewer statements, with the same result."""
        return merged([self.rank(owner_id, query, k) for owner_id in owner_ids], k)


def fuse_rrf(rankings: Sequence[Ranking], k: int, *, rrf_k: int = RRF_K,
             weights: Sequence[float] | None = None) -> Ranking:
    """Reciprocal rank fusion of rankings: (chunk_id, fused score) of the k best, best first.

    Ties are broken by the first ranking's order, then the next one's (a stable, deterministic order).
    """
    fused: dict[int, float] = {}
    first_seen: dict[int, tuple[int, int]] = {}
    for number, ranking in enumerate(rankings):
        weight = 1.0 if weights is None else weights[number]
        for rank, (chunk_id, _score) in enumerate(ranking, start=1):
            fused[chunk_id] = fused.get(chunk_id, 0.0) + weight / (rrf_k + rank)
            first_seen.setdefault(chunk_id, (number, rank))
    order = sorted(fused, key=lambda chunk_id: (-fused[chunk_id], first_seen[chunk_id]))
    return [(chunk_id, fused[chunk_id]) for chunk_id in order[:k]]


def fuse_weighted(rankings: Sequence[Ranking], k: int, *, weights: Sequence[float] | None = None) -> Ranking:
    """Weighted sum of each ranking's scores divided by its best score (so each signal lies in (0, 1])."""
    fused: dict[int, float] = {}
    first_seen: dict[int, tuple[int, int]] = {}
    for number, ranking in enumerate(rankings):
        if not ranking:
            continue
        weight = 1.0 if weights is None else weights[number]
        best = ranking[0][1] or 1.0
        for rank, (chunk_id, score) in enumerate(ranking, start=1):
            fused[chunk_id] = fused.get(chunk_id, 0.0) + weight * score / best
            first_seen.setdefault(chunk_id, (number, rank))
    order = sorted(fused, key=lambda chunk_id: (-fused[chunk_id], first_seen[chunk_id]))
    return [(chunk_id, fused[chunk_id]) for chunk_id in order[:k]]


FUSIONS = {"rrf": fuse_rrf, "weighted": fuse_weighted}
DEFAULT_FUSION = "weighted"


def merged(rankings: Sequence[Ranking], k: int) -> Ranking:
    """One ranker's rankings of several collections as one: the k highest scores, best first (ties: the earlier
    collection's first). The scores of one ranker are comparable across collections (a cosine is; a BM25 value
    uses its collection's own statistics, as a search of that collection alone would)."""
    if len(rankings) == 1:
        return list(rankings[0][:k])
    return heapq.nlargest(k, itertools.chain.from_iterable(rankings), key=lambda pair: pair[1])


def fuse(rankers: Sequence[Ranker], owner_id: int, query: str, k: int, *, depth: int = CANDIDATES,
         method: str = DEFAULT_FUSION) -> Ranking:
    """Ask every ranker for its `max(k, depth)` best and fuse them with the rankers' weights: the k best
    (chunk_id, fused score), best first."""
    return fuse_many(rankers, [owner_id], query, k, depth=depth, method=method)


def fuse_many(rankers: Sequence[Ranker], owner_ids: Sequence[int], query: str, k: int, *, depth: int = CANDIDATES,
              method: str = DEFAULT_FUSION) -> Ranking:
    """`fuse` over several owners (collections): each ranker's `max(k, depth)` best of each owner, merged into
    one list per ranker (`merged`), then fused: one ranking across them all."""
    depth = max(k, depth)
    rankings = [ranker.rank_many(owner_ids, query, depth) for ranker in rankers]
    return FUSIONS[method](rankings, k, weights=[ranker.weight for ranker in rankers])


# --- the registry -----------------------------------------------------------------------------------

_lock = threading.Lock()
_rankers: dict[str, Ranker] = {}


def register_ranker(ranker: Ranker) -> None:
    """Add (or replace, by name) a ranker; `hybrid` fuses every registered one, in registration order."""
    if not ranker.name:
        raise ValueError("a ranker needs a name")
    with _lock:
        _rankers[ranker.name] = ranker


def unregister_ranker(name: str) -> None:
    with _lock:
        _rankers.pop(name, None)


def rankers() -> list[Ranker]:
    """The registered rankers, in registration order."""
    with _lock:
        return list(_rankers.values())


def ranker(name: str) -> Ranker | None:
    with _lock:
        return _rankers.get(name)
