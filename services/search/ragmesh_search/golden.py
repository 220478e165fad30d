"""Golden sets and evaluations: a collection's judged queries, and the scores of its current index on them.

A golden set is kept with its collection (a store record, so it survives restarts and goes when the collection
is deleted). Evaluating runs every golden query through this service's own search (the mode asked, grouped by
document, top 10), scores the document ranking as `ragmesh eval` does (nDCG@10, recall@10, MRR@10; see
`ragmesh_common.relevance`), appends the result to the collection's history (the newest HISTORY_SIZE are kept,
oldest first) and exports the latest figures as gauges. No gRPC code here.

A versioned collection is scored on its active version, or on another version it keeps (one a re-index is
building): that scoring is returned but neither added to the history nor exported. The golden set and the
history are records of the collection's own name, whichever version is active.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from datetime import UTC, datetime

from ragmesh_common import validation
from ragmesh_common.errors import RagmeshError, invalid_argument, not_found
from ragmesh_common.reasons import Reason
from ragmesh_common.relevance import mean_at_10
from ragmesh_store import Store
from ragmesh_store.aio import store_call
from ragmesh_store.versions import read_versions

from .fusion import SearchMode
from .metrics import QualityMetrics
from .records import Evaluation, GoldenQuery, GoldenSet
from .service import Searcher, SearchIn, version_not_found

log = logging.getLogger(__name__)

MAX_QUERIES = validation.GOLDEN_MAX_QUERIES
MAX_JUDGMENTS_PER_QUERY = validation.GOLDEN_MAX_JUDGMENTS_PER_QUERY
MAX_JUDGMENTS = validation.GOLDEN_MAX_JUDGMENTS
MAX_GRADE = validation.GOLDEN_MAX_GRADE
QUERY_ID_MAX_CHARS = validation.GOLDEN_QUERY_ID_MAX_CHARS
HISTORY_SIZE = 100
MAX_LIST_LIMIT = 1000
DEPTH = 10  # documents ranked per query: the metrics are @10
GOLDEN_RECORD = "golden_set"
HISTORY_RECORD = "evaluations"
# Golden queries searched at once during an evaluation.
_CONCURRENCY = 8
# Relevant doc_ids looked up per store call when a set is stored.
_LOOKUP_BATCH = 1000
# Missing documents named in a GOLDEN_DOCUMENT_NOT_FOUND message.
_NAMED = 5


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def fingerprint(queries: Sequence[GoldenQuery]) -> str:
    """16 hex digits of the SHA-256 of the set's content (ids, texts, judgments; order-independent)."""
    canonical = json.dumps(
        sorted([q.query_id, q.text, sorted(q.relevant.items())] for q in queries),
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def checked_queries(queries: Sequence[GoldenQuery], max_query_chars: int) -> list[GoldenQuery]:
    """The set's queries, or INVALID_ARGUMENT with the first rule broken (the field named)."""
    if not queries:
        raise invalid_argument(Reason.GOLDEN_SET_EMPTY, "the golden set has no queries", field="queries")
    if len(queries) > MAX_QUERIES:
        raise invalid_argument(
            Reason.GOLDEN_SET_TOO_LARGE,
            f"the golden set has {len(queries)} queries; the limit is {MAX_QUERIES}",
            field="queries",
            limit=MAX_QUERIES,
        )
    total = sum(len(q.relevant) for q in queries)
    if total > MAX_JUDGMENTS:
        raise invalid_argument(
            Reason.GOLDEN_SET_TOO_LARGE,
            f"the golden set has {total} judgments; the limit is {MAX_JUDGMENTS}",
            field="queries",
            limit=MAX_JUDGMENTS,
        )
    seen: set[str] = set()
    for i, q in enumerate(queries):
        where = f"queries[{i}]"
        if not q.query_id or len(q.query_id) > QUERY_ID_MAX_CHARS or not q.query_id.strip():
            raise invalid_argument(
                Reason.GOLDEN_QUERY_INVALID,
                f"{where}: query_id must be 1..{QUERY_ID_MAX_CHARS} characters, not blank",
                field=f"{where}.query_id",
            )
        if q.query_id in seen:
            raise invalid_argument(
                Reason.GOLDEN_QUERY_DUPLICATE,
                f"{where}: query_id {q.query_id[:80]!r} is used by an earlier query",
                field=f"{where}.query_id",
                query_id=q.query_id[:80],
            )
        seen.add(q.query_id)
        if not q.text.strip() or len(q.text) > max_query_chars:
            raise invalid_argument(
                Reason.GOLDEN_QUERY_INVALID,
                f"{where}: the text must be 1..{max_query_chars} characters, not blank",
                field=f"{where}.text",
                query_id=q.query_id[:80],
            )
        if len(q.relevant) > MAX_JUDGMENTS_PER_QUERY:
            raise invalid_argument(
                Reason.GOLDEN_SET_TOO_LARGE,
                f"{where} has {len(q.relevant)} judgments; the limit is {MAX_JUDGMENTS_PER_QUERY} per query",
                field=f"{where}.relevant",
                limit=MAX_JUDGMENTS_PER_QUERY,
            )
        for doc_id, grade in q.relevant.items():
            validation.doc_id(doc_id, field=f"{where}.relevant")
            if not 0 <= grade <= MAX_GRADE:
                raise invalid_argument(
                    Reason.GOLDEN_GRADE_INVALID,
                    f"{where}: document {doc_id[:80]!r} has grade {grade}; "
                    f"grades are 0..{MAX_GRADE} (0: judged not relevant)",
                    field=f"{where}.relevant",
                    query_id=q.query_id[:80],
                    grade=grade,
                )
        if not any(grade > 0 for grade in q.relevant.values()):
            raise invalid_argument(
                Reason.GOLDEN_QUERY_INVALID,
                f"{where}: query {q.query_id[:80]!r} has no relevant document (a grade above 0): nothing to find",
                field=f"{where}.relevant",
                query_id=q.query_id[:80],
            )
    return list(queries)


class GoldenSets:
    """Golden sets, evaluations and their history over the store, searching with `searcher`. One per process."""

    def __init__(self, store: Store, searcher: Searcher, metrics: QualityMetrics | None = None) -> None:
        self.store = store
        self.searcher = searcher
        self.metrics = metrics
        self._locks: dict[str, asyncio.Lock] = {}  # per collection: one evaluation (history update) at a time

    # --- the set ------------------------------------------------------------------------------------------
    async def set(self, collection: str, queries: Sequence[GoldenQuery]) -> GoldenSet:
        """Validate and store a collection's golden set, replacing any it had."""
        collection = validation.collection_name(collection)
        queries = checked_queries(queries, self.searcher.max_query_chars)
        await self._require_collection(collection)
        await self._require_documents(collection, queries)
        golden = GoldenSet(collection, queries, _now(), fingerprint(queries))
        record = {
            "updated_at": golden.updated_at,
            "golden_set_id": golden.golden_set_id,
            "queries": [{"query_id": q.query_id, "text": q.text, "relevant": dict(q.relevant)} for q in queries],
        }
        await store_call(self.store.set_collection_record, collection, GOLDEN_RECORD, record)
        return golden

    async def get(self, collection: str) -> GoldenSet:
        """The collection's golden set; NOT_FOUND GOLDEN_SET_NOT_FOUND when it has none."""
        collection = validation.collection_name(collection)
        record = await store_call(self.store.collection_record, collection, GOLDEN_RECORD)
        if not isinstance(record, dict) or not record.get("queries"):
            raise not_found(
                Reason.GOLDEN_SET_NOT_FOUND,
                f"collection {collection!r} has no golden set; store one first "
                "(PUT /api/v1/collections/{name}/golden, `ragmesh golden upload`)",
                collection=collection,
            )
        queries = [
            GoldenQuery(str(q["query_id"]), str(q["text"]), {str(d): int(g) for d, g in q["relevant"].items()})
            for q in record["queries"]
        ]
        return GoldenSet(
            collection,
            queries,
            str(record.get("updated_at", "")),
            str(record.get("golden_set_id") or fingerprint(queries)),
        )

    async def delete(self, collection: str) -> GoldenSet:
        """Remove the collection's golden set (its history stays); returns the set removed."""
        golden = await self.get(collection)
        await store_call(self.store.set_collection_record, golden.collection, GOLDEN_RECORD, None)
        return golden

    async def _require_collection(self, collection: str) -> None:
        if not await store_call(self.store.collection_exists, collection):
            raise not_found(
                Reason.COLLECTION_NOT_FOUND, f"collection {collection!r} does not exist", collection=collection
            )

    async def _require_documents(self, collection: str, queries: Sequence[GoldenQuery]) -> None:
        """NOT_FOUND GOLDEN_DOCUMENT_NOT_FOUND when a document graded relevant is not in the collection (a set
        pointing at nothing would score 0 whatever the index)."""
        wanted = sorted({d for q in queries for d, g in q.relevant.items() if g > 0})
        active = (await store_call(read_versions, self.store, collection)).physical()
        found: set[str] = set()
        for start in range(0, len(wanted), _LOOKUP_BATCH):
            batch = wanted[start : start + _LOOKUP_BATCH]
            rows = await store_call(self.store.list_documents, active, {"doc_id": batch}, [])
            found.update(str(row["doc_id"]) for row in rows)
        missing = [(q.query_id, d) for q in queries for d, g in q.relevant.items() if g > 0 and d not in found]
        if missing:
            named = ", ".join(f"{d!r} (query {q!r})" for q, d in missing[:_NAMED])
            more = f" and {len(missing) - _NAMED} more" if len(missing) > _NAMED else ""
            raise not_found(
                Reason.GOLDEN_DOCUMENT_NOT_FOUND,
                f"{len(missing)} relevant document(s) of the golden set are "
                f"not in collection {collection!r}: {named}{more}; ingest them first (their doc_ids must "
                "match)",
                collection=collection,
                missing=len(missing),
                doc_id=missing[0][1][:80],
                query_id=missing[0][0][:80],
            )

    # --- evaluations --------------------------------------------------------------------------------------
    async def evaluate(self, collection: str, modes: Sequence[SearchMode] = (), version: int = 0) -> list[Evaluation]:
        """Score the collection on its golden set in each mode (the service's default mode when none is given):
        its active version (`version` 0 or the active one's number), whose scores are added to its history and
        exported; or another version it keeps, whose scores are only returned. NOT_FOUND VERSION_NOT_FOUND for
        a version it does not keep."""
        golden = await self.get(collection)
        if version < 0:
            raise invalid_argument(
                Reason.VERSION_INVALID,
                f"version must be 0 (the active one) or a version number, not {version}",
                field="version",
                version=version,
            )
        versions = await store_call(read_versions, self.store, golden.collection)
        if version and versions.get(version) is None:
            raise version_not_found(versions, version)
        if version and version != versions.active:
            return await self.score(golden, modes, version)
        lock = self._locks.setdefault(golden.collection, asyncio.Lock())
        async with lock:
            evaluations = await self.score(golden, modes, versions.active)
            await self._append(golden.collection, evaluations)
        if self.metrics is not None:
            for evaluation in evaluations:
                self.metrics.record(evaluation)
        return evaluations

    async def score(self, golden: GoldenSet, modes: Sequence[SearchMode] = (), version: int = 1) -> list[Evaluation]:
        """Score `version` of the golden set's collection in each mode; nothing is recorded. VERSION_NOT_FOUND
        if the collection no longer keeps that version."""
        modes = list(dict.fromkeys(modes)) or [self.searcher.default_mode]
        versions = await store_call(read_versions, self.store, golden.collection)
        if versions.get(version) is None:
            raise version_not_found(versions, version)
        stats = await store_call(self.store.stats, versions.physical(version))
        return [await self._score(golden, version, mode, stats.documents, stats.chunks) for mode in modes]

    async def _score(
        self, golden: GoldenSet, version: int, mode: SearchMode, documents: int, chunks: int
    ) -> Evaluation:
        started = time.perf_counter()
        limit = asyncio.Semaphore(_CONCURRENCY)
        fusions: set[str | None] = set()
        model_ids: set[str] = set()

        async def ranked(query: GoldenQuery) -> list[str]:
            async with limit:
                searched = await self.searcher.search(
                    SearchIn(
                        query=query.text,
                        collections=[golden.collection],
                        top_k=DEPTH,
                        mode=mode,
                        group_by_document=True,
                        versions={golden.collection: version},
                    )
                )
            fusions.add(searched.plan.fusion)
            model_ids.update(searched.model_ids.values())
            return [str(f.hit.payload.get("doc_id", "")) for f in searched.found]

        rankings = await asyncio.gather(*(ranked(q) for q in golden.queries))
        runs = {q.query_id: r for q, r in zip(golden.queries, rankings, strict=True)}
        means = mean_at_10(runs, {q.query_id: q.relevant for q in golden.queries})
        return Evaluation(
            collection=golden.collection,
            evaluated_at=_now(),
            mode=mode,
            fusion=next(iter(fusions), None),
            queries=len(runs),
            documents=documents,
            chunks=chunks,
            model="" if mode == "sparse" else next(iter(model_ids), ""),
            golden_set_id=golden.golden_set_id,
            took_ms=round((time.perf_counter() - started) * 1000, 3),
            version=version,
            **means,
        )

    async def _append(self, collection: str, evaluations: Sequence[Evaluation]) -> None:
        kept = await self._history(collection)
        runs = [dataclasses.asdict(e) for e in [*kept, *evaluations]][-HISTORY_SIZE:]
        await store_call(self.store.set_collection_record, collection, HISTORY_RECORD, {"runs": runs})

    async def _history(self, collection: str) -> list[Evaluation]:
        record = await store_call(self.store.collection_record, collection, HISTORY_RECORD)
        runs = record.get("runs", []) if isinstance(record, dict) else []
        return [Evaluation.from_record(r) for r in runs if isinstance(r, dict)]

    async def history(self, collection: str, mode: SearchMode | None = None, limit: int = 0) -> list[Evaluation]:
        """The collection's evaluations, oldest first: only `mode`'s when given, the newest `limit` when > 0."""
        collection = validation.collection_name(collection)
        if not 0 <= limit <= MAX_LIST_LIMIT:
            raise invalid_argument(
                Reason.LIMIT_OUT_OF_RANGE, f"limit must be between 0 and {MAX_LIST_LIMIT}", field="limit", limit=limit
            )
        runs = [e for e in await self._history(collection) if mode is None or e.mode == mode]
        return runs[-limit:] if limit else runs

    async def export_latest(self) -> None:
        """Set the quality gauges from every collection's newest evaluation per mode (at start-up)."""
        if self.metrics is None:
            return
        try:
            names = await store_call(self.store.list_collections)
        except RagmeshError as exc:
            log.warning("could not read the collections' evaluation histories: %s", exc)
            return
        for name in names:
            try:
                runs = await self._history(name)
            except RagmeshError:
                continue  # deleted meanwhile, or the store failed: the next evaluation sets them
            for evaluation in runs:  # oldest first: the newest of each mode wins
                self.metrics.record(evaluation)
