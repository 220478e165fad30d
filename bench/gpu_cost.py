"""What a micro-batch costs the model on a GPU, fitted to a recorded `bench_gpu_shapes` run, and what that predicts
for the service at other token budgets, with and without CUDA graphs. Runs on any machine (no GPU, no model: only
the tokenizer, to rebuild the micro-batches the recorded run timed).

    .venv/bin/python -m bench.gpu_cost [--shapes bench/results/gpu/2026-11-27-h200-shapes.json]
                                       [--graph-call-ms 0.3] [--json PATH]

The fit: time = calls x a + padded tokens x b, from two passes of the recorded run's "shapes as cut" variant that
differ in both: the forward pass (the run's passages repeated to `--forward-passages`, length-sorted, CUDA's
default micro-batches: few calls, little padding) and the second pass over the 40 random micro-batches (seed 0, as
`bench_gpu_shapes` draws them: many calls). `a` is what each call costs besides the GPU's work on its tokens (on
eager torch: launching each kernel from Python, the copies, the code between); `b` the GPU's time per padded
token. Then, for windows of the size the recorded service cut (its mean micro-batch), drawn from the same passages
and cut by the batcher's rule at each budget: calls, padding, and passages/s as a share of the forward rate with the
model thread always busy, eager (`a`), with CUDA graphs (`--graph-call-ms`, an assumption until measured) and
unpadded (RAGMESH_EMBEDDER_UNPADDED: eager calls on the real tokens alone, each taken to cost `b` as a padded one),
and unpadded as CUDA graphs (each call's tokens padded to its token bucket).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from ragmesh_embedder.backends import DEFAULT_BATCH_SIZE, DEFAULT_MAX_BATCH_TOKENS, create_backend
from ragmesh_embedder.config import EmbedderSettings
from ragmesh_embedder.cuda import token_buckets

from bench.bench_embedder import cut_sizes, micro_batches
from bench.bench_gpu_shapes import random_batches
from bench.embedder_load import load_passages, write_report

RECORDED = Path(__file__).resolve().parent / "results" / "gpu" / "2026-11-27-h200-shapes.json"
BUDGETS = (131_072, 65_536, 32_768, 16_384)
VARIANT = "shapes as cut"


def cut(lengths: np.ndarray, budget: int, batch_size: int) -> tuple[int, int]:
    """(calls, padded tokens) of one window of texts of these lengths, sorted and cut as the batcher cuts it."""
    ordered = np.sort(lengths)
    sizes = cut_sizes(ordered, batch_size, budget)
    ends = np.cumsum(sizes)  # each micro-batch is padded to its last (longest) text
    return len(sizes), int(np.dot(sizes, ordered[ends - 1]))


def fit(recorded: dict, passages: list[str], forward_passages: int, graph_call_ms: float, windows: int = 200) -> dict:
    backend = create_backend(EmbedderSettings(port=0))  # the tokenizer is all that is used
    batch_size, budget = DEFAULT_BATCH_SIZE["cuda"], DEFAULT_MAX_BATCH_TOKENS["cuda"]
    big = (passages * (forward_passages // len(passages) + 1))[:forward_passages]
    forward = micro_batches(backend, big, (batch_size, budget))
    shapes = random_batches(backend, passages, recorded["batches"], np.random.default_rng(0))

    def totals(batches) -> tuple[int, int, int]:
        return len(batches), sum(b.size for b in batches), sum(b.input_ids.size for b in batches)

    (f_calls, f_texts, f_padded), (r_calls, r_texts, r_padded) = totals(forward), totals(shapes)
    service = recorded["service"][VARIANT]
    f_seconds = f_texts / service["forward"]
    r_seconds = r_texts / recorded["model"][VARIANT]["same again"]
    a, b = np.linalg.solve(
        np.array([[f_calls, f_padded], [r_calls, r_padded]], dtype=float), np.array([f_seconds, r_seconds])
    )
    lengths = backend.prepare(passages).lengths
    window = round(service["mean_batch"])
    rng = np.random.default_rng(1)
    drawn = [lengths[rng.choice(len(lengths), window, replace=False)] for _ in range(windows)]
    graph_call = graph_call_ms / 1000
    # Each way's fixed cost a call, and the forward rate it would give (what the service is judged against).
    rates = {
        "eager": (a, f_texts / f_seconds),
        "cuda graphs": (graph_call, f_texts / (f_calls * graph_call + f_padded * b)),
    }
    rows = []
    real = float(np.mean([w.sum() for w in drawn]))  # a window's real tokens
    buckets = token_buckets(DEFAULT_MAX_BATCH_TOKENS["cuda"])
    for tokens in BUDGETS:
        cuts = [cut(w, tokens, batch_size) for w in drawn]
        calls, padded = float(np.mean([c for c, _ in cuts])), float(np.mean([p for _, p in cuts]))
        row = {"budget": tokens, "calls": calls, "padding_percent": 100 * (padded / (window * lengths.mean()) - 1)}
        for label, (call, forward_rate) in rates.items():
            row[label] = window / (calls * call + padded * b) / forward_rate
        # RAGMESH_EMBEDDER_UNPADDED: the same calls, eager, on the real tokens only (b taken as a real token's
        # cost too), against the padded model's forward rate.
        row["unpadded"] = window / (calls * a + real * b) / rates["eager"][1]
        # With CUDA graphs too: each call's row padded to its token bucket (one call a window at the default budget;
        # at smaller ones the window's tokens split evenly over its calls).
        bucketed = float(np.mean([calls * next(t for t in buckets if t >= w.sum() / calls) for w in drawn]))
        row["unpadded cuda graphs"] = window / (calls * graph_call + bucketed * b) / rates["eager"][1]
        rows.append(row)
    one_call = a + b * float(np.mean([cut(w, DEFAULT_MAX_BATCH_TOKENS["cuda"], batch_size)[1] for w in drawn]))
    return {
        "call_ms": 1000 * a,
        "padded_token_ns": 1e9 * b,
        "window": window,
        "graph_call_ms": graph_call_ms,
        "forward": {"calls": f_calls, "padded_tokens": f_padded, "passages_per_second": service["forward"]},
        "random": {
            "calls": r_calls,
            "padded_tokens": r_padded,
            "passages_per_second": recorded["model"][VARIANT]["same again"],
        },
        "service_predicted_busy": window / one_call,
        "service_measured": service["service"],
        "budgets": rows,
    }


def markdown(result: dict, source: str) -> str:
    lines = [
        f"A micro-batch's cost on the GPU, fitted to {source} ({VARIANT}): "
        f"{result['call_ms']:.2f} ms a call + {result['padded_token_ns']:.0f} ns a padded token. "
        f"The service's {result['window']}-passage windows at the default budget: "
        f"{result['service_predicted_busy']:,.0f} passages/s with the model always busy "
        f"(measured {result['service_measured']:,.0f}).",
        "",
        f"| budget (padded tokens) | calls a window | padding % | eager / forward | CUDA graphs "
        f"({result['graph_call_ms']} ms a call) / forward | unpadded, eager / forward | unpadded, CUDA graphs / "
        "forward |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in result["budgets"]:
        lines.append(
            f"| {row['budget']:,} | {row['calls']:.1f} | {row['padding_percent']:.0f} | {row['eager']:.2f} | "
            f"{row['cuda graphs']:.2f} | {row['unpadded']:.2f} | {row['unpadded cuda graphs']:.2f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shapes", type=Path, default=RECORDED, help="a bench_gpu_shapes JSON report")
    parser.add_argument("--passages", type=int, default=1000, help="as the recorded run (its default)")
    parser.add_argument("--forward-passages", type=int, default=8192, help="as the recorded run (its default)")
    parser.add_argument("--graph-call-ms", type=float, default=0.3, help="a call's fixed cost with CUDA graphs")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    recorded = json.loads(args.shapes.read_text())["data"]
    result = fit(recorded, load_passages(args.passages), args.forward_passages, args.graph_call_ms)
    write_report(args.json, "gpu cost", markdown(result, args.shapes.name), result)


if __name__ == "__main__":
    main()
