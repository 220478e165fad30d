"""How the local model runs the micro-batch shapes the batcher cuts, and what the embedder service makes of it.

    python -m bench.bench_gpu_shapes [--batches 40] [--seconds 8] [--clients 16] [--request-size 128] [--warm]
                                     [--cudnn-attention] [--json PATH]

Made for a GPU (torch, fp16; docs/decisions/gpu-micro-batches.md): there a micro-batch of a shape the device
has not run before was ~15x slower than one it had. On the CPU it runs too (torch, fp32), which only shows that
it works.

In this process, the model alone on micro-batches of random shapes (16 to 1,024 passages of neighbouring lengths
from msmarco, padded to the longest, as the batcher cuts them), passages/s over each pass:
- shapes as cut (RAGMESH_EMBEDDER_GPU_SHAPES=false): a first pass, the same micro-batches again, new ones;
- the same padded to `gpu_shape` buckets (the default on CUDA);
- `--warm`: the buckets after one call of every bucket shape (and how long that took);
- on CUDA with `--cudnn-attention`, both again with cuDNN's attention on (RAGMESH_EMBEDDER_CUDNN_ATTENTION=true,
  torch's own default on sm90/sm100, and ours before 2026-11-27).
Then, for each of those, the service (this process; `--clients` 16 x `--request-size` 128 texts with their token
ids in another, `--seconds` each), after the model's forward rate (`--forward-passages`, 8,192) for the ratio. The
requests in flight when the time is up are waited for: on a CPU, where the model does tens of passages a second,
small ones keep a run short.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import numpy as np
from ragmesh_embedder.backends import MicroBatch, create_backend, resolve_plan
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.cuda import gpu_shape
from ragmesh_embedder.service import Embedder, warm_up

from bench.bench_embedder import forward_rate, padded_batch
from bench.embedder_load import drive, load_passages, machine, serving, write_report


def random_batches(backend, passages: list[str], count: int, rng: np.random.Generator) -> list[MicroBatch]:
    """`count` micro-batches of random sizes, each of passages of neighbouring lengths, padded to the longest."""
    prepared = backend.prepare(passages)
    order = np.argsort(prepared.lengths, kind="stable")
    batches = []
    for _ in range(count):
        size = int(rng.integers(16, min(1024, len(order)) + 1))
        start = int(rng.integers(0, len(order) - size + 1))
        batches.append(padded_batch(backend, prepared, order[start : start + size]))
    return batches


def rate(backend, batches: list[MicroBatch]) -> float:
    started = time.perf_counter()
    for batch in batches:
        backend.embed(batch)
    return sum(b.size for b in batches) / (time.perf_counter() - started)


def passes(backend, passages, args, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    batches = random_batches(backend, passages, args.batches, rng)
    first, again = rate(backend, batches), rate(backend, batches)
    fresh = rate(backend, random_batches(backend, passages, args.batches, rng))
    return {"first pass": first, "same again": again, "new shapes": fresh}


def warm_buckets(backend) -> float:
    """One call of every bucket shape; the seconds it took."""
    widths = sorted(
        {gpu_shape(1, width, backend.max_sequence_length)[1] for width in range(1, backend.max_sequence_length + 1)}
    )
    rows = sorted({gpu_shape(size, 1, 1)[0] for size in range(1, backend.batch_size + 1)})
    started = time.perf_counter()
    for size in rows:
        for width in widths:
            ids = np.full((size, width), backend.pad_id, dtype=np.int64)
            backend.embed(MicroBatch(size, input_ids=ids, attention_mask=np.ones_like(ids)))
    return time.perf_counter() - started


def settings(**overrides) -> EmbedderSettings:
    return EmbedderSettings(port=0, metrics_port=0, runtime="torch", max_queue_texts=1 << 20, **overrides)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40, help="random micro-batches per pass")
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--seconds", type=float, default=8.0, help="each service run")
    parser.add_argument("--forward-passages", type=int, default=8192, help="the forward rate's passages")
    parser.add_argument("--clients", type=int, default=16, help="the service's concurrent callers")
    parser.add_argument("--request-size", type=int, default=128, help="texts per Embed request")
    parser.add_argument("--warm", action="store_true", help="also time the buckets after warming every shape")
    parser.add_argument(
        "--cudnn-attention",
        action="store_true",
        help="on CUDA, also every variant with cuDNN's attention on (measured on 2026-11-27)",
    )
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    passages = load_passages(args.passages)
    data: dict = {
        "machine": machine(),
        "batches": args.batches,
        "clients": args.clients,
        "request_size": args.request_size,
        "model": {},
        "service": {},
    }
    model_path = settings().model_path
    big = (passages * (args.forward_passages // len(passages) + 1))[: args.forward_passages]
    size = args.request_size
    requests = [passages[i : i + size] for i in range(0, max(1, len(passages) - size + 1), size)]
    variants = [("shapes as cut", False, False), ("gpu_shape buckets", True, False)]
    if args.cudnn_attention and resolve_plan(settings()).device == "cuda":  # a CUDA matter (on: the old default)
        variants += [
            ("shapes as cut, cuDNN attention on", False, True),
            ("gpu_shape buckets, cuDNN attention on", True, True),
        ]
    # Each variant's passes draw micro-batches of their own (a seed each), so that its first pass meets shapes the
    # process has not run before, whatever ran ahead of it.
    for seed, (label, bucketed, cudnn) in enumerate(variants):
        run = settings(gpu_shapes=bucketed, cudnn_attention=cudnn)
        backend = create_backend(run)  # sets torch's cuDNN attention flag for the process, on CUDA
        warm_up(backend)
        data["device"] = backend.device
        data["model"][label] = passes(backend, passages, args, seed)
        if bucketed and args.warm:
            seconds = warm_buckets(backend)
            data["model"][f"{label}, every shape warmed"] = {
                **passes(backend, passages, args, 100 + seed),
                "seconds to warm": seconds,
            }
        forward = statistics.median(forward_rate(backend, big) for _ in range(2))
        embedder = Embedder(backend, run)
        async with serving(run, embedder) as service:  # stopping it closes the embedder
            result = await asyncio.to_thread(
                drive, service.port, requests, clients=args.clients, seconds=args.seconds, model_path=model_path
            )
        sizes = list(embedder.batcher.last_batch_sizes)
        data["service"][label] = {
            "forward": forward,
            "service": result["texts_per_second"],
            "ratio": result["texts_per_second"] / forward,
            "mean_batch": float(np.mean(sizes)),
        }
    write_report(args.json, "gpu shapes", _markdown(data), data)


def _markdown(data: dict) -> str:
    lines = [
        f"Micro-batch shapes ({data['machine']}, device {data['device']}, torch; {data['batches']} random "
        "micro-batches a pass, passages/s)",
        "",
        "| model in process | first pass | same again | new shapes |",
        "|---|---|---|---|",
    ]
    for label, row in data["model"].items():
        warmed = f" (warmed in {row['seconds to warm']:.1f} s)" if "seconds to warm" in row else ""
        lines.append(
            f"| {label}{warmed} | {row['first pass']:,.0f} | {row['same again']:,.0f} | {row['new shapes']:,.0f} |"
        )
    lines += [
        "",
        f"| service, {data['clients']} clients x {data['request_size']} texts with token ids | forward "
        "passages/s | service passages/s | "
        "service / forward | mean micro-batch |",
        "|---|---|---|---|---|",
    ]
    for label, row in data["service"].items():
        lines.append(
            f"| {label} | {row['forward']:,.0f} | {row['service']:,.0f} | {row['ratio']:.2f} | "
            f"{row['mean_batch']:.0f} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    asyncio.run(main())
