"""`ragmesh eval`: retrieval quality on a BEIR-format dataset, measured through the real mesh.

A dataset directory holds `corpus.jsonl` (`_id`, `title`, `text`), `queries.jsonl` (`_id`, `text`) and
`qrels/test.tsv` (`query-id`, `corpus-id`, `score`; graded relevance, 0 = not relevant). The corpus is ingested
through the indexer (IngestDocuments, batched; skipped with `reuse` when the collection already holds it), then
every judged query is run through the search service once per mode, ranking documents (best chunk per
document). Metrics (standard definitions, as in BEIR / pytrec_eval):

- nDCG@k: DCG = sum over ranks i=1..k of rel_i / log2(i + 1) (gain = the graded relevance), divided by the DCG
  of the ideal order of all judged documents;
- recall@k: relevant documents (rel > 0) in the top k / all relevant documents;
- MRR@k: 1 / rank of the first relevant document in the top k, else 0;
- leaderboard-style nDCG@10 (`ndcg_at_10_retrieved`): the DCG of the top 10 divided by the DCG of the same 10
  documents in their ideal order, as the public embedding leaderboard that published numbers on msmarco-5k
  computes it. It ignores judged documents that were not retrieved (recall does not count), so it is reported
  next to nDCG@10, not instead of it.

The metrics live in `ragmesh_common.relevance`, shared with the search service's golden-set evaluation
(`ragmesh eval --collection C` without a dataset scores a live collection on its stored golden set).

Several datasets can be measured in one run. For each, the default mode (`hybrid`) is compared per query with
the better single mode (`dense` or `sparse`, by mean nDCG@10): wins, losses and ties on nDCG@10.

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
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, cast

import grpc
from ragmesh_common.clients import ServiceClient
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason
from ragmesh_common.relevance import mrr_at_k, ndcg_at_k, ndcg_retrieved_at_k, recall_at_k

# Modes `ragmesh eval` runs by default: the single modes, the presets and the fusion variants.
# Each name is "<mode>" or "<mode>:<fusion>" (fusion: rrf, dbsf); see `SearchSpec.parse`.
DEFAULT_SPECS = (
    "dense",
    "sparse",
    "hybrid",
    "hybrid:relative_score",
    "hybrid:rrf",
    "hybrid:dbsf",
    "semantic",
    "keyword",
)
MAX_DEPTH = 100  # the search service's largest top_k, and the depth of recall@100
_INGEST_BATCH_DOCS = 64
_INGEST_BATCH_BYTES = 4 * 1024 * 1024
_INGEST_STREAMS = 2
_INGEST_ATTEMPTS = 5


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
    corpus_file = path / "corpus.jsonl"
    if not corpus_file.is_file():
        raise ValueError(
            f"{corpus_file} is missing (a BEIR dataset has corpus.jsonl, queries.jsonl, qrels/{split}.tsv)"
        )
    queries, qrels = load_judgments(path, split)
    corpus = {str(d["_id"]): (str(d.get("title") or ""), str(d.get("text") or "")) for d in _jsonl(corpus_file)}
    return Dataset(corpus, queries, qrels)


def load_judgments(path: Path, split: str = "test") -> tuple[dict[str, str], dict[str, dict[str, int]]]:
    """The queries (id -> text) and qrels (query id -> corpus id -> grade) of a BEIR dataset directory (no corpus
    needed); ValueError with the file named if one is missing or malformed."""
    files = {"queries": path / "queries.jsonl", "qrels": path / "qrels" / f"{split}.tsv"}
    for file in files.values():
        if not file.is_file():
            raise ValueError(f"{file} is missing (a BEIR dataset has corpus.jsonl, queries.jsonl, qrels/{split}.tsv)")
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
    return queries, qrels


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as exc:
                    raise ValueError(f"{path}:{n}: {exc.msg}") from None


# --- metrics (ragmesh_common.relevance, shared with the search service's golden-set evaluation) ---------------
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
    ndcg_at_10_retrieved: float = 0.0
    per_query_ndcg_at_10: dict[str, float] = field(default_factory=dict)


def score_run(
    mode: str, runs: Mapping[str, Sequence[str]], qrels: Mapping[str, Mapping[str, int]], latencies_ms: Sequence[float]
) -> ModeScores:
    """Mean metrics of `runs` (query id -> ranked doc ids) against `qrels`."""
    n = len(runs)

    def mean(metric: Callable[[Sequence[str], Mapping[str, int]], float]) -> float:
        return sum(metric(ranked, qrels[q]) for q, ranked in runs.items()) / n if n else 0.0

    return ModeScores(
        mode=mode,
        queries=n,
        ndcg_at_10=mean(lambda r, g: ndcg_at_k(r, g, 10)),
        recall_at_10=mean(lambda r, g: recall_at_k(r, g, 10)),
        recall_at_100=mean(lambda r, g: recall_at_k(r, g, 100)),
        mrr_at_10=mean(lambda r, g: mrr_at_k(r, g, 10)),
        latency_p50_ms=percentile(latencies_ms, 50),
        latency_p95_ms=percentile(latencies_ms, 95),
        ndcg_at_10_retrieved=mean(lambda r, g: ndcg_retrieved_at_k(r, g, 10)),
        per_query_ndcg_at_10={q: ndcg_at_k(ranked, qrels[q], 10) for q, ranked in runs.items()},
    )


DEFAULT_MODE = "hybrid"
SINGLE_MODES = ("dense", "sparse")


@dataclass(frozen=True)
class Comparison:
    """The default mode against the better single mode on one dataset, per query on nDCG@10."""

    default: str
    best_single: str
    default_ndcg_at_10: float
    best_single_ndcg_at_10: float
    wins: int
    losses: int
    ties: int

    @property
    def holds(self) -> bool:
        """The default is at least as good as the better single mode (mean nDCG@10)."""
        return self.default_ndcg_at_10 >= self.best_single_ndcg_at_10

    def line(self) -> str:
        return (
            f"{self.default} vs {self.best_single}: {self.wins} wins, {self.losses} losses, {self.ties} ties "
            f"(nDCG@10 {self.default_ndcg_at_10:.3f} vs {self.best_single_ndcg_at_10:.3f})"
        )


def compare(
    scores: Sequence[ModeScores], default: str = DEFAULT_MODE, singles: Sequence[str] = SINGLE_MODES
) -> Comparison | None:
    """The default against the better of the single modes that were run; None unless both sides were run."""
    by_mode = {s.mode: s for s in scores}
    candidates = [by_mode[m] for m in singles if m in by_mode]
    if default not in by_mode or not candidates:
        return None
    ours, best = by_mode[default], max(candidates, key=lambda s: s.ndcg_at_10)
    wins = losses = ties = 0
    for q, value in ours.per_query_ndcg_at_10.items():
        other = best.per_query_ndcg_at_10.get(q, 0.0)
        if math.isclose(value, other, abs_tol=1e-9):
            ties += 1
        elif value > other:
            wins += 1
        else:
            losses += 1
    return Comparison(default, best.mode, ours.ndcg_at_10, best.ndcg_at_10, wins, losses, ties)


def summary_line(comparisons: Sequence[Comparison | None]) -> str:
    done = [c for c in comparisons if c is not None]
    return f"{DEFAULT_MODE} (default) >= best single mode on {sum(c.holds for c in done)} of {len(done)} sets"


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
            raise ValueError(
                f"unknown mode {name!r}: use one of {', '.join(modes)}, optionally with "
                f":{' or :'.join(fusions)} (e.g. hybrid:dbsf)"
            )
        return cls(name, modes[mode], fusions.get(fusion, 0))


# --- the runner --------------------------------------------------------------------------------------------
async def ingest_corpus(
    dataset: Dataset, collection: str, indexer: ServiceClient, progress: Callable[[int], None] = lambda n: None
) -> int:
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
            for attempt in range(_INGEST_ATTEMPTS):
                done: set[int] = set()
                try:
                    async for event in indexer.stream("IngestDocuments", pb.IngestDocumentsRequest(documents=batch)):
                        done.add(event.index)
                        failed += event.result.status == pb.INGEST_STATUS_FAILED
                        progress(1)
                    break
                except RagmeshError as exc:
                    # A stream cut (a server's connection reaching its max age, a restart) ends the batch early:
                    # send what is left again; a document already stored is skipped by its content hash.
                    if exc.code != grpc.StatusCode.UNAVAILABLE or attempt == _INGEST_ATTEMPTS - 1:
                        raise
                    batch = [d for i, d in enumerate(batch) if i not in done]
                    await asyncio.sleep(0.5 * (attempt + 1))

    await asyncio.gather(*(worker() for _ in range(_INGEST_STREAMS)))
    return failed


async def run_queries(
    dataset: Dataset, query_ids: Sequence[str], spec: SearchSpec, collection: str, search: ServiceClient
) -> ModeScores:
    """Every query through Search (top 100 documents, best chunk per document), scored."""
    from ragmesh.search.v1 import search_service_pb2 as pb

    runs: dict[str, list[str]] = {}
    latencies: list[float] = []
    for qid in query_ids:
        request = pb.SearchRequest(
            query=dataset.queries[qid],
            collections=[collection],
            top_k=MAX_DEPTH,
            # protoc's .pyi types an enum field as its enum class; EnumTypeWrapper.items() (types-protobuf) gives ints.
            mode=cast("pb.SearchMode", spec.mode),
            fusion=cast("pb.Fusion", spec.fusion),
            group_by_document=True,
        )
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


def results_json(dataset_dir: Path, collection: str, scores: Sequence[ModeScores]) -> dict[str, Any]:
    """One dataset's results: every mode's metrics (with per-query nDCG@10) and the default against the better
    single mode."""
    comparison = compare(scores)
    return {
        "dataset": str(dataset_dir),
        "collection": collection,
        "modes": [asdict(s) for s in scores],
        "default_vs_best_single": ({**asdict(comparison), "holds": comparison.holds} if comparison else None),
    }


def summary_json(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Several datasets' results and the count of those where the default held."""
    held = [r["default_vs_best_single"] for r in results if r["default_vs_best_single"] is not None]
    return {
        "datasets": list(results),
        "summary": {"default_at_least_best_single": sum(c["holds"] for c in held), "compared": len(held)},
    }


