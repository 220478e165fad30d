"""How a search mode becomes a store query (presets, fusion, weights), and scores on one 0..1 scale.

Modes: `dense`, `sparse`, `hybrid` (dense + sparse fused by the request's fusion, else the collection's
default, else the service's: relative score fusion, 0.75 dense + 0.25 sparse after min-max normalisation),
and two presets as in classic hybrid engines: `semantic` (dense-heavy) and `keyword` (sparse-heavy), both
weighted reciprocal rank fusion.

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
  of lists and clipping would tie the outliers).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from ragmesh_store.base import Fusion, Hit, Mode

SearchMode = Literal["dense", "sparse", "hybrid", "semantic", "keyword"]
MODES: tuple[SearchMode, ...] = ("hybrid", "dense", "sparse", "semantic", "keyword")
FUSIONS: tuple[Fusion, ...] = ("relative_score", "rrf", "dbsf")
# The BM25 score that maps to 0.5.
SPARSE_HALF_SCORE = 10.0
# (dense, sparse) weights of the presets' weighted RRF.
PRESET_WEIGHTS: dict[str, tuple[float, float]] = {"semantic": (3.0, 1.0), "keyword": (1.0, 3.0)}


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
        if self.fusion == "relative_score":
            return score
        weights = self.weights or (1.0, 1.0)
        return score / sum(1.0 / (self.rrf_k - 1 + 1.0 / w) for w in weights if w > 0)


def plan(mode: SearchMode, fusion: Fusion | None, rrf_k: int, default_fusion: Fusion,
         dense_weight: float = 0.75) -> Plan:
    """The plan of a request: presets are weighted RRF; hybrid uses `fusion`, else `default_fusion`."""
    if mode in ("dense", "sparse"):
        return Plan(mode, mode)
    if mode in PRESET_WEIGHTS:
        return Plan(mode, "hybrid", "rrf", rrf_k, PRESET_WEIGHTS[mode])
    return Plan(mode, "hybrid", fusion or default_fusion, rrf_k, dense_weight=dense_weight)
