"""Relevance metrics of a ranking against graded judgments (standard definitions, as in BEIR / pytrec_eval),
shared by `ragmesh eval` and the search service's golden-set evaluation. Pure math, no service.

`ranked` is a list of document ids, best first; `grades` maps judged document ids to a graded relevance
(0 = judged not relevant; a document not in it counts 0).

- nDCG@k: DCG = sum over ranks i=1..k of rel_i / log2(i + 1) (gain = the graded relevance), divided by the DCG
  of the ideal order of all judged documents;
- recall@k: relevant documents (rel > 0) in the top k / all relevant documents;
- MRR@k: 1 / rank of the first relevant document in the top k, else 0;
- leaderboard-style nDCG@k: the DCG of the top k divided by the DCG of the same k documents in their ideal order
  (it ignores judged documents that were not retrieved).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence


def ndcg_at_k(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """Normalised DCG of the top k (gain = grade, discount log2(rank + 1)); 0 when nothing is relevant."""
    dcg = sum(grades.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def ndcg_retrieved_at_k(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """Leaderboard-style nDCG: normalised by the ideal order of the retrieved top k only; 0 when none of them
    is relevant."""
    gains = [grades.get(doc, 0) for doc in ranked[:k]]
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(gains, reverse=True)))
    return dcg / idcg if idcg > 0 else 0.0


def recall_at_k(ranked: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents (grade > 0) found in the top k."""
    relevant = {d for d, g in grades.items() if g > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at_k(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """1 / rank of the first relevant document in the top k; 0 if there is none."""
    return next((1.0 / (i + 1) for i, d in enumerate(ranked[:k]) if grades.get(d, 0) > 0), 0.0)


def mean_at_10(runs: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]]) -> dict[str, float]:
    """Mean nDCG@10, recall@10 and MRR@10 of `runs` (query id -> ranked doc ids) against `qrels` (query id ->
    grades); all 0 when there are no runs."""
    n = len(runs)
    totals = {"ndcg_at_10": 0.0, "recall_at_10": 0.0, "mrr_at_10": 0.0}
    for query, ranked in runs.items():
        grades = qrels[query]
        totals["ndcg_at_10"] += ndcg_at_k(ranked, grades, 10)
        totals["recall_at_10"] += recall_at_k(ranked, grades, 10)
        totals["mrr_at_10"] += mrr_at_k(ranked, grades, 10)
    return {name: total / n if n else 0.0 for name, total in totals.items()}
