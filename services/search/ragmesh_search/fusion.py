"""How a search mode becomes a store query (presets, fusion, weights), and scores on one 0..1 scale.

Modes: `dense`, `sparse`, `hybrid` (dense + sparse fused by the request's fusion, else the collection's
default, else the service's: adaptive fusion, below), and two presets as in classic hybrid engines: `semantic`
(dense-heavy) and `keyword` (sparse-heavy), both weighted reciprocal rank fusion. The fixed-weight fusions stay
available per request and per collection: relative score (0.75 dense + 0.25 sparse after min-max
normalisation), RRF and DBSF.

Adaptive fusion (the default) weighs the two lists per query, by how good each list's best match is on a scale
that does not stretch a weak list (`adaptive_fusion`):

1. Scores on their theoretical range, not min-max over the list ("TMM" normalisation, Bruch, Gai & Ingber, "An
   Analysis of Fusion Functions for Hybrid Retrieval", ACM TOIS 2023): dense = the cosine clipped to 0..1;
   lexical = the chunk's BM25 score / the BM25 score of an ideal chunk that holds every query term at full term
   frequency saturation, (k1 + 1) * sum of the query terms' IDF (terms in no chunk count with the IDF of a
   term in no chunk). The lexical score is thus "how much of the query this chunk matches", IDF-weighted: a list
   that only matches a common word of the query, or nothing the query says (typos, paraphrases), stays low
   instead of being stretched to 0..1 as min-max normalisation does (which is how relative score fusion lets a
   weak BM25 list reorder a good dense one).
2. Per-query list weights from query performance prediction: each list's weight is its best normalised score
   (the "max score" predictor; weighting a linear fusion by each list's predicted effectiveness is Markovits,
   Shtok, Kurland & Carmel, "Predicting Query Performance for Fusion-Based Retrieval", CIKM 2012). A list whose
   best match is weak (BM25 matching a fraction of the query, or dense finding nothing close) has little say,
   and a list that is pure noise drops out; when both are strong they are averaged. No constant in it was
   fitted: the only parameter is BM25's own k1.
3. Pseudo-relevance feedback on the dense side (`rocchio`): the query vector moves towards the dense vectors of
   the top fused chunks (Rocchio; depth 3, alpha 1, beta 0.2 as in pyterrier-dr's `vector_prf` after Li et
   al., "Pseudo Relevance Feedback with Deep Language Models and Dense Retrievers: Successes and Pitfalls", ACM
   TOIS 2023), and the query runs again: one more store call, no second model call. Taking the feedback from
   the fused list (not the dense list alone) means a weak dense query gets its feedback from what BM25 found.

Scores in responses are 0..1, higher is better, and monotone in the engine's score (so the order is the
engine's):
- dense: the cosine similarity, clipped to 0..1;
- sparse: BM25 / (BM25 + 10), a fixed squashing (a BM25 score of 10 is 0.5), so scores of several
  collections stay comparable;
- RRF: the fused score divided by the largest score fusion can give (a chunk ranked first in every list);
  Qdrant scores weighted RRF as the sum over lists of 1 / (k - 1 + rank / weight), rank from 1;
- relative score: already 0..1 (each list min-max normalised, weights summing to 1);
- DBSF: each list's scores are normalised by mean +- 3 standard deviations (so mostly 0..1, more for
  outliers) and summed; the sum x is squashed to x / (1 + x), which keeps the order (dividing by the number
  of lists and clipping would tie the outliers);
- adaptive: already 0..1 (a weighted mean of two 0..1 scores).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Literal

import numpy as np
from ragmesh_store import tie_key
from ragmesh_store.base import Fusion, Hit, HybridEvidence, Mode, Sparse

SearchMode = Literal["dense", "sparse", "hybrid", "semantic", "keyword"]
MODES: tuple[SearchMode, ...] = ("hybrid", "dense", "sparse", "semantic", "keyword")
FUSIONS: tuple[Fusion, ...] = ("adaptive", "relative_score", "rrf", "dbsf")
# The BM25 score that maps to 0.5.
SPARSE_HALF_SCORE = 10.0
# (dense, sparse) weights of the presets' weighted RRF.
PRESET_WEIGHTS: dict[str, tuple[float, float]] = {"semantic": (3.0, 1.0), "keyword": (1.0, 3.0)}
# k1 of the embedder's BM25 (qdrant-edge's Bm25 default): a chunk's weight for a term is at most k1 + 1.
BM25_K1 = 1.2


@dataclass(frozen=True)
class Plan:
    """What the store runs for a mode: its store mode, and for hybrid the fusion, k and (dense, sparse) weights."""

    mode: SearchMode
    store_mode: Mode
    fusion: Fusion | None = None
    rrf_k: int = 60
    weights: tuple[float, float] | None = None
    dense_weight: float = 0.75

    def normalise(self, hits: Sequence[Hit]) -> list[Hit]:
        """The hits (best first) with scores on the 0..1 scale described above."""
        return [Hit(h.id, min(1.0, max(0.0, self._scaled(h.score))), h.payload) for h in hits]

    def _scaled(self, score: float) -> float:
        if self.store_mode == "dense":
            return score
        if self.store_mode == "sparse":
            return score / (score + SPARSE_HALF_SCORE)
        if self.fusion == "dbsf":
            return score / (1.0 + score) if score > 0 else 0.0
        if self.fusion in ("relative_score", "adaptive"):
            return score
        weights = self.weights or (1.0, 1.0)
        return score / sum(1.0 / (self.rrf_k - 1 + 1.0 / w) for w in weights if w > 0)


def plan(
    mode: SearchMode, fusion: Fusion | None, rrf_k: int, default_fusion: Fusion, dense_weight: float = 0.75
) -> Plan:
    """The plan of a request: presets are weighted RRF; hybrid uses `fusion`, else `default_fusion`."""
    if mode in ("dense", "sparse"):
        return Plan(mode, mode)
    if mode in PRESET_WEIGHTS:
        return Plan(mode, "hybrid", "rrf", rrf_k, PRESET_WEIGHTS[mode])
    return Plan(mode, "hybrid", fusion or default_fusion, rrf_k, dense_weight=dense_weight)


@dataclass(frozen=True)
class Weights:
    """The per-query weights adaptive fusion gave the dense and the lexical list (summing to 1)."""

    dense: float
    sparse: float


def adaptive_fusion(evidence: HybridEvidence, query: Sparse, limit: int) -> tuple[list[Hit], Weights]:
    """The candidates of both lists fused as described in the module docstring, best first (ties by doc_id,
    chunk_index), at most `limit`, scores 0..1; and the weights used. The scores are computed as arrays and only
    the best `limit` (and any tied with the last of them) become hits: a query has a few hundred candidates."""
    ideal = (BM25_K1 + 1) * sum(
        w * evidence.term_idf.get(t, 0.0) for t, w in zip(query.indices, query.values, strict=True)
    )
    chunks: dict[str, Hit] = {}
    for hit in (*evidence.dense, *evidence.sparse):
        chunks.setdefault(hit.id, hit)
    ids = list(chunks)
    count = len(ids)
    dense = np.clip(np.fromiter(map(evidence.dense_scores.get, ids, repeat(0.0)), np.float64, count), 0.0, 1.0)
    lexical = np.zeros(count)
    if ideal > 0:
        bm25 = np.fromiter(map(evidence.sparse_scores.get, ids, repeat(0.0)), np.float64, count)
        lexical = np.minimum(1.0, bm25 / ideal)
    w_dense = float(dense.max()) if count else 0.0
    w_sparse = float(lexical.max()) if count else 0.0
    total = w_dense + w_sparse
    if total <= 0:
        return sorted((Hit(i, 0.0, h.payload) for i, h in chunks.items()), key=tie_key)[:limit], Weights(0.5, 0.5)
    weights = Weights(w_dense / total, w_sparse / total)
    fused = weights.dense * dense + weights.sparse * lexical
    picked: Sequence[int] = range(count)
    if count > limit > 0:
        last = np.partition(fused, count - limit)[count - limit]  # the limit-th best score
        picked = np.flatnonzero(fused >= last).tolist()
    hits = [Hit(ids[i], float(fused[i]), chunks[ids[i]].payload) for i in picked]
    return sorted(hits, key=tie_key)[:limit], weights


def rocchio(
    query: Sequence[float], feedback: Sequence[Sequence[float]], alpha: float = 1.0, beta: float = 0.2
) -> list[float]:
    """alpha * the unit query vector + beta * the mean of the unit feedback vectors (Rocchio, 1971)."""

    def unit(m: np.ndarray) -> np.ndarray:
        norms = np.linalg.norm(m, axis=-1, keepdims=True)
        return m / np.where(norms > 0, norms, 1.0)

    centroid = unit(np.asarray(feedback, dtype=np.float64)).mean(axis=0)
    return (alpha * unit(np.asarray(query, dtype=np.float64)) + beta * centroid).tolist()
