"""Embedder throughput per runtime: the raw model vs the same passages through the gRPC service.

    .venv/bin/python -m bench.bench_embedder [--passages 1000] [--runtimes torch,onnx-fp32,onnx-int8]
                                            [--clients 4] [--request-size 32] [--rounds 3] [--forward]
                                            [--json PATH]

On msmarco passages from ../shared/datasets/msmarco-5k, side by side in one run (the rounds alternate; the
table shows medians):
- raw model, per runtime: the runtime's own backend called directly on all passages - tokenised, sorted by
  length and cut into the same token-budget micro-batches the service uses, from as many threads as the service
  has model threads (one single-threaded call per core on the CPU), no gRPC, no queue;
- sentence-transformers `encode` (batch 32, torch): what a user's script would do;
- the service with that runtime (in this process) fed by concurrent clients in another process, dense
  vectors (packed), each passage once: passages/s and its ratio to the raw model;
- one query at a time (43 msmarco queries): the raw model's latency and the service's round trip, p50.
- `--forward`, or automatically on a CUDA device: the model's own forward rate (pre-tokenised,
  length-sorted batches of `batch_size`, fp16 on CUDA, tokenising excluded) vs the service with 16 clients x
  128 texts, sent as texts and with their token ids (as the indexer sends them), and on CUDA how busy the GPU
  was: the "service >= 0.75 x the device" check of a GPU pod.
- for each service run, the share of its model threads' time the model ran and was starved (waited for a
  micro-batch already accepted: the CPU side behind), from the batcher's counters (the pod's
  ragmesh_embedder_model_busy_seconds_total and _starved_seconds_total), and the padding of the micro-batches
  it ran (padded tokens beyond the real ones, as a % of them), beside the forward pass's: the forward pass sorts
  every passage by length at once, the service only what is queued when a model thread is free.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from ragmesh_embedder.backends import (
    DEFAULT_BATCH_SIZE,
    DEFAULT_MAX_BATCH_TOKENS,
    MicroBatch,
    create_backend,
    resolve_plan,
)
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.service import Embedder, warm_up

from bench.embedder_load import QUERIES, drive, load_passages, machine, serving, write_report

RUNTIMES = {
    "torch": {"runtime": "torch"},
    "onnx-fp32": {"runtime": "onnx", "precision": "fp32"},
    "onnx-int8": {"runtime": "onnx", "precision": "int8"},
}


def micro_batches(backend, passages: list[str], limits: tuple[int, int | None] | None = None) -> list[MicroBatch]:
    """The passages tokenised, sorted by length and cut within the backend's token budget, padded (as the
    batcher cuts them); `limits`: (texts, padded tokens) instead of the backend's."""
    batch_size, budget = limits or (backend.batch_size, backend.max_batch_tokens)
    prepared = backend.prepare(passages)
    order = np.argsort(prepared.lengths, kind="stable")
    batches, begin = [], 0
    for size in cut_sizes(prepared.lengths[order], batch_size, budget):
        rows = order[begin : begin + size]
        begin += size
        if not backend.tokenized:  # text backends (hash, openai) take the texts themselves
            batches.append(MicroBatch(len(rows), texts=[prepared.texts[row] for row in rows]))
            continue
        batches.append(padded_batch(backend, prepared, rows))
    return batches


def cut_sizes(lengths: np.ndarray, batch_size: int, budget: int | None) -> list[int]:
    """How many texts each micro-batch takes from texts of these lengths, sorted ascending, as the batcher cuts
    them: at most `batch_size`, and texts x the longest of them within `budget` padded tokens (a lone text always)."""
    sizes, begin = [], 0
    while begin < len(lengths):
        count = min(batch_size, len(lengths) - begin)
        if budget:
            cost = np.arange(1, count + 1) * lengths[begin : begin + count]
            count = max(1, int(np.searchsorted(cost, budget, side="right")))
        sizes.append(count)
        begin += count
    return sizes


def padding_pct(real: float, padded: float) -> float | None:
    """Padded tokens beyond the real ones, as a % of the real ones (None without tokens): the model's work spent on
    padding. The embedder's metrics count both (ragmesh_embedder_tokens_total, _batch_padded_tokens_sum)."""
    return round(100 * (padded - real) / real, 1) if real else None


