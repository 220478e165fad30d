"""The embedder's Prometheus metrics (served on RAGMESH_EMBEDDER_METRICS_PORT): what an autoscaler scales on.

`ragmesh_embedder_queue_depth` is the name deploy/k8s/components/embedder-queue-autoscaling scales on;
rate(ragmesh_embedder_tokens_total[1m]) is the model's tokens/s.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from .batcher import Batcher


class EmbedderMetrics:
    """Batch sizes, queue depth, and texts and tokens embedded."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.batch_size = Histogram(
            "ragmesh_embedder_batch_size", "Texts per model call (micro-batch).", registry=registry,
            buckets=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512),
        )
        self.queue_depth = Gauge(
            "ragmesh_embedder_queue_depth", "Texts accepted and not embedded yet (waiting or in the model).",
            registry=registry,
        )
        self.texts = Counter("ragmesh_embedder_texts", "Texts embedded by the dense model.", registry=registry)
        self.tokens = Counter(
            "ragmesh_embedder_tokens", "Model tokens embedded (rate() is tokens/s; 0 for backends without a "
            "tokenizer).", registry=registry,
        )

    def watch(self, batcher: Batcher) -> None:
        """Report this batcher's queue depth and every batch it runs."""
        self.queue_depth.set_function(lambda: batcher.queue_depth)
        batcher.on_batch = self.observe_batch

    def observe_batch(self, texts: int, tokens: int) -> None:
        self.batch_size.observe(texts)
        self.texts.inc(texts)
        self.tokens.inc(tokens)
