"""The embedder service's own ceiling: the real gRPC server and batcher in front of a model that answers
instantly, so what is measured is everything but the model.

    .venv/bin/python -m bench.bench_embedder_overhead [--clients 16] [--request-size 128] [--seconds 5]
                                                     [--rounds 3] [--json PATH]

The server runs in this process; the clients in another (as callers do), sending real msmarco passages,
dense only. Rows:
- constant model: `Embed` alone (validation, queue, micro-batching, response) - the issue's ceiling
  (>= 30,000 texts/s for 128-text requests), for packed float32 vectors and for repeated-float vectors;
- constant model + the real tokenizer: what the service costs before a real model runs (tokenising and
  padding are the CPU work a GPU pod's host must keep up with).
"texts per server CPU-second" is the server process's CPU time per text (all its threads): the rate one
dedicated core would sustain, whatever else the machine runs. A GPU running the model at R texts/s is never
capped by the service while this ceiling is well above R.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
from collections.abc import Sequence

import numpy as np
from ragmesh_embedder.backends import MicroBatch, Plan, Prepared, _Tokenized
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.service import Embedder

from bench.embedder_load import drive, load_passages, machine, serving, write_report

TARGET = 30_000


class ConstantBackend:
    """A model that answers at once with the same unit vector for every text."""

    name = "constant"
    model_id = "bench/constant-384"
    dimension = 384
    max_sequence_length = 0
    tokenized = False
    batch_size = 1024
    max_batch_tokens = None
    runtime = device = precision = ""
    runners = 1

    def __init__(self) -> None:
        self._row = np.full((1, self.dimension), 1 / np.sqrt(self.dimension), dtype=np.float32)

    def prepare(self, texts: Sequence[str]) -> Prepared:
        ones = np.ones(len(texts), dtype=np.int64)
        return Prepared(texts, ones, ones.astype(np.int32), np.zeros(len(texts), dtype=bool))

    def embed(self, batch: MicroBatch) -> np.ndarray:
        return np.broadcast_to(self._row, (batch.size, self.dimension))

    def close(self) -> None:
        """Nothing to release."""


class TokenizingConstant(_Tokenized):
    """The packaged model's real tokenizer and padding, then the constant answer instead of the model."""

    def __init__(self, settings: EmbedderSettings) -> None:
        plan = Plan("constant", "cpu", "fp32", threads=1, runners=1, batch_size=1024, max_batch_tokens=131072)
        super().__init__(settings.model_path, "bench/tokenizing-constant-384", plan)
        self.name = "constant+tokenizer"
        self.dimension = 384
        self._row = np.full((1, self.dimension), 1 / np.sqrt(self.dimension), dtype=np.float32)

    def embed(self, batch: MicroBatch) -> np.ndarray:
        return np.broadcast_to(self._row, (batch.size, self.dimension))

    def close(self) -> None:
        """Nothing to release."""


async def measure(backend, batches, *, clients: int, seconds: float, packed: bool, rounds: int) -> dict:
    settings = EmbedderSettings(
        port=0, metrics_port=0, backend="hash", max_texts_per_request=1024, max_queue_texts=1 << 20
    )
    embedder = Embedder(backend, settings)
    runs = []
    async with serving(settings, embedder) as service:
        for _ in range(rounds):
            # The server's CPU time (this process, every thread) per text: what the service costs whatever
            # else the machine runs, i.e. the rate one dedicated core would sustain.
            cpu = time.process_time()
            run = await asyncio.to_thread(drive, service.port, batches, clients=clients, seconds=seconds, packed=packed)
            run["texts_per_server_cpu_second"] = run["texts"] / (time.process_time() - cpu)
            runs.append(run)
    keys = ("texts_per_second", "texts_per_server_cpu_second", "p50_ms", "p95_ms")
    best = {key: statistics.median(run[key] for run in runs) for key in keys}
    return {**best, "rounds": runs, "mean_batch": float(np.mean(embedder.batcher.last_batch_sizes))}


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--request-size", type=int, default=128)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    passages = load_passages(2048)
    size = args.request_size
    batches = [passages[i : i + size] for i in range(0, len(passages) - size + 1, size)]
    rows = {
        "constant model, packed float32": (ConstantBackend(), True),
        "constant model, repeated float": (ConstantBackend(), False),
        "constant model + real tokenizer, packed": (TokenizingConstant(EmbedderSettings()), True),
    }
    data = {"machine": machine(), "clients": args.clients, "request_size": size, "target_texts_per_second": TARGET}
    lines = [
        f"Embedder service ceiling ({machine()}; server in one process, {args.clients} concurrent clients "
        f"in another, {size} msmarco passages per dense `Embed`, median of {args.rounds} x {args.seconds:g} s)",
        f"load average at start {os.getloadavg()[0]:.1f}",
        "",
        "| model behind the real gRPC service | texts/s | vs target 30,000 | texts per server CPU-second | "
        "request p50 ms | p95 ms |",
        "|---|---|---|---|---|---|",
    ]
    for label, (backend, packed) in rows.items():
        result = await measure(
            backend, batches, clients=args.clients, seconds=args.seconds, packed=packed, rounds=args.rounds
        )
        data[label] = result
        lines.append(
            f"| {label} | {result['texts_per_second']:,.0f} | {result['texts_per_second'] / TARGET:.2f}x "
            f"| {result['texts_per_server_cpu_second']:,.0f} | {result['p50_ms']:.1f} | "
            f"{result['p95_ms']:.1f} |"
        )
    write_report(args.json, "embedder service overhead", "\n".join(lines), data)


if __name__ == "__main__":
    asyncio.run(main())