def batches_padding_pct(batches: list[MicroBatch]) -> float | None:
    """`padding_pct` of micro-batches as `micro_batches` cuts them (None for a text backend's: nothing padded)."""
    tokenized = [b for b in batches if b.input_ids is not None]
    if not tokenized:
        return None
    return padding_pct(sum(int(b.attention_mask.sum()) for b in tokenized), sum(b.input_ids.size for b in tokenized))


def padded_batch(backend, prepared, rows: np.ndarray) -> MicroBatch:
    """The prepared texts at `rows` as one micro-batch, padded to the longest of them."""
    width = int(prepared.lengths[rows].max())
    ids = np.full((len(rows), width), backend.pad_id, dtype=np.int64)
    mask = np.zeros_like(ids)
    for i, row in enumerate(rows):
        start, length = prepared.starts[row], prepared.lengths[row]
        ids[i, :length] = prepared.ids[start : start + length]
        mask[i, :length] = 1
    return MicroBatch(len(rows), input_ids=ids, attention_mask=mask)


def embed_all(backend, batches: list[MicroBatch]) -> None:
    """Every micro-batch through the backend from as many threads as it has runners (the embedder's model
    threads), taking them in order from one shared iterator: on the CPU the embedder runs one single-threaded
    call per core, so one thread calling it would time one core against the service's two."""
    runners = getattr(backend, "runners", 1)
    if runners == 1:
        for batch in batches:
            backend.embed(batch)
        return
    with ThreadPoolExecutor(runners) as pool:
        list(pool.map(backend.embed, batches))


def raw_rate(backend, passages: list[str]) -> float:
    """Passages/s of the backend alone, as the embedder runs it (runners x threads), tokenising included."""
    started = time.perf_counter()
    embed_all(backend, micro_batches(backend, passages))
    return len(passages) / (time.perf_counter() - started)


def forward_rate(backend, passages: list[str], batches: list[MicroBatch] | None = None) -> float:
    """Passages/s of the model's forward pass alone (batches tokenised and padded beforehand, `micro_batches` of
    the passages unless given; every runner)."""
    batches = batches or micro_batches(backend, passages)
    backend.embed(batches[0])
    if getattr(backend, "graphs", None) is not None:  # CUDA graphs: each shape's capture before the clock starts
        for batch in {b.input_ids.shape: b for b in batches}.values():
            backend.embed(batch)
    started = time.perf_counter()
    embed_all(backend, batches)
    return len(passages) / (time.perf_counter() - started)


def padded_forward_rate(backend, passages: list[str], batches: list[MicroBatch]) -> float | None:
    """With RAGMESH_EMBEDDER_UNPADDED, the forward rate of the model as it runs without that setting (padded
    micro-batches, transformers' own attention): the model's own forward pass that the GPU target compares the
    service with. None when the backend runs padded anyway."""
    unpadded = getattr(backend, "unpadded", None)
    if unpadded is None:
        return None
    backend.unpadded = None
    try:
        return forward_rate(backend, passages, batches)
    finally:
        backend.unpadded = unpadded


def raw_query_ms(backend, queries: list[str]) -> float:
    times = []
    for query in queries:
        started = time.perf_counter()
        prepared = backend.prepare([query])
        ids = prepared.ids[None, :]
        backend.embed(MicroBatch(1, input_ids=ids, attention_mask=np.ones_like(ids)))
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def st_encode_rate(model, passages: list[str]) -> float:
    started = time.perf_counter()
    model.encode(passages, batch_size=32, normalize_embeddings=True)
    return len(passages) / (time.perf_counter() - started)


