"""The embedder's domain logic (no gRPC): validate texts, compute BM25 sparse vectors, and send texts
through the batcher to the dense backend."""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from qdrant_edge import Bm25
from ragmesh_common.errors import invalid_argument
from ragmesh_common.telemetry import Attr, annotate, setup_telemetry

from .backends import DenseBackend, Prepared, create_backend
from .batcher import Batcher
from .config import EmbedderSettings
from .metrics import EmbedderMetrics

SPARSE_MODEL_ID = "qdrant/bm25"


class InputType(enum.Enum):
    """Queries and documents get different BM25 weights (a query term counts once)."""

    QUERY = "query"
    DOCUMENT = "document"


@dataclass(frozen=True)
class SparseVector:
    indices: list[int]  # ascending
    values: list[float]


@dataclass(frozen=True)
class Embedding:
    """The vectors of one text; `dense`/`sparse` are None when not requested."""

    dense: np.ndarray | None
    sparse: SparseVector | None
    token_count: int
    truncated: bool


@dataclass(frozen=True)
class ModelInfo:
    model_id: str
    dimension: int
    max_sequence_length: int
    sparse_model_id: str
    backend: str
    max_batch_size: int


class Embedder:
    """Embeds texts for many concurrent callers. Create with `build_embedder`; `close` when done."""

    def __init__(self, backend: DenseBackend, settings: EmbedderSettings) -> None:
        self.backend = backend
        self.max_texts = settings.max_texts_per_request
        self.max_text_chars = settings.max_text_chars
        self.batcher = Batcher(
            backend, batch_size=settings.batch_size, max_wait_ms=settings.max_wait_ms,
            max_queue_texts=settings.max_queue_texts,
        )
        self._bm25 = Bm25()
        telemetry = setup_telemetry("embedder")
        self._tracer = telemetry.tracer()
        telemetry.metrics(EmbedderMetrics).watch(self.batcher)

    @property
    def info(self) -> ModelInfo:
        return ModelInfo(
            model_id=self.backend.model_id, dimension=self.backend.dimension,
            max_sequence_length=self.backend.max_sequence_length, sparse_model_id=SPARSE_MODEL_ID,
            backend=self.backend.name, max_batch_size=self.max_texts,
        )

    def validate(self, texts: Sequence[str]) -> None:
        """Raise TEXTS_EMPTY, TOO_MANY_TEXTS, TEXT_EMPTY or TEXT_TOO_LONG."""
        if not texts:
            raise invalid_argument("TEXTS_EMPTY", "texts must hold at least one text", field="texts")
        if len(texts) > self.max_texts:
            raise invalid_argument(
                "TOO_MANY_TEXTS", f"{len(texts)} texts in one request; the limit is {self.max_texts}",
                field="texts", count=len(texts), limit=self.max_texts,
            )
        for index, text in enumerate(texts):
            if not text.strip():
                raise invalid_argument(
                    "TEXT_EMPTY", f"texts[{index}] is empty or blank", field=f"texts[{index}]", index=index
                )
            if len(text) > self.max_text_chars:
                raise invalid_argument(
                    "TEXT_TOO_LONG",
                    f"texts[{index}] has {len(text)} characters; the limit is {self.max_text_chars}",
                    field=f"texts[{index}]", index=index, chars=len(text), limit=self.max_text_chars,
                )

    async def embed(
        self, texts: Sequence[str], input_type: InputType, *, dense: bool = True, sparse: bool = True
    ) -> list[Embedding]:
        """One embedding per text, in order."""
        self.validate(texts)
        prepared, sparse_vectors = await asyncio.to_thread(self._prepare, texts, input_type, sparse)
        annotate({Attr.BATCH_SIZE: len(texts), Attr.MODEL: self.backend.model_id})
        if dense:
            # The model call as a span of its own (queue wait included: the batcher shares batches).
            attributes = {Attr.MODEL: self.backend.model_id, Attr.BATCH_SIZE: len(texts)}
            with self._tracer.start_as_current_span("embedder.model", attributes=attributes):
                vectors = await self.batcher.embed(prepared)
        else:
            vectors = [None] * len(texts)
        return [
            Embedding(row, sparse_vector, item.token_count, item.truncated)
            for row, sparse_vector, item in zip(vectors, sparse_vectors, prepared, strict=True)
        ]

    def _prepare(
        self, texts: Sequence[str], input_type: InputType, sparse: bool
    ) -> tuple[list[Prepared], list[SparseVector | None]]:
        prepared = self.backend.prepare(texts)
        if not sparse:
            return prepared, [None] * len(texts)
        bm25 = self._bm25.embed_query if input_type is InputType.QUERY else self._bm25.embed_document
        return prepared, [_sorted_sparse(bm25(text)) for text in texts]

    def close(self) -> None:
        """Stop the batcher's worker and release the backend."""
        self.batcher.close()
        self.backend.close()


def _sorted_sparse(vector) -> SparseVector:
    pairs = sorted(zip(vector.indices, vector.values, strict=True))
    return SparseVector([index for index, _ in pairs], [value for _, value in pairs])


def build_embedder(settings: EmbedderSettings) -> Embedder:
    """Create the backend (loading the local model), warm it up and start the batcher."""
    backend = create_backend(settings)
    try:
        backend.embed(backend.prepare(["warm-up"]))
    except BaseException:
        backend.close()
        raise
    return Embedder(backend, settings)
