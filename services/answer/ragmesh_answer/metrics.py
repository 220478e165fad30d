"""The answer service's Prometheus metrics (served on RAGMESH_ANSWER_METRICS_PORT)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

# Seconds to the first token: an extractive answer in milliseconds, a remote model in seconds.
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60)
TOKEN_BUCKETS = (10, 25, 50, 100, 200, 400, 800, 1600, 3200, 6400)


class AnswerMetrics:
    """Time to first token, tokens per answer and the chat model's token usage, by generator; graph lookups."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.time_to_first_token = Histogram(
            "ragmesh_answer_time_to_first_token_seconds",
            "From receiving a question to the first piece of its answer, by generator (model, extractive).",
            ["generator"],
            registry=registry,
            buckets=TTFT_BUCKETS,
        )
        self.answer_tokens = Histogram(
            "ragmesh_answer_tokens_per_answer",
            "Tokens written per answer (the model's output tokens; words for an extractive answer).",
            ["generator"],
            registry=registry,
            buckets=TOKEN_BUCKETS,
        )
        self.answers = Counter(
            "ragmesh_answer_answers", "Questions answered, by generator.", ["generator"], registry=registry
        )
        self.no_results = Counter(
            "ragmesh_answer_no_results",
            "Questions with nothing relevant retrieved (NO_RESULTS; no model call).",
            registry=registry,
        )
        self.graph_lookups = Counter(
            "ragmesh_answer_graph_lookups",
            "Graph entities among the sources whose neighbourhood was added, or could not be fetched (the answer "
            "goes on without it), by outcome (added, failed).",
            ["outcome"],
            registry=registry,
        )
        self.model_tokens = Counter(
            "ragmesh_answer_model_tokens",
            "Tokens the chat model read (input) and wrote (output), rewrites included.",
            ["type"],
            registry=registry,
        )