async def measure_runtime(name: str, overrides: dict, passages, queries, args) -> dict:
    settings = EmbedderSettings(port=0, metrics_port=0, max_queue_texts=1 << 20, **overrides)
    backend = create_backend(settings)
    warm_up(backend)
    embedder = Embedder(backend, settings)
    size = args.request_size
    batches = [passages[i : i + size] for i in range(0, len(passages), size)]
    raw, served, raw_query, served_query, model = [], [], [], [], []
    async with serving(settings, embedder) as service:
        for _ in range(args.rounds):
            raw.append(raw_rate(backend, passages))
            with ModelTime(embedder.batcher) as used:
                result = await asyncio.to_thread(drive, service.port, batches, clients=args.clients)
            served.append(result["texts_per_second"])
            model.append(used)
            raw_query.append(raw_query_ms(backend, queries))
            result = await asyncio.to_thread(drive, service.port, [[q] for q in queries], clients=1, input_type="query")
            served_query.append(result["p50_ms"])
        forward = None
        if args.forward or backend.device == "cuda":
            forward = await measure_forward(
                backend,
                embedder.batcher,
                service.port,
                passages,
                args.rounds,
                settings.model_path,
                args.forward_seconds,
            )
    info = embedder.info
    return {
        "runtime": info.runtime,
        "device": info.device,
        "precision": info.precision,
        "raw_passages_per_second": statistics.median(raw),
        "service_passages_per_second": statistics.median(served),
        "raw_query_p50_ms": statistics.median(raw_query),
        "service_query_p50_ms": statistics.median(served_query),
        **ModelTime.medians(model, "service_model"),
        "rounds": {"raw": raw, "service": served},
        "forward": forward,
    }


