"""Where a search's time goes: REST vs the search service's gRPC API vs the embedder alone, on `ragmesh up`.

    .venv/bin/python -m bench.bench_search [--queries 100] [--passages 300]

Starts the mesh as a real process with the real model, ingests msmarco passages, then times the same queries
(sequentially, p50/p95 in ms) per mode through REST, through gRPC Search, and the query embedding alone.
The REST - gRPC difference is what the gateway adds.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import grpc
import httpx
from ragmesh.embedder.v1 import embedder_service_pb2 as embedder_pb
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as embedder_grpc
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh.search.v1 import search_service_pb2_grpc as search_grpc

from tests.e2e.mesh_process import Mesh, Proc, wait_ready

SHARED = Path(__file__).resolve().parents[2] / "shared"
MODES = {
    "hybrid": search_pb.SEARCH_MODE_HYBRID,
    "dense": search_pb.SEARCH_MODE_DENSE,
    "sparse": search_pb.SEARCH_MODE_SPARSE,
}


def timed(call, inputs) -> tuple[float, float]:
    out = []
    for item in inputs:
        start = time.perf_counter()
        call(item)
        out.append((time.perf_counter() - start) * 1000)
    out.sort()
    return statistics.median(out), out[int(0.95 * (len(out) - 1))]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--queries", type=int, default=100)
    parser.add_argument("--passages", type=int, default=300)
    args = parser.parse_args()
    data = SHARED / "datasets/msmarco-5k"
    corpus = [json.loads(line) for line in (data / "corpus.jsonl").open()][: args.passages]
    queries = [json.loads(line)["text"] for line in (data / "queries.jsonl").open()]
    queries = (queries * (args.queries // len(queries) + 1))[: args.queries]
    with tempfile.TemporaryDirectory() as tmp:
        mesh = Mesh(Path(tmp) / "data")
        proc = Proc(["up"], mesh.env(), Path(tmp) / "up.log").start()
        try:
            wait_ready(mesh.url, [proc])
            with (
                httpx.Client(base_url=mesh.url, timeout=600) as http,
                grpc.insecure_channel(f"127.0.0.1:{mesh.ports['search']}") as search_channel,
                grpc.insecure_channel(f"127.0.0.1:{mesh.ports['embedder']}") as embedder_channel,
            ):
                docs = [{"text": c["text"], "doc_id": c["_id"]} for c in corpus]
                for i in range(0, len(docs), 100):
                    http.post("/api/v1/ingest/batch", json={"collection": "b", "documents": docs[i : i + 100]})
                search = search_grpc.SearchServiceStub(search_channel)
                embedder = embedder_grpc.EmbedderServiceStub(embedder_channel)
                for q in queries[:10]:  # warm up every path
                    http.post("/api/v1/search", json={"query": q, "collection": "b"})
                print(f"{'path':34s} {'p50 ms':>8s} {'p95 ms':>8s}")
                for mode, value in MODES.items():
                    rest = timed(
                        lambda q, m=mode: http.post(
                            "/api/v1/search", json={"query": q, "collection": "b", "mode": m, "top_k": 10}
                        ).raise_for_status(),
                        queries,
                    )
                    rpc = timed(
                        lambda q, v=value: search.Search(
                            search_pb.SearchRequest(query=q, collections=["b"], mode=v, top_k=10)
                        ),
                        queries,
                    )
                    print(f"{'REST search ' + mode:34s} {rest[0]:8.1f} {rest[1]:8.1f}")
                    print(f"{'gRPC Search ' + mode:34s} {rpc[0]:8.1f} {rpc[1]:8.1f}")
                    print(f"{'gateway adds (p50) ' + mode:34s} {rest[0] - rpc[0]:8.1f}")
                embed = timed(
                    lambda q: embedder.Embed(
                        embedder_pb.EmbedRequest(texts=[q], input_type=embedder_pb.INPUT_TYPE_QUERY)
                    ),
                    queries,
                )
                print(f"{'gRPC Embed (dense + sparse)':34s} {embed[0]:8.1f} {embed[1]:8.1f}")
        finally:
            proc.stop()


if __name__ == "__main__":
    main()
