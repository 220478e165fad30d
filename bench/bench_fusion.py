"""Fusion variants on an already ingested collection, straight on the store (no mesh running), on the dataset's
queries and on conditions the fusion was not tuned on.

    .venv/bin/python -m bench.make_checks ../shared/datasets/msmarco-5k .ragmesh-eval/checks
    .venv/bin/python -m bench.bench_fusion --data-dir .ragmesh-eval --collection eval-msmarco-5k \\
        ../shared/datasets/msmarco-5k .ragmesh-eval/checks/msmarco-5k-typo .ragmesh-eval/checks/msmarco-5k-keyword

Every dataset given must be over the collection's corpus. Queries are embedded once with the local model (the
embedder service's own code, in process). Conditions (`--conditions`):
- `as-is`: the queries;
- `bm25-noise`: the BM25 query replaced by as many random words of the corpus: the default must then track
  dense;
- `dense-noise`: the dense query replaced by a random direction: the default must then track BM25.
Variants run through the store as the search service does (`Searcher._query` for adaptive fusion): dense,
sparse, the fixed fusions, adaptive without and with dense PRF (the default: Rocchio depth 3, beta 0.2; and
pyserini's depth 5, alpha 0.4 beta 0.6), and RM3 on the BM25 query (Anserini's defaults: 10 feedback chunks,
10 terms, original query weight 0.5; from BM25's own list or from the fused one) before adaptive fusion.
Printed per dataset and condition: nDCG@10 / leaderboard-style nDCG@10 (documents ranked by their best chunk).
Stop the mesh first: the embedded store has one owner.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import random
import re
from collections.abc import Callable
from pathlib import Path

from ragmesh_cli.evaluation import load_dataset, score_run
from ragmesh_search.fusion import Plan
from ragmesh_search.service import Searcher
from ragmesh_store import EdgeStore, Query, Sparse, engine_ids

os.environ.setdefault("HF_HUB_OFFLINE", "1")
DEPTH = 100
SEED = 13
ADAPTIVE = Plan("hybrid", "hybrid", "adaptive")
RM3_DOCS, RM3_TERMS, RM3_ORIGINAL = 10, 10, 0.5


def rm3(store: EdgeStore, collection: str, query: Query, feedback: list[str]) -> Sparse:
    """RM3 (Lavrenko & Croft; Anserini's defaults): the original terms (weight 0.5, spread evenly) plus the
    feedback chunks' 10 heaviest terms (their BM25 document weights, each chunk's normalised to sum 1)."""
    with store._get(collection).use() as shard:
        records = shard.retrieve(engine_ids(feedback), False, ["bm25"])
    weights: dict[int, float] = {}
    for record in records:
        vector = record.vector["bm25"]
        total = sum(vector.values) or 1.0
        for term, value in zip(vector.indices, vector.values, strict=True):
            weights[term] = weights.get(term, 0.0) + value / total / len(records)
    expansion = sorted(weights.items(), key=lambda kv: -kv[1])[:RM3_TERMS]
    norm = sum(v for _, v in expansion) or 1.0
    original = list(query.sparse.indices) if query.sparse else []
    out = {t: RM3_ORIGINAL / len(original) for t in original}
    for term, value in expansion:
        out[term] = out.get(term, 0.0) + (1 - RM3_ORIGINAL) * value / norm
    return Sparse(list(out), list(out.values()))


def variants(store: EdgeStore, collection: str) -> dict[str, Callable]:
    def fixed(**fields):
        return lambda query: asyncio.to_thread(store.query, collection, dataclasses.replace(query, **fields))

    def adaptive(prf_docs: int, prf_weight: float = 0.2):
        searcher = Searcher(
            store,
            None,
            default_mode="hybrid",
            prefetch_limit=DEPTH,
            rrf_k=60,  # type: ignore[arg-type]
            max_query_chars=10_000,
            prf_docs=prf_docs,
            prf_weight=prf_weight,
        )
        return lambda query: searcher._query(collection, ADAPTIVE, query)

    def with_rm3(fused: bool):
        plain = adaptive(0)

        async def run(query: Query):
            if fused:
                feedback = [h.id for h in (await plain(query))[:RM3_DOCS]]
            else:
                sparse = await asyncio.to_thread(
                    store.query, collection, Query(mode="sparse", limit=RM3_DOCS, sparse=query.sparse)
                )
                feedback = [h.id for h in sparse]
            if not feedback:
                return await plain(query)
            expanded = await asyncio.to_thread(rm3, store, collection, query, feedback)
            return await plain(dataclasses.replace(query, sparse=expanded))

        return run

    return {
        "dense": fixed(mode="dense"),
        "sparse": fixed(mode="sparse"),
        "relative_score 0.75": fixed(fusion="relative_score"),
        "rrf k=60": fixed(fusion="rrf"),
        "dbsf": fixed(fusion="dbsf"),
        "adaptive, no PRF": adaptive(0),
        "adaptive + PRF (default)": adaptive(3, 0.2),
        "adaptive + PRF pyserini 5/.4/.6": adaptive(5, 1.5),
        "adaptive + RM3 (BM25 feedback)": with_rm3(False),
        "adaptive + RM3 (fused feedback)": with_rm3(True),
    }


async def main() -> None:
    from ragmesh_embedder.config import EmbedderSettings
    from ragmesh_embedder.service import InputType, build_embedder

    parser = argparse.ArgumentParser()
    parser.add_argument("datasets", type=Path, nargs="+")
    parser.add_argument("--data-dir", type=Path, default=Path(".ragmesh"))
    parser.add_argument("--collection", required=True)
    parser.add_argument("--conditions", default="as-is,bm25-noise,dense-noise")
    args = parser.parse_args()
    datasets = [load_dataset(d) for d in args.datasets]
    embedder = build_embedder(EmbedderSettings(backend="local"))
    rng = random.Random(SEED)
    words = sorted({w for _, text in datasets[0].corpus.values() for w in re.findall(r"[a-z]{4,}", text.lower())})
    runs = []
    for path, dataset in zip(args.datasets, datasets, strict=True):
        ids = dataset.judged_queries()
        embeddings = await embedder.embed([dataset.queries[q] for q in ids], InputType.QUERY)
        noise = await embedder.embed(
            [" ".join(rng.sample(words, max(1, len(s.indices)))) for s in embeddings.sparse], InputType.QUERY
        )
        runs.append((path.name, dataset, ids, embeddings, noise))
    embedder.close()
    store = EdgeStore(args.data_dir, runs[0][3].dense.shape[1])
    table = variants(store, args.collection)
    try:
        for name, dataset, ids, embeddings, noise in runs:
            for condition in args.conditions.split(","):
                print(f"\n{name}, {condition}: {len(ids)} queries — nDCG@10 / leaderboard-style nDCG@10")
                queries = []
                for e_dense, e_sparse, n_sparse in zip(embeddings.dense, embeddings.sparse, noise.sparse, strict=True):
                    dense = list(e_dense)
                    sparse = Sparse(e_sparse.indices, e_sparse.values)
                    if condition == "bm25-noise":
                        sparse = Sparse(n_sparse.indices, n_sparse.values)
                    elif condition == "dense-noise":
                        dense = [rng.gauss(0, 1) for _ in dense]
                    queries.append(Query(mode="hybrid", limit=400, dense=dense, sparse=sparse, prefetch_limit=DEPTH))
                for variant, run in table.items():
                    ranked = {}
                    for qid, query in zip(ids, queries, strict=True):
                        hits = await run(query)
                        ranked[qid] = list(dict.fromkeys(str(h.payload["doc_id"]) for h in hits))[:100]
                    s = score_run(variant, ranked, dataset.qrels, [])
                    print(f"  {variant:34} {s.ndcg_at_10:.3f} / {s.ndcg_at_10_retrieved:.3f}", flush=True)
    finally:
        store.close()


if __name__ == "__main__":
    asyncio.run(main())
