"""What golden.py keeps as store records of a collection: its golden set (`GoldenSet` of `GoldenQuery`) and each
scoring of it (`Evaluation`), which metrics.py also exports as gauges."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GoldenQuery:
    query_id: str
    text: str
    relevant: Mapping[str, int]


@dataclass(frozen=True)
class GoldenSet:
    collection: str
    queries: list[GoldenQuery]
    updated_at: str
    golden_set_id: str

    @property
    def judgments(self) -> int:
        return sum(len(q.relevant) for q in self.queries)


@dataclass(frozen=True)
class Evaluation:
    """One scoring of a collection in one mode (as kept in its history)."""

    collection: str
    evaluated_at: str
    mode: str
    fusion: str | None
    queries: int
    ndcg_at_10: float
    recall_at_10: float
    mrr_at_10: float
    documents: int
    chunks: int
    model: str = ""
    golden_set_id: str = ""
    took_ms: float = 0.0
    version: int = 0  # the version scored (0 in evaluations kept before collections had versions)

    @property
    def metrics(self) -> dict[str, float]:
        return {"ndcg_at_10": self.ndcg_at_10, "recall_at_10": self.recall_at_10, "mrr_at_10": self.mrr_at_10}

    @classmethod
    def from_record(cls, raw: Mapping[str, Any]) -> Evaluation:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in raw.items() if k in names})
