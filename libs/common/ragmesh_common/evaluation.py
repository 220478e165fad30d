"""`ragmesh eval`: retrieval quality on a BEIR-format dataset, measured through the real mesh.

A dataset directory holds `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl` (`_id`, `text`) and
`qrels/test.tsv` (`query-id`, `corpus-id`, `score`; graded relevance, 0 = not relevant). The corpus is ingested
through the indexer (IngestDocuments, batched; skipped with `reuse` when the collection already holds it), then
every judged query is run through the search service once per mode, ranking documents (best chunk per
document). Metrics (standard definitions, as in BEIR / pytrec_eval):

- nDCG@k: DCG = sum over ranks i=1..k of rel_i / log2(i + 1) (gain = the graded relevance), divided by the DCG
  of the ideal order of all judged documents;
- recall@k: relevant documents (rel > 0) in the top k / all relevant documents;
- MRR@k: 1 / rank of the first relevant document in the top k, else 0.

Queries without a relevant judgment are skipped. The ranking is deterministic (the store breaks ties by
doc_id, chunk_index), so two runs over the same collection give the same metrics; latency is wall time of the
Search call as the client sees it.
"""

from __future__ import annotations

import asyncio
import csv
import json
import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .clients import ServiceClient

# Modes `ragmesh eval` runs by default: the single modes, the presets and the fusion variants.
# Each name is "<mode>" or "<mode>:<fusion>" (fusion: rrf, dbsf); see `SearchSpec.parse`.
DEFAULT_SPECS = ("dense", "sparse", "hybrid", "hybrid:relative_score", "hybrid:rrf", "hybrid:dbsf", "semantic",
                 "keyword")
MAX_DEPTH = 100  # the search service's largest top_k, and the depth of recall@100
_INGEST_BATCH_DOCS = 64
_INGEST_BATCH_BYTES = 4 * 1024 * 1024
_INGEST_STREAMS = 2


@dataclass(frozen=True)
class Dataset:
    """A BEIR dataset: corpus (doc id -> (title, text)), queries (id -> text), qrels (query -> doc -> grade)."""

    corpus: dict[str, tuple[str, str]]
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]

    def judged_queries(self, limit: int | None = None) -> list[str]:
        """Ids of queries with at least one relevant judgment, in a stable order (as sorted ids), at most `limit`."""
        ids = sorted(q for q in self.queries if any(g > 0 for g in self.qrels.get(q, {}).values()))
        return ids[:limit] if limit else ids


def load_dataset(path: Path, split: str = "test") -> Dataset:
    """Read a BEIR dataset directory; ValueError with the file named if something is missing or malformed."""
    files = {"corpus": path / "corpus.jsonl", "queries": path / "queries.jsonl",
             "qrels": path / "qrels" / f"{split}.tsv"}
    for file in files.values():
        if not file.is_file():
            raise ValueError(f"{file} is missing (a BEIR dataset has corpus.jsonl, queries.jsonl, qrels/{split}.tsv)")
    corpus = {str(d["_id"]): (str(d.get("title") or ""), str(d.get("text") or "")) for d in _jsonl(files["corpus"])}
    queries = {str(d["_id"]): str(d["text"]) for d in _jsonl(files["queries"])}
    qrels: dict[str, dict[str, int]] = {}
    with files["qrels"].open(newline="", encoding="utf-8") as f:
        rows = csv.reader(f, delimiter="\t")
        for i, row in enumerate(rows):
            if i == 0 and row[:1] == ["query-id"]:
                continue  # header
            if len(row) < 3 or not row[2].strip().lstrip("-").isdigit():
                raise ValueError(f"{files['qrels']}:{i + 1}: expected query-id, corpus-id, score (an integer)")
            qrels.setdefault(row[0], {})[row[1]] = int(row[2])
    return Dataset(corpus, queries, qrels)


def _jsonl(path: Path) -> Iterator[dict]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: {exc.msg}") from None


