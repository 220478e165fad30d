"""The embedded store at scale: synthetic chunks (384-d vectors + BM25 sparse vectors + payloads) through the
EdgeStore adapter, as the indexer writes them and the search service reads them.

    .venv/bin/python -m bench.bench_store [--points 100000] [--queries 200] [--ef 32,64,128,256] [--json PATH]

Dense vectors are a mixture of Gaussian clusters (closer to real embeddings than uniform noise, which no
index handles well), normalised; texts draw words from a Zipf vocabulary and go through Qdrant's BM25; each
chunk has the indexer's payload plus filterable metadata (`lang`: 10 values, `shelf`: 100 values). The exact
top-10 of every query is computed with numpy while the points are generated, so recall@10 does not depend on
the engine.

Reports: upsert rate (batches of 256 points), the HNSW build (optimize) time, p50/p95 of dense, sparse, hybrid
(relative score, RRF, and the default adaptive fusion as the search service runs it) and filtered dense
queries (top 10, one client), recall@10 of dense search against the exact top 10 for each `ef` (and the
default the store uses), RSS, disk and the time to reopen the store and answer the first query.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import numpy as np

DIM = 384
BATCH = 256
VOCABULARY = 30_000


def rss_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def disk_mb(path: Path) -> float:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) / 2**20


class Corpus:
    """Deterministic synthetic chunks, generated block by block."""

    def __init__(self, seed: int = 7, clusters: int = 2000) -> None:
        self.rng = np.random.default_rng(seed)
        centers = self.rng.normal(size=(clusters, DIM)).astype(np.float32)
        self.centers = centers / np.linalg.norm(centers, axis=1, keepdims=True)
        ranks = np.arange(1, VOCABULARY + 1)
        self.word_p = (1 / ranks) / (1 / ranks).sum()

    def vectors(self, n: int) -> np.ndarray:
        which = self.rng.integers(0, len(self.centers), n)
        v = self.centers[which] + self.rng.normal(scale=0.06, size=(n, DIM)).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def texts(self, n: int, words: int = 40) -> list[str]:
        ids = self.rng.choice(VOCABULARY, size=(n, words), p=self.word_p)
        return [" ".join(f"w{w}" for w in row) for row in ids]


def percentiles(values: list[float]) -> dict[str, float]:
    values = sorted(values)
    return {
        "p50_ms": round(statistics.median(values), 3),
        "p95_ms": round(values[min(len(values) - 1, int(0.95 * len(values)))], 3),
    }


def timed(fn, inputs) -> tuple[dict[str, float], list]:
    out, results = [], []
    for item in inputs:
        started = time.perf_counter()
        results.append(fn(item))
        out.append((time.perf_counter() - started) * 1000)
    return percentiles(out), results


def adaptive_latency(store, query_vectors: np.ndarray, sparse_of: list) -> dict[str, float]:
    """The default hybrid (adaptive fusion with dense feedback) as the search service runs it on the store: its
    two hybrid-evidence calls, the fusion and the payload lookup."""
    from ragmesh_search.config import SearchSettings
    from ragmesh_search.service import Searcher
    from ragmesh_store import Query

    settings = SearchSettings()  # the search service's defaults
    searcher = Searcher.from_settings(settings, store, None)  # type: ignore[arg-type]
    return timed(
        lambda q: searcher._adaptive(
            "bench",
            Query(
                mode="hybrid",
                limit=10,
                dense=query_vectors[q].tolist(),
                sparse=sparse_of[q],
                prefetch_limit=settings.prefetch_limit,
                fusion="adaptive",
            ),
            sparse_of[q],
        ),
        range(len(sparse_of)),
    )[0]


def run(points: int, queries: int, efs: list[int], data_dir: Path, hnsw_ef: int | None) -> dict:
    import qdrant_edge as qe
    from ragmesh_store import ChunkPoint, EdgeStore, Query, Sparse

    bm25 = qe.Bm25()
    corpus = Corpus()
    query_vectors = corpus.vectors(queries)
    query_texts = [" ".join(t.split()[:4]) for t in corpus.texts(queries, words=12)]
    query_sparse = [bm25.embed_query(t) for t in query_texts]
    best = np.full((queries, 10), -2.0, dtype=np.float32)  # exact top-10 scores and ids, kept while generating
    best_ids = np.full((queries, 10), -1, dtype=np.int64)
    store = EdgeStore(data_dir, DIM, hnsw_ef=hnsw_ef)  # the store's default flush interval, as the mesh runs it
    store.ensure_collection("bench")
    report: dict = {"points": points, "dimension": DIM, "queries": queries}
    upsert_seconds = 0.0
    for start in range(0, points, BATCH):
        n = min(BATCH, points - start)
        vectors = corpus.vectors(n)
        texts = corpus.texts(n)
        scores = query_vectors @ vectors.T
        merged = np.concatenate([best, scores], axis=1)
        merged_ids = np.concatenate([best_ids, np.broadcast_to(np.arange(start, start + n), (queries, n))], axis=1)
        top = np.argpartition(-merged, 10, axis=1)[:, :10]
        best, best_ids = np.take_along_axis(merged, top, 1), np.take_along_axis(merged_ids, top, 1)
        batch = []
        for i, (vector, text) in enumerate(zip(vectors, texts, strict=True)):
            k = start + i
            sparse = bm25.embed_document(text)
            payload = {
                "doc_id": f"doc-{k // 4}",
                "chunk_index": k % 4,
                "text": text,
                "title": f"Document {k // 4}",
                "source": "text",
                "content_hash": f"{k // 4:032x}",
                "metadata": {"lang": f"l{k % 10}", "shelf": f"s{k % 100}"},
            }
            batch.append(
                ChunkPoint(
                    id=str(uuid.UUID(int=k)),
                    dense=vector.tolist(),
                    sparse=Sparse(list(sparse.indices), list(sparse.values)),
                    payload=payload,
                )
            )
        started = time.perf_counter()
        store.upsert("bench", batch)
        upsert_seconds += time.perf_counter() - started
    report["upsert_points_per_second"] = round(points / upsert_seconds, 1)
    started = time.perf_counter()
    store.optimize("bench")
    report["optimize_seconds"] = round(time.perf_counter() - started, 1)
    store.flush()

    exact = [set(best_ids[q][np.argsort(-best[q])].tolist()) for q in range(queries)]

    def dense(q: int, ef: int | None = None, filters: dict | None = None) -> list:
        store._hnsw_ef = ef if ef is not None else hnsw_ef
        return store.query(
            "bench", Query(mode="dense", limit=10, dense=query_vectors[q].tolist(), filters=filters or {})
        )

    def recall(results: list) -> float:
        return round(
            statistics.mean(len({uuid.UUID(h.id).int for h in hits} & exact[q]) / 10 for q, hits in enumerate(results)),
            4,
        )

    sweep = []
    for ef in efs:
        dense(0, ef)  # warm
        latency, results = timed(lambda q, ef=ef: dense(q, ef), range(queries))
        sweep.append({"ef": ef, "recall_at_10": recall(results), **latency})
    report["ef_sweep"] = sweep
    latency, results = timed(dense, range(queries))
    report["default_ef"] = hnsw_ef
    report["recall_at_10"] = recall(results)
    kinds = {"dense": latency}
    sparse_of = [Sparse(list(s.indices), list(s.values)) for s in query_sparse]
    kinds["sparse"] = timed(
        lambda q: store.query("bench", Query(mode="sparse", limit=10, sparse=sparse_of[q])), range(queries)
    )[0]
    for fusion in ("relative_score", "rrf"):
        kinds[f"hybrid_{fusion}"] = timed(
            lambda q, f=fusion: store.query(
                "bench",
                Query(
                    mode="hybrid",
                    limit=10,
                    dense=query_vectors[q].tolist(),
                    sparse=sparse_of[q],
                    prefetch_limit=100,
                    fusion=f,
                ),
            ),
            range(queries),
        )[0]
    kinds["hybrid_adaptive"] = adaptive_latency(store, query_vectors, sparse_of)
    kinds["dense_filter_10pct"] = timed(lambda q: dense(q, filters={"metadata.lang": f"l{q % 10}"}), range(queries))[0]
    kinds["dense_filter_1pct"] = timed(lambda q: dense(q, filters={"metadata.shelf": f"s{q % 100}"}), range(queries))[0]
    report["queries_ms"] = kinds
    report["rss_mb"] = round(rss_mb(), 1)
    store.close()
    report["disk_mb"] = round(disk_mb(data_dir), 1)
    started = time.perf_counter()
    store = EdgeStore(data_dir, DIM, hnsw_ef=hnsw_ef)
    store.query("bench", Query(mode="dense", limit=10, dense=query_vectors[0].tolist()))
    report["reopen_seconds"] = round(time.perf_counter() - started, 3)
    store.close()
    return report


def markdown(report: dict) -> str:
    lines = [
        f"Embedded store (qdrant-edge through EdgeStore), {report['points']:,} chunks of {report['dimension']}-d "
        f"+ BM25, {report['queries']} queries, top 10, one client:",
        "",
        "| query | p50 ms | p95 ms |",
        "|---|---|---|",
    ]
    for kind, latency in report["queries_ms"].items():
        lines.append(f"| {kind} | {latency['p50_ms']} | {latency['p95_ms']} |")
    lines += ["", "| ef | recall@10 vs exact | p50 ms | p95 ms |", "|---|---|---|---|"]
    for row in report["ef_sweep"]:
        lines.append(f"| {row['ef']} | {row['recall_at_10']} | {row['p50_ms']} | {row['p95_ms']} |")
    lines += [
        "",
        f"Upsert {report['upsert_points_per_second']:,} points/s (batches of {BATCH}); HNSW build "
        f"{report['optimize_seconds']} s; recall@10 at the default ef ({report['default_ef'] or 'Qdrant'}) "
        f"{report['recall_at_10']}; RSS {report['rss_mb']} MB; disk {report['disk_mb']} MB; reopen + first "
        f"query {report['reopen_seconds']} s.",
    ]
    return "\n".join(lines)


def main() -> None:
    from ragmesh_store import StoreSettings

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--ef", default="16,32,64,128,256", help="comma-separated hnsw_ef values to sweep")
    parser.add_argument("--data-dir", type=Path, help="where to build the store (default: a temporary directory)")
    parser.add_argument("--json", type=Path, help="write {name, markdown, data} here")
    args = parser.parse_args()
    hnsw_ef = StoreSettings().hnsw_ef
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="ragmesh-bench-store-"))
    try:
        report = run(args.points, args.queries, [int(e) for e in args.ef.split(",") if e], data_dir, hnsw_ef)
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)
    text = markdown(report)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"name": "store", "markdown": text, "data": report}, indent=2))


if __name__ == "__main__":
    main()
