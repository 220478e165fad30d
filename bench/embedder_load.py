"""Shared by the embedder benchmarks: msmarco passages, an embedder server in this process, and a load
generator in a separate process (so that clients do not share the server's GIL, as in a real deployment),
plus the `--json` report every bench module writes: {"name", "markdown", "data"}."""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import statistics
import time
from contextlib import asynccontextmanager
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "datasets" / "msmarco-5k" / "corpus.jsonl"
QUERIES = CORPUS.with_name("queries.jsonl")


def load_passages(count: int, path: Path = CORPUS) -> list[str]:
    with path.open(encoding="utf-8") as lines:
        return [json.loads(line)["text"] for line, _ in zip(lines, range(count), strict=False)]


@asynccontextmanager
async def serving(settings, embedder=None):
    """An embedder server on a free loopback port (yields it; stops it afterwards)."""
    from ragmesh_embedder.server import create_server

    service = create_server(settings, embedder)
    await service.start()
    try:
        yield service
    finally:
        await service.stop(0)


def drive(
    port: int,
    batches: list[list[str]],
    *,
    clients: int,
    seconds: float | None = None,
    dense_only: bool = True,
    packed: bool = True,
    input_type: str = "document",
    model_path: str | None = None,
) -> dict:
    """Run `clients` concurrent callers in a child process, one Embed request per batch: cycling through
    `batches` for `seconds`, or (seconds=None) sending each batch once. With `model_path` (a local model's
    folder), each request carries its texts' token ids too, as the indexer's do, tokenised beforehand (not
    timed) with that model's tokenizer. Returns texts/s and the request latency p50/p95 in ms."""
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(_drive, (port, batches, clients, seconds, dense_only, packed, input_type, model_path))


def _drive(port, batches, clients, seconds, dense_only, packed, input_type, model_path) -> dict:
    return asyncio.run(_drive_async(port, batches, clients, seconds, dense_only, packed, input_type, model_path))


def _tokenizing(pb2, model_path: str):
    """texts -> their TokenIds as the indexer sends them: the model's tokenizer, cut to the model's window."""
    from ragmesh_common.tokens import packed_ids, tokenizer_fingerprint
    from tokenizers import Tokenizer

    root = Path(model_path)
    window = json.loads((root / "sentence_bert_config.json").read_text()).get("max_seq_length", 512)
    tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(window)
    fingerprint = tokenizer_fingerprint(root / "tokenizer.json")

    def token_ids(texts: list[str]):
        ids = [encoding.ids for encoding in tokenizer.encode_batch(texts)]
        return pb2.TokenIds(tokenizer=fingerprint, ids=packed_ids(ids), lengths=list(map(len, ids)))

    return token_ids


async def _drive_async(port, batches, clients, seconds, dense_only, packed, input_type, model_path) -> dict:
    import grpc
    from ragmesh.embedder.v1 import embedder_service_pb2 as pb2
    from ragmesh.embedder.v1 import embedder_service_pb2_grpc as pb2_grpc

    kinds = [pb2.VECTOR_KIND_DENSE] if dense_only else []
    dense_format = pb2.DENSE_FORMAT_PACKED_FLOAT32 if packed else pb2.DENSE_FORMAT_FLOATS
    kind = pb2.INPUT_TYPE_QUERY if input_type == "query" else pb2.INPUT_TYPE_DOCUMENT
    token_ids = _tokenizing(pb2, model_path) if model_path else lambda _: None
    requests = [
        pb2.EmbedRequest(texts=b, kinds=kinds, dense_format=dense_format, input_type=kind, token_ids=token_ids(b))
        for b in batches
    ]
    options = [("grpc.max_receive_message_length", 64 << 20), ("grpc.max_send_message_length", 64 << 20)]
    latencies: list[float] = []
    texts = 0
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options) as channel:
        stub = pb2_grpc.EmbedderServiceStub(channel)
        await stub.Embed(requests[0], timeout=600)  # connect and warm up
        deadline = time.perf_counter() + (seconds or 1e9)
        shared = iter(range(len(requests) if seconds is None else 1 << 62))

        async def caller() -> None:
            nonlocal texts
            for i in shared:
                if time.perf_counter() >= deadline:
                    break
                request = requests[i % len(requests)]
                started = time.perf_counter()
                reply = await stub.Embed(request, timeout=600)
                latencies.append((time.perf_counter() - started) * 1000)
                texts += len(reply.embeddings)

        started = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(clients)))
        elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "texts_per_second": texts / elapsed,
        "requests": len(latencies),
        "texts": texts,
        "p50_ms": statistics.median(latencies),
        "p95_ms": latencies[int(0.95 * (len(latencies) - 1))],
    }


def write_report(path: str | None, name: str, markdown: str, data: dict) -> None:
    """Print the Markdown; with --json, also write {"name", "markdown", "data"} for `make bench`."""
    print(markdown)
    if path:
        Path(path).write_text(json.dumps({"name": name, "markdown": markdown, "data": data}, indent=2))


def machine() -> str:
    import os
    import platform

    return f"{platform.machine()}, {len(os.sched_getaffinity(0))} CPUs, {platform.python_version()}"