# --- metrics -------------------------------------------------------------------------------------------------
def ndcg_at_k(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """Normalised DCG of the top k (gain = grade, discount log2(rank + 1)); 0 when nothing is relevant."""
    dcg = sum(grades.get(doc, 0) / math.log2(i + 2) for i, doc in enumerate(ranked[:k]))
    ideal = sorted((g for g in grades.values() if g > 0), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def recall_at_k(ranked: Sequence[str], grades: Mapping[str, int], k: int) -> float:
    """Share of the relevant documents (grade > 0) found in the top k."""
    relevant = {d for d, g in grades.items() if g > 0}
    return len(relevant.intersection(ranked[:k])) / len(relevant) if relevant else 0.0


def mrr_at_k(ranked: Sequence[str], grades: Mapping[str, int], k: int = 10) -> float:
    """1 / rank of the first relevant document in the top k; 0 if there is none."""
    return next((1.0 / (i + 1) for i, d in enumerate(ranked[:k]) if grades.get(d, 0) > 0), 0.0)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks."""
    if not values:
        return 0.0
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100
    low = math.floor(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


@dataclass(frozen=True)
class ModeScores:
    """One mode's mean metrics over the judged queries, and its latency percentiles (milliseconds)."""

    mode: str
    queries: int
    ndcg_at_10: float
    recall_at_10: float
    recall_at_100: float
    mrr_at_10: float
    latency_p50_ms: float
    latency_p95_ms: float


def score_run(mode: str, runs: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]],
              latencies_ms: Sequence[float]) -> ModeScores:
    """Mean metrics of `runs` (query id -> ranked doc ids) against `qrels`."""
    n = len(runs)

    def mean(metric: Callable[[Sequence[str], Mapping[str, int]], float]) -> float:
        return sum(metric(ranked, qrels[q]) for q, ranked in runs.items()) / n if n else 0.0

    return ModeScores(
        mode=mode, queries=n,
        ndcg_at_10=mean(lambda r, g: ndcg_at_k(r, g, 10)),
        recall_at_10=mean(lambda r, g: recall_at_k(r, g, 10)),
        recall_at_100=mean(lambda r, g: recall_at_k(r, g, 100)),
        mrr_at_10=mean(lambda r, g: mrr_at_k(r, g, 10)),
        latency_p50_ms=percentile(latencies_ms, 50),
        latency_p95_ms=percentile(latencies_ms, 95),
    )


# --- the search request of a mode ----------------------------------------------------------------------------
@dataclass(frozen=True)
class SearchSpec:
    """A mode to evaluate: a search mode, optionally with a fusion (`hybrid:dbsf`, `hybrid:rrf`)."""

    name: str
    mode: int
    fusion: int

    @classmethod
    def parse(cls, name: str) -> SearchSpec:
        from ragmesh.search.v1 import search_service_pb2 as pb

        mode, _, fusion = name.partition(":")
        modes = {n.removeprefix("SEARCH_MODE_").lower(): v for n, v in pb.SearchMode.items() if v}
        fusions = {n.removeprefix("FUSION_").lower(): v for n, v in pb.Fusion.items() if v}
        if mode not in modes or (fusion and fusion not in fusions):
            raise ValueError(f"unknown mode {name!r}: use one of {', '.join(modes)}, optionally with "
                             f":{' or :'.join(fusions)} (e.g. hybrid:dbsf)")
        return cls(name, modes[mode], fusions.get(fusion, 0))


# --- the runner --------------------------------------------------------------------------------------------
async def ingest_corpus(dataset: Dataset, collection: str, indexer: ServiceClient,
                        progress: Callable[[int], None] = lambda n: None) -> int:
    """Ingest every corpus document (doc_id = the corpus id) through IngestDocuments; return how many failed."""
    from ragmesh.indexer.v1 import indexer_service_pb2 as pb

    batches: list[list[pb.DocumentInput]] = [[]]
    size = 0
    for doc_id, (title, text) in dataset.corpus.items():
        if batches[-1] and (len(batches[-1]) >= _INGEST_BATCH_DOCS or size + len(text) > _INGEST_BATCH_BYTES):
            batches.append([])
            size = 0
        batches[-1].append(pb.DocumentInput(collection=collection, doc_id=doc_id, title=title, text=text))
        size += len(text)
    queue = list(reversed(batches))
    failed = 0

    async def worker() -> None:
        nonlocal failed
        while queue:
            batch = queue.pop()
            async for event in indexer.stream("IngestDocuments", pb.IngestDocumentsRequest(documents=batch)):
                failed += event.result.status == pb.INGEST_STATUS_FAILED
                progress(1)

    await asyncio.gather(*(worker() for _ in range(_INGEST_STREAMS)))
    return failed


async def run_queries(dataset: Dataset, query_ids: Sequence[str], spec: SearchSpec, collection: str,
                      search: ServiceClient) -> ModeScores:
    """Every query through Search (top 100 documents, best chunk per document), scored."""
    from ragmesh.search.v1 import search_service_pb2 as pb

    runs: dict[str, list[str]] = {}
    latencies: list[float] = []
    for qid in query_ids:
        request = pb.SearchRequest(query=dataset.queries[qid], collections=[collection], top_k=MAX_DEPTH,
                                   mode=spec.mode, fusion=spec.fusion, group_by_document=True)
        started = time.perf_counter()
        reply = await search.call("Search", request)
        latencies.append((time.perf_counter() - started) * 1000)
        runs[qid] = [r.doc_id for r in reply.results]
    return score_run(spec.name, runs, dataset.qrels, latencies)


async def collection_documents(search: ServiceClient, collection: str) -> int | None:
    """How many documents the collection holds, or None if it does not exist."""
    from ragmesh.search.v1 import search_service_pb2 as pb

    reply = await search.call("ListCollections", pb.ListCollectionsRequest())
    return next((c.documents for c in reply.collections if c.name == collection), None)


def results_json(dataset_dir: Path, collection: str, scores: Sequence[ModeScores]) -> dict:
    return {"dataset": str(dataset_dir), "collection": collection, "modes": [asdict(s) for s in scores]}
