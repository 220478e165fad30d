"""What the answer service adds over a bare search, and its time to first token, in one run.

    .venv/bin/python -m bench.bench_answer [--queries 60] [--passages 300] [--json results.json]

Starts `ragmesh up` (the real model; no chat model configured, so its answer service answers extractively) and
a second answer service (`ragmesh serve answer`) on the same search and embedder whose chat model is the local
fake OpenAI-compatible server (tests/support/fake_chat.py) with no artificial delay. It ingests msmarco
passages, then times the same questions, one at a time, each question through every path in turn:

- gRPC `Search` (dense, top 5): the baseline, the retrieval every answer starts with;
- gRPC `AskStream`, extractive: time to the first piece of the answer and to the whole answer (the sentences
  of the retrieved chunks ranked by the embedder);
- gRPC `AskStream` with the fake model: the same, where the model answers at once;
- REST `POST /api/v1/search` and `POST /api/v1/ask` (extractive): the same through the gateway.

"Added" is p50(answer path) - p50(search): what the answer service itself costs. Every number comes from one
run on one machine; compare the ratios, not the milliseconds, across machines.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import grpc
import httpx
from ragmesh.answer.v1 import answer_service_pb2 as answer_pb
from ragmesh.answer.v1 import answer_service_pb2_grpc as answer_grpc
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh.search.v1 import search_service_pb2_grpc as search_grpc

from tests.e2e.mesh_process import Mesh, Proc, free_port, wait_ready, wait_serving
from tests.support.fake_chat import FakeChat

SHARED = Path(__file__).resolve().parents[2] / "shared"
COLLECTION = "bench"
TOP_K = 5


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def timed(paths: dict[str, Callable[[str], float | None]], queries: Iterable[str]) -> dict[str, tuple[list, list]]:
    """Per path, (total ms, first-token ms) per query. The paths take turns on each query, so a burst of load
    from elsewhere on the machine hits them all alike. A path's call returns its first-token time (seconds,
    perf_counter), or None."""
    out: dict[str, tuple[list, list]] = {name: ([], []) for name in paths}
    for query in queries:
        for name, call in paths.items():
            start = time.perf_counter()
            first = call(query)
            out[name][0].append((time.perf_counter() - start) * 1000)
            if first is not None:
                out[name][1].append((first - start) * 1000)
    return out


def stream_answer(stub: answer_grpc.AnswerServiceStub) -> Callable[[str], float]:
    def ask(query: str) -> float:
        first = None
        final = None
        for event in stub.AskStream(answer_pb.AskStreamRequest(query=query, collections=[COLLECTION], top_k=TOP_K)):
            if event.WhichOneof("event") == "delta" and first is None:
                first = time.perf_counter()
            elif event.WhichOneof("event") == "answer":
                final = event.answer
        assert final is not None and final.sources, query
        return first if first is not None else time.perf_counter()

    return ask


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=60)
    parser.add_argument("--passages", type=int, default=300)
    parser.add_argument("--json", type=Path, help="also write {name, markdown, data} here")
    args = parser.parse_args()
    data = SHARED / "datasets/msmarco-5k"
    corpus = [json.loads(line) for line in (data / "corpus.jsonl").open()][: args.passages]
    queries = [json.loads(line)["text"] for line in (data / "queries.jsonl").open()]
    queries = (queries * (args.queries // len(queries) + 1))[: args.queries]

    with tempfile.TemporaryDirectory() as tmp, FakeChat() as chat:
        # Every question gets an answer: relevance is not what is measured here.
        mesh = Mesh(Path(tmp) / "data", extra_env={"RAGMESH_ANSWER_MIN_RELEVANCE": "0"})
        up = Proc(["up"], mesh.env(), Path(tmp) / "up.log").start()
        model_port = free_port()
        model_env = mesh.env() | {
            "RAGMESH_ANSWER_PORT": str(model_port),
            "RAGMESH_ANSWER_METRICS_PORT": "0",
            "RAGMESH_ANSWER_BASE_URL": chat.url,
            "RAGMESH_ANSWER_MODEL": "fake-chat",
            "RAGMESH_DATA_DIR": str(Path(tmp) / "model-answer"),
        }
        model_answer = Proc(["serve", "answer"], model_env, Path(tmp) / "answer.log").start()
        try:
            wait_ready(mesh.url, [up])
            wait_serving(f"127.0.0.1:{model_port}", [model_answer])
            with (
                httpx.Client(base_url=mesh.url, timeout=600) as http,
                grpc.insecure_channel(f"127.0.0.1:{mesh.ports['search']}") as search_channel,
                grpc.insecure_channel(f"127.0.0.1:{mesh.ports['answer']}") as extractive_channel,
                grpc.insecure_channel(f"127.0.0.1:{model_port}") as model_channel,
            ):
                docs = [{"text": c["text"], "doc_id": c["_id"]} for c in corpus]
                for i in range(0, len(docs), 100):
                    http.post(
                        "/api/v1/ingest/batch", json={"collection": COLLECTION, "documents": docs[i : i + 100]}
                    ).raise_for_status()
                search = search_grpc.SearchServiceStub(search_channel)

                def bare_search(query: str) -> None:
                    search.Search(
                        search_pb.SearchRequest(
                            query=query,
                            collections=[COLLECTION],
                            top_k=TOP_K,
                            mode=search_pb.SEARCH_MODE_DENSE,
                            score_threshold=0,
                        )
                    )

                def rest_search(query: str) -> None:
                    http.post(
                        "/api/v1/search",
                        json={"query": query, "collection": COLLECTION, "top_k": TOP_K, "mode": "dense"},
                    ).raise_for_status()

                def rest_ask(query: str) -> None:
                    http.post(
                        "/api/v1/ask", json={"query": query, "collection": COLLECTION, "top_k": TOP_K}
                    ).raise_for_status()

                paths: dict[str, Callable[[str], float | None]] = {
                    "gRPC Search (dense, top 5)": bare_search,
                    "gRPC AskStream, extractive": stream_answer(answer_grpc.AnswerServiceStub(extractive_channel)),
                    "gRPC AskStream, fake model (0 delay)": stream_answer(answer_grpc.AnswerServiceStub(model_channel)),
                    "REST /api/v1/search (dense)": rest_search,
                    "REST /api/v1/ask, extractive": rest_ask,
                }
                timed(paths, queries[:10])  # warm every path up
                results = timed(paths, queries)
        finally:
            model_answer.stop()
            up.stop()

    base = percentiles(results["gRPC Search (dense, top 5)"][0])[0]
    rest_base = percentiles(results["REST /api/v1/search (dense)"][0])[0]
    rows, table = {}, []
    for name, (totals, firsts) in results.items():
        p50, p95 = percentiles(totals)
        first = percentiles(firsts) if firsts else None
        baseline = rest_base if name.startswith("REST") else base
        rows[name] = {
            "p50_ms": round(p50, 2),
            "p95_ms": round(p95, 2),
            "first_token_p50_ms": round(first[0], 2) if first else None,
            "first_token_p95_ms": round(first[1], 2) if first else None,
            "added_p50_ms": round(p50 - baseline, 2),
            "ratio_to_search_p50": round(p50 / baseline, 2),
        }
        table.append(
            f"| {name} | {p50:.1f} | {p95:.1f} | "
            f"{f'{first[0]:.1f} / {first[1]:.1f}' if first else '—'} | {p50 - baseline:+.1f} | "
            f"{p50 / baseline:.2f}× |"
        )
    markdown = "\n".join(
        [
            f"{args.queries} msmarco questions over {args.passages} passages, sequential, `ragmesh up` with the real "
            'model (2 shared cores); "added" and the ratio are against the search of the same path (gRPC or REST).',
            "",
            "| path | p50 ms | p95 ms | first token p50 / p95 ms | added p50 ms | × search p50 |",
            "|---|---|---|---|---|---|",
            *table,
        ]
    )
    print(markdown)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "name": "answer",
                    "markdown": markdown,
                    "data": {"queries": args.queries, "passages": args.passages, "top_k": TOP_K, "paths": rows},
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
