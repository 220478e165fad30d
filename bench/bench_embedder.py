"""Embedder throughput: the raw model vs the same passages through the gRPC service.

    .venv/bin/python -m bench.bench_embedder [--passages 200] [--clients 8] [--request-size 8] [--rounds 3]

Raw: sentence-transformers `encode` (batch 16, the service's default micro-batch) on msmarco passages from
../shared/datasets/msmarco-5k/corpus.jsonl. Service: an in-process embedder server on a free port, the same
passages split across concurrent gRPC clients (dense + sparse, as the indexer asks). Prints passages/s of
both (median of the rounds, which alternate) and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path

import grpc
from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
from ragmesh.embedder.v1 import embedder_service_pb2_grpc as pb2_grpc
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.server import create_server
from sentence_transformers import SentenceTransformer

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "msmarco-5k" / "corpus.jsonl"


def load_passages(count: int) -> list[str]:
    with CORPUS.open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line, _ in zip(lines, range(count), strict=False)]


async def through_service(stub, passages: list[str], clients: int, request_size: int) -> float:
    """Seconds for `clients` concurrent clients to embed all passages, `request_size` texts per request."""
    shares = [passages[i::clients] for i in range(clients)]

    async def client(share: list[str]) -> None:
        for start in range(0, len(share), request_size):
            await stub.Embed(pb2.EmbedRequest(texts=share[start : start + request_size]), timeout=300)

    started = time.perf_counter()
    await asyncio.gather(*(client(share) for share in shares))
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--request-size", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    settings = EmbedderSettings(port=0, backend="local")
    passages = load_passages(args.passages)
    service = create_server(settings)
    await service.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.port}")
    stub = pb2_grpc.EmbedderServiceStub(channel)
    # The raw model: the same packaged model, loaded the same way, outside the service.
    model = SentenceTransformer(settings.model_path, device="cpu", local_files_only=True)
    model.encode(passages[:16], batch_size=settings.batch_size)  # warm-up
    raw, served = [], []
    try:
        for _ in range(args.rounds):
            started = time.perf_counter()
            model.encode(passages, batch_size=settings.batch_size)
            raw.append(len(passages) / (time.perf_counter() - started))
            served.append(len(passages) / await through_service(stub, passages, args.clients, args.request_size))
    finally:
        await channel.close()
        await service.stop(0)
    raw_rate, served_rate = statistics.median(raw), statistics.median(served)
    print(f"passages: {len(passages)} msmarco, rounds: {args.rounds} (median)")
    print(f"raw model (sentence-transformers encode, batch {settings.batch_size}): {raw_rate:.1f} passages/s")
    print(f"gRPC service ({args.clients} clients x {args.request_size} texts/request, dense+sparse): "
          f"{served_rate:.1f} passages/s")
    print(f"ratio service/raw: {served_rate / raw_rate:.2f}")


if __name__ == "__main__":
    asyncio.run(main())
