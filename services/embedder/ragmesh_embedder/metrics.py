"""The embedder's Prometheus metrics (served on RAGMESH_EMBEDDER_METRICS_PORT): what an autoscaler scales on.

`ragmesh_embedder_queue_depth` (every model's queue together) is what deploy/k8s/components/embedder-queue-autoscaling
scales on; `ragmesh_embedder_model_queue_depth{model}` splits it. The batch and throughput metrics carry a `model`
label, so sums over them read every model: rate(ragmesh_embedder_tokens_total[1m]) is all models' tokens/s.
rate(ragmesh_embedder_model_busy_seconds_total[5m]) / ragmesh_embedder_runners is the share of the time the model
(a GPU's included) ran, and the same over ..._model_starved_seconds_total the share it waited for the CPU side while
texts were queued: low busy and low starved is too little work; starved well above 0, CPUs that cannot feed the model.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .batcher import Batcher


class EmbedderMetrics:
    """Batch sizes, queue depth, texts and tokens embedded, and how busy and starved the model was, by model."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.batch_size = Histogram(
            "ragmesh_embedder_batch_size",
            "Texts per model call (micro-batch).",
            ["model"],
            registry=registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048),
        )
        self.queue_depth = Gauge(
            "ragmesh_embedder_queue_depth",
            "Texts accepted and not embedded yet (waiting or in the model), every model together.",
            registry=registry,
        )
        self.model_queue_depth = Gauge(
            "ragmesh_embedder_model_queue_depth",
            "Texts accepted and not embedded yet, by model.",
            ["model"],
            registry=registry,
        )
        self.texts = Counter(
            "ragmesh_embedder_texts", "Texts embedded by the dense model.", ["model"], registry=registry
        )
        self.tokens = Counter(
            "ragmesh_embedder_tokens",
            "Model tokens embedded (rate() is tokens/s; 0 for backends without a tokenizer).",
            ["model"],
            registry=registry,
        )
        self.pretokenized = Counter(
            "ragmesh_embedder_pretokenized_texts",
            "Texts that came with their model tokens (EmbedRequest.token_ids: "
            "the indexer's chunks), so they were not tokenised here.",
            ["model"],
            registry=registry,
        )
        self.padded_tokens = Histogram(
            "ragmesh_embedder_batch_padded_tokens",
            "Padded tokens per model call (longest text x texts; the "
            "micro-batch's cost, capped by RAGMESH_EMBEDDER_MAX_BATCH_TOKENS).",
            ["model"],
            registry=registry,
            buckets=(64, 256, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144),
        )
        self.runners = Gauge(
            "ragmesh_embedder_runners",
            "Model threads (concurrent model calls) of the model.",
            ["model"],
            registry=registry,
        )
        self.busy_seconds = Counter(
            "ragmesh_embedder_model_busy_seconds",
            "Seconds spent in model calls, every model thread together: "
            "rate() / ragmesh_embedder_runners is the share of the time the model was busy.",
            ["model"],
            registry=registry,
        )
        self.starved_seconds = Counter(
            "ragmesh_embedder_model_starved_seconds",
            "Seconds model threads waited for their next micro-batch while "
            "texts were queued (the CPU side was behind the model): rate() / ragmesh_embedder_runners is the share "
            "of the time the model waited for its feeder.",
            ["model"],
            registry=registry,
        )

    def watch(self, batchers: Mapping[str, Batcher]) -> None:
        """Report the queue depth of these batchers (by model name) and every batch they run. Replaces the
        queues watched before (a server built again in the same process, as in tests)."""
        batchers = dict(batchers)
        self.queue_depth.set_function(lambda: sum(batcher.queue_depth for batcher in batchers.values()))
        self.model_queue_depth.clear()
        self.runners.clear()
        for name, batcher in batchers.items():
            self.model_queue_depth.labels(model=name).set_function(_queue_depth(batcher))
            self.runners.labels(model=name).set(batcher.runners)
            self.pretokenized.labels(model=name)  # exported (at 0) before the model's first batch, as these:
            children = tuple(
                metric.labels(model=name)
                for metric in (
                    self.batch_size,
                    self.padded_tokens,
                    self.texts,
                    self.tokens,
                    self.busy_seconds,
                    self.starved_seconds,
                )
            )
            batcher.on_batch = partial(self.observe_batch, children)

    @staticmethod
    def observe_batch(
        children: tuple[Any, ...], texts: int, tokens: int, padded_tokens: int, seconds: float, starved: float
    ) -> None:
        """One micro-batch of a model, into that model's series (`children`, looked up once in `watch`)."""
        batch_size, padded, texts_total, tokens_total, busy, starved_total = children
        batch_size.observe(texts)
        padded.observe(padded_tokens)
        texts_total.inc(texts)
        tokens_total.inc(tokens)
        busy.inc(seconds)
        if starved:
            starved_total.inc(starved)


def _queue_depth(batcher: Batcher) -> Callable[[], float]:
    """What reads one batcher's queue depth (a gauge's function)."""
    return lambda: batcher.queue_depth
