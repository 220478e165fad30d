"""Sweep fusion choices over an already ingested collection, straight on the store (no mesh running).

    .venv/bin/python bench/bench_fusion.py --data-dir .ragmesh --collection eval-msmarco-5k \\
        ../shared/datasets/msmarco-5k

The queries are embedded once with the local model (the embedder service's own code, in process), then each
variant (mode, fusion, rrf k, (dense, sparse) weights, prefetch depth) runs every judged query on the store and
is scored with `ragmesh eval`'s metrics (documents ranked by their best chunk). Stop the mesh first: the
embedded store has one owner.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
from pathlib import Path

from ragmesh_common.evaluation import load_dataset, score_run
from ragmesh_store import EdgeStore, Query, Sparse

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def variants() -> list[tuple[str, dict]]:
    out: list[tuple[str, dict]] = [("dense", {"mode": "dense"}), ("sparse", {"mode": "sparse"})]
    for prefetch, k in itertools.product((50, 100, 200), (10, 30, 60, 100)):
        out.append((f"rrf k={k} prefetch={prefetch}", {"mode": "hybrid", "rrf_k": k, "prefetch_limit": prefetch}))
    for prefetch in (50, 100, 200):
        out.append((f"dbsf prefetch={prefetch}", {"mode": "hybrid", "fusion": "dbsf", "prefetch_limit": prefetch}))
    for weights in ((2.0, 1.0), (3.0, 1.0), (1.0, 3.0)):
        out.append((f"rrf k=60 weights={weights}", {"mode": "hybrid", "rrf_weights": weights, "prefetch_limit": 100}))
    return out


async def main() -> None:
    from ragmesh_embedder.config import EmbedderSettings
    from ragmesh_embedder.service import InputType, build_embedder

    parser = argparse.ArgumentParser()
    parser.add_argument("dataset", type=Path)
    parser.add_argument("--data-dir", type=Path, default=Path(".ragmesh"))
    parser.add_argument("--collection", required=True)
    args = parser.parse_args()
    dataset = load_dataset(args.dataset)
    query_ids = dataset.judged_queries()
    embedder = build_embedder(EmbedderSettings(backend="local"))
    embeddings = await embedder.embed([dataset.queries[q] for q in query_ids], InputType.QUERY)
    embedder.close()
    store = EdgeStore(args.data_dir, len(embeddings[0].dense))
    try:
        print(f"{'variant':42} nDCG@10 R@10  R@100 MRR@10")
        for name, fields in variants():
            runs: dict[str, list[str]] = {}
            for qid, e in zip(query_ids, embeddings, strict=True):
                query = Query(limit=400, dense=list(e.dense), sparse=Sparse(e.sparse.indices, e.sparse.values),
                              **fields)
                hits = store.query(args.collection, query)
                runs[qid] = list(dict.fromkeys(str(h.payload["doc_id"]) for h in hits))[:100]
            s = score_run(name, runs, dataset.qrels, [])
            print(f"{name:42} {s.ndcg_at_10:.3f}   {s.recall_at_10:.3f} {s.recall_at_100:.3f} {s.mrr_at_10:.3f}",
                  flush=True)
    finally:
        store.close()


if __name__ == "__main__":
    asyncio.run(main())