# --- answers: are the cited sources the judged-relevant ones? -------------------------------------------------
@dataclass(frozen=True)
class AnswerScores:
    """How answers are attributed over the judged queries asked through the answer service (Ask)."""

    generator: str  # "extractive", or "model <name>"
    queries: int
    answered: int  # the others were NO_RESULTS: nothing relevant enough was retrieved
    cited_relevant: float  # share of answers whose cited sources include a judged-relevant document
    citation_precision: float  # share of all citations that name a judged-relevant document
    retrieved_relevant: float  # share of answers whose sources (cited or not) include one: the ceiling of the above
    citations_per_answer: float
    latency_p50_ms: float
    latency_p95_ms: float


@dataclass(frozen=True)
class AskedQuery:
    """One answer's sources, by document id."""

    cited: list[str]
    sources: list[str]


def score_answers(
    generator: str,
    asked: Mapping[str, AskedQuery | None],
    qrels: Mapping[str, Mapping[str, int]],
    latencies_ms: Sequence[float],
) -> AnswerScores:
    """`asked`: query id -> its answer's sources, or None when there was no answer (NO_RESULTS)."""
    answers = {q: a for q, a in asked.items() if a is not None}

    def relevant(q: str, doc_id: str) -> bool:
        return qrels.get(q, {}).get(doc_id, 0) > 0

    citations = [(q, d) for q, a in answers.items() for d in a.cited]
    n = len(answers)
    return AnswerScores(
        generator=generator,
        queries=len(asked),
        answered=n,
        cited_relevant=sum(any(relevant(q, d) for d in a.cited) for q, a in answers.items()) / n if n else 0.0,
        citation_precision=sum(relevant(q, d) for q, d in citations) / len(citations) if citations else 0.0,
        retrieved_relevant=sum(any(relevant(q, d) for d in a.sources) for q, a in answers.items()) / n if n else 0.0,
        citations_per_answer=len(citations) / n if n else 0.0,
        latency_p50_ms=percentile(latencies_ms, 50),
        latency_p95_ms=percentile(latencies_ms, 95),
    )


async def run_answers(
    dataset: Dataset,
    query_ids: Sequence[str],
    collection: str,
    answer: ServiceClient,
    progress: Callable[[], None] = lambda: None,
) -> AnswerScores:
    """Every query through the answer service's Ask (its default top_k and search mode), scored on the sources
    the answer cites."""
    from ragmesh.answer.v1 import answer_service_pb2 as pb

    asked: dict[str, AskedQuery | None] = {}
    latencies: list[float] = []
    generator = "extractive"
    for qid in query_ids:
        started = time.perf_counter()
        try:
            reply = (
                await answer.call("Ask", pb.AskRequest(query=dataset.queries[qid], collections=[collection]))
            ).answer
        except RagmeshError as exc:
            if exc.reason != Reason.NO_RESULTS:
                raise
            asked[qid] = None
        else:
            asked[qid] = AskedQuery(
                cited=[s.doc_id for s in reply.sources if s.cited], sources=[s.doc_id for s in reply.sources]
            )
            if reply.generator == pb.GENERATOR_MODEL:
                generator = f"model {reply.model}"
        latencies.append((time.perf_counter() - started) * 1000)
        progress()
    return score_answers(generator, asked, dataset.qrels, latencies)