async def measure_forward(
    backend, batcher, port: int, passages: list[str], rounds: int, model_path: str, seconds: float = 10.0
) -> dict:
    """The device's own rate vs the service on it (16 clients x 128 texts, dense, packed): texts the service
    tokenises, and the same texts with their token ids, as the indexer sends them. On CUDA, how busy the GPU was
    during each (the driver's utilisation, sampled every 0.1 s)."""
    big = (passages * (8192 // len(passages) + 1))[:8192] if backend.device == "cuda" else passages
    batches = [big[i : i + 128] for i in range(0, len(big), 128)]
    # The forward pass runs every passage at once, length-sorted: its micro-batches pad less than the service's,
    # which sort only what is queued when a model thread is free. On CUDA they are CUDA's default micro-batches
    # (1,024 texts within 131,072 padded tokens) whatever this run's limits: the device's own rate, which a smaller
    # budget or batch size would lower, and the ratio with it.
    limits = (DEFAULT_BATCH_SIZE["cuda"], DEFAULT_MAX_BATCH_TOKENS["cuda"]) if backend.device == "cuda" else None
    forward_batches = micro_batches(backend, big, limits)
    forward, served, served_ids, busy, busy_ids, model, model_ids, padded = [], [], [], [], [], [], [], []
    for _ in range(rounds):
        forward.append(forward_rate(backend, big, forward_batches))
        padded.append(padded_forward_rate(backend, big, forward_batches))
        with GpuBusy(backend.device) as gpu, ModelTime(batcher) as used:
            result = await asyncio.to_thread(drive, port, batches, clients=16, seconds=seconds)
        served.append(result["texts_per_second"])
        busy.append(gpu.percent)
        model.append(used)
        with GpuBusy(backend.device) as gpu, ModelTime(batcher) as used:
            result = await asyncio.to_thread(drive, port, batches, clients=16, seconds=seconds, model_path=model_path)
        served_ids.append(result["texts_per_second"])
        busy_ids.append(gpu.percent)
        model_ids.append(used)
    rate, rate_ids, device = (statistics.median(x) for x in (served, served_ids, forward))
    # RAGMESH_EMBEDDER_CUDA_GRAPHS: shapes captured (token buckets, with UNPADDED), and the seconds it took
    graphs = getattr(backend, "graphs", None) or getattr(getattr(backend, "unpadded", None), "graphs", None)
    # RAGMESH_EMBEDDER_UNPADDED: the forward rate above is the unpadded model's, and the model as it runs padded
    # is timed too; the ratios to it are the GPU target's.
    padded_rate = statistics.median(padded) if padded[0] is not None else None
    return {
        "passages": len(big),
        "batch_size": backend.batch_size,
        "max_batch_tokens": backend.max_batch_tokens,
        "cuda_graphs": len(graphs) if graphs is not None else None,
        "cuda_graphs_capture_seconds": round(graphs.capture_seconds, 1) if graphs is not None else None,
        "unpadded": getattr(backend, "unpadded", None) is not None,
        "forward_passages_per_second": device,
        "forward_padding_percent": batches_padding_pct(forward_batches),
        "forward_padded_passages_per_second": padded_rate,
        "service_passages_per_second": rate,
        "service_token_ids_passages_per_second": rate_ids,
        "ratio": rate / device,
        "ratio_token_ids": rate_ids / device,
        "ratio_to_padded_forward": rate / padded_rate if padded_rate else None,
        "ratio_token_ids_to_padded_forward": rate_ids / padded_rate if padded_rate else None,
        "gpu_busy_percent": _median_or_none(busy),
        "gpu_busy_percent_token_ids": _median_or_none(busy_ids),
        **ModelTime.medians(model, "model"),
        **ModelTime.medians(model_ids, "model_token_ids"),
        "rounds": {"forward": forward, "service": served, "service_token_ids": served_ids},
    }


class ModelTime:
    """The share of the model threads' time (runners x the block's wall time) the model ran and was starved
    during a block, and the padding of the micro-batches it ran (`padding_pct`; None for a backend that does not
    tokenise), from the batcher's counters."""

    def __init__(self, batcher) -> None:
        self.batcher, self.busy_percent, self.starved_percent = batcher, 0.0, 0.0
        self.padding_percent: float | None = None

    def __enter__(self) -> ModelTime:
        b = self.batcher
        self._start = (
            time.perf_counter(),
            b.model_seconds,
            b.starved_seconds,
            b.tokens_processed,
            b.padded_tokens_processed,
        )
        return self

    def __exit__(self, *_) -> None:
        wall, busy, starved, tokens, padded = self._start
        b = self.batcher
        threads = b.runners * (time.perf_counter() - wall)
        self.busy_percent = 100 * (b.model_seconds - busy) / threads
        self.starved_percent = 100 * (b.starved_seconds - starved) / threads
        self.padding_percent = padding_pct(b.tokens_processed - tokens, b.padded_tokens_processed - padded)

    @staticmethod
    def medians(blocks: list[ModelTime], prefix: str) -> dict[str, float | None]:
        return {
            f"{prefix}_busy_percent": statistics.median(b.busy_percent for b in blocks),
            f"{prefix}_starved_percent": statistics.median(b.starved_percent for b in blocks),
            f"{prefix}_padding_percent": _median_or_none([b.padding_percent for b in blocks]),
        }


def _median_or_none(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


class GpuBusy:
    """The GPU's utilisation (% of the time a kernel ran, per the driver via NVML) averaged over a block;
    `percent` is None on the CPU or without NVML (nvidia-ml-py)."""

    def __init__(self, device: str) -> None:
        self.device, self.percent, self._samples = device, None, []
        self._stop = threading.Event()

    def __enter__(self) -> GpuBusy:
        if self.device == "cuda":
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self) -> None:
        import torch

        try:
            while not self._stop.wait(0.1):
                self._samples.append(torch.cuda.utilization())
        except Exception:  # noqa: BLE001 - NVML missing or refused: no figure
            self._samples.clear()

    def __exit__(self, *_) -> None:
        self._stop.set()
        if self.device == "cuda":
            self._thread.join()
        if self._samples:
            self.percent = statistics.fmean(self._samples)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--runtimes", default=",".join(RUNTIMES), help=f"comma-separated: {', '.join(RUNTIMES)}")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--request-size", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--forward", action="store_true", help="measure the forward rate on a CPU too")
    parser.add_argument(
        "--forward-seconds", type=float, default=10.0, help="how long each service run of the forward comparison lasts"
    )
    parser.add_argument("--skip-st", action="store_true", help="skip sentence-transformers encode")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    passages = load_passages(args.passages)
    queries = load_passages(43, QUERIES)
    settings = EmbedderSettings()
    plan = resolve_plan(settings)
    data: dict = {
        "machine": machine(),
        "passages": len(passages),
        "clients": args.clients,
        "request_size": args.request_size,
        "rounds": args.rounds,
        "device": plan.device,
        "runtimes": {},
    }
    if not args.skip_st:
        from sentence_transformers import SentenceTransformer

        model = SentenceTransformer(settings.model_path, device=plan.device, local_files_only=True)
        model.encode(passages[:32], batch_size=32)
        data["sentence_transformers_passages_per_second"] = statistics.median(
            st_encode_rate(model, passages) for _ in range(args.rounds)
        )
        del model
    for name in args.runtimes.split(","):
        overrides = dict(RUNTIMES[name])
        if plan.device == "cuda" and name == "onnx-int8":
            continue  # int8 is a CPU option
        data["runtimes"][name] = await measure_runtime(name, overrides, passages, queries, args)
    write_report(args.json, "embedder runtimes", _markdown(data, args), data)


def _markdown(data: dict, args) -> str:
    lines = [
        f"Embedder, {data['passages']} msmarco passages ({data['machine']}, device {data['device']}, median of "
        f"{data['rounds']} alternating rounds; service: {args.clients} clients x {args.request_size} texts, "
        "dense, packed, clients in another process)",
        "",
        "| runtime | raw model passages/s | service passages/s | service / raw | vs torch raw | "
        "query p50 raw ms | query p50 service ms | service: model busy / starved % |",
        "|---|---|---|---|---|---|---|---|",
    ]
    torch_raw = data["runtimes"].get("torch", {}).get("raw_passages_per_second")
    for name, r in data["runtimes"].items():
        vs_torch = f"{r['raw_passages_per_second'] / torch_raw:.2f}x" if torch_raw else "-"
        lines.append(
            f"| {name} ({r['device']}, {r['precision']}) | {r['raw_passages_per_second']:.1f} | "
            f"{r['service_passages_per_second']:.1f} | "
            f"{r['service_passages_per_second'] / r['raw_passages_per_second']:.2f} | {vs_torch} | "
            f"{r['raw_query_p50_ms']:.1f} | {r['service_query_p50_ms']:.1f} | "
            f"{r['service_model_busy_percent']:.0f} / {r['service_model_starved_percent']:.0f} |"
        )
    if "sentence_transformers_passages_per_second" in data:
        lines.append(
            f"| sentence-transformers encode (torch, batch 32) | "
            f"{data['sentence_transformers_passages_per_second']:.1f} | - | - | - | - | - | - |"
        )
    forwards = {name: r["forward"] for name, r in data["runtimes"].items() if r["forward"]}
    if forwards:
        lines += [
            "",
            "| runtime | model forward passages/s (pre-tokenised) | service passages/s (16 x 128 texts) | "
            "service / forward | service with token ids | service / forward | GPU busy % (texts / ids) | "
            "model busy / starved % (texts; ids) | padding % (forward; texts; ids) |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for name, f in forwards.items():
            busy = " / ".join(
                "-" if b is None else f"{b:.0f}" for b in (f["gpu_busy_percent"], f["gpu_busy_percent_token_ids"])
            )
            padding = "; ".join(
                "-" if p is None else f"{p:.0f}"
                for p in (
                    f["forward_padding_percent"],
                    f["model_padding_percent"],
                    f["model_token_ids_padding_percent"],
                )
            )
            lines.append(
                f"| {name} | {f['forward_passages_per_second']:.1f} | {f['service_passages_per_second']:.1f}"
                f" | {f['ratio']:.2f} | {f['service_token_ids_passages_per_second']:.1f} | "
                f"{f['ratio_token_ids']:.2f} | {busy} | {f['model_busy_percent']:.0f} / "
                f"{f['model_starved_percent']:.0f}; {f['model_token_ids_busy_percent']:.0f} / "
                f"{f['model_token_ids_starved_percent']:.0f} | {padding} |"
            )
            if f.get("forward_padded_passages_per_second"):  # unpadded: the same service against the padded model
                lines.append(
                    f"| {name}, unpadded, against the padded forward pass | "
                    f"{f['forward_padded_passages_per_second']:.1f} | {f['service_passages_per_second']:.1f}"
                    f" | {f['ratio_to_padded_forward']:.2f} | "
                    f"{f['service_token_ids_passages_per_second']:.1f} | "
                    f"{f['ratio_token_ids_to_padded_forward']:.2f} | | | |"
                )
    return "\n".join(lines)


if __name__ == "__main__":
    asyncio.run(main())
