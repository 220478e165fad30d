"""The embedder's domain logic (no gRPC): validate texts, compute BM25 sparse vectors, and send texts
through the batcher to the dense backend of the model they name.

An embedder serves one default model and any number of extra ones (RAGMESH_EMBEDDER_EXTRA_MODELS), each with
its own backend and batcher (queue, threads, token budget), so a bulk re-index on one never holds up the
queries of another beyond the CPU they share. BM25 does not depend on the model: one for all."""

from __future__ import annotations

import asyncio
import enum
import logging
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from opentelemetry.util.types import AttributeValue
from qdrant_edge import Bm25
from qdrant_edge import SparseVector as Bm25Vector
from ragmesh_common.config import ConfigError
from ragmesh_common.errors import invalid_argument, not_found
from ragmesh_common.reasons import Reason
from ragmesh_common.telemetry import Attr, annotate, setup_telemetry
from ragmesh_common.tokens import unpacked_ids

from .backends import DenseBackend, Prepared, create_backend, warm_up
from .batcher import Batcher
from .config import EmbedderSettings
from .metrics import EmbedderMetrics

log = logging.getLogger(__name__)

SPARSE_MODEL_ID = "qdrant/bm25"
# Settings taken out, which a deployment may still set: the settings class ignores unknown RAGMESH_EMBEDDER_*
# variables (extra="ignore"), so the embedder starts as without them, and says so once at start-up.
REMOVED_SETTINGS = {
    "RAGMESH_EMBEDDER_MODEL_PROCESSES": "the model runs in the embedder's own threads "
    "(docs/decisions/embedder-model-processes.md)",
}
# Requests of one text up to this many characters are tokenised on the event loop (see Embedder.embed).
INLINE_CHARS = 512


class InputType(enum.Enum):
    """Queries and documents get different BM25 weights (a query term counts once)."""

    QUERY = "query"
    DOCUMENT = "document"


@dataclass(frozen=True)
class SparseVector:
    indices: list[int]  # ascending
    values: list[float]


@dataclass(frozen=True)
class Embeddings:
    """The vectors of a request's texts, in order; `dense`/`sparse` are None when not requested."""

    dense: np.ndarray | None  # (texts, dimension) float32 unit rows
    sparse: list[SparseVector] | None
    token_counts: np.ndarray  # int32, special tokens included
    truncated: np.ndarray  # bool

    def __len__(self) -> int:
        return len(self.token_counts)


@dataclass(frozen=True)
class TokenIds:
    """A request's texts as model tokens already (ragmesh.embedder.v1.TokenIds): the fingerprint of the tokenizer
    that made them, every text's ids as packed little-endian int32, and how many each text has."""

    tokenizer: str
    ids: bytes
    lengths: Sequence[int]


@dataclass(frozen=True)
class ModelInfo:
    name: str
    is_default: bool
    model_id: str
    dimension: int
    max_sequence_length: int
    sparse_model_id: str
    backend: str
    max_batch_size: int
    runtime: str
    device: str
    precision: str
    tokenizer: str


@dataclass(frozen=True, eq=False)
class Model:
    """One model served: its name, its backend and the batcher that feeds it."""

    name: str
    backend: DenseBackend
    batcher: Batcher


class Embedder:
    """Embeds texts for many concurrent callers. Create with `build_embedder`; `close` when done.

    `backend` is the default model (named settings.model_name); `extra` maps more models' names to their
    backends. `backend` and `batcher` are the default model's."""

    def __init__(
        self, backend: DenseBackend, settings: EmbedderSettings, extra: Mapping[str, DenseBackend] | None = None
    ) -> None:
        self.backend = backend
        self.max_texts = settings.max_texts_per_request
        self.max_text_chars = settings.max_text_chars
        self.default_model = settings.model_name
        queue_limits = {spec.name: settings.for_model(spec).max_queue_texts for spec in settings.extra_models}
        extra = extra or {}
        if settings.model_name in extra:
            raise ValueError(f"an extra model is named {settings.model_name!r}, like the default model")
        self.models: dict[str, Model] = {}
        try:
            for name, model_backend in {settings.model_name: backend, **extra}.items():
                nice = settings.model_thread_nice if model_backend.device == "cpu" else 0
                batcher = Batcher(
                    model_backend,
                    max_queue_texts=queue_limits.get(name, settings.max_queue_texts),
                    name=name,
                    nice=nice,
                )
                self.models[name] = Model(name, model_backend, batcher)
        except BaseException:
            for model in self.models.values():
                model.batcher.close()
            raise
        self.batcher = self.models[self.default_model].batcher
        self._bm25 = Bm25()
        telemetry = setup_telemetry("embedder")
        self._tracer = telemetry.tracer()
        self._metrics = telemetry.metrics(EmbedderMetrics)
        self._metrics.watch({name: model.batcher for name, model in self.models.items()})

    def model(self, name: str = "") -> Model:
        """The model called `name` (the default one for ""), or MODEL_NOT_FOUND naming the ones served."""
        if not name:
            return self.models[self.default_model]
        if (model := self.models.get(name)) is None:
            served = ", ".join(self.models)
            raise not_found(
                Reason.MODEL_NOT_FOUND,
                f"this embedder serves no model named {name!r}; it serves {served}",
                model=name,
                models=",".join(self.models),
            )
        return model

    def model_info(self, name: str = "") -> ModelInfo:
        """What GetModelInfo says about one model (the default one for "")."""
        model = self.model(name)
        backend = model.backend
        return ModelInfo(
            name=model.name,
            is_default=model.name == self.default_model,
            model_id=backend.model_id,
            dimension=backend.dimension,
            max_sequence_length=backend.max_sequence_length,
            sparse_model_id=SPARSE_MODEL_ID,
            backend=backend.name,
            max_batch_size=self.max_texts,
            runtime=backend.runtime,
            device=backend.device,
            precision=backend.precision,
            tokenizer=backend.tokenizer,
        )

    @property
    def info(self) -> ModelInfo:
        """The default model's info."""
        return self.model_info()

    @property
    def infos(self) -> list[ModelInfo]:
        """Every model's info, the default one first."""
        return [self.model_info(name) for name in self.models]

    def validate(self, texts: Sequence[str]) -> None:
        """Raise TEXTS_EMPTY, TOO_MANY_TEXTS, TEXT_EMPTY or TEXT_TOO_LONG."""
        if not texts:
            raise invalid_argument(Reason.TEXTS_EMPTY, "texts must hold at least one text", field="texts")
        if len(texts) > self.max_texts:
            raise invalid_argument(
                Reason.TOO_MANY_TEXTS,
                f"{len(texts)} texts in one request; the limit is {self.max_texts}",
                field="texts",
                count=len(texts),
                limit=self.max_texts,
            )
        # One pass in C over the texts when they are fine (the usual case); the loop only names the culprit.
        if all(texts) and not any(map(str.isspace, texts)) and max(map(len, texts)) <= self.max_text_chars:
            return
        for index, text in enumerate(texts):
            if not text.strip():
                raise invalid_argument(
                    Reason.TEXT_EMPTY, f"texts[{index}] is empty or blank", field=f"texts[{index}]", index=index
                )
            if len(text) > self.max_text_chars:
                raise invalid_argument(
                    Reason.TEXT_TOO_LONG,
                    f"texts[{index}] has {len(text)} characters; the limit is {self.max_text_chars}",
                    field=f"texts[{index}]",
                    index=index,
                    chars=len(text),
                    limit=self.max_text_chars,
                )

    async def embed(
        self,
        texts: Sequence[str],
        input_type: InputType,
        *,
        dense: bool = True,
        sparse: bool = True,
        model: str = "",
        token_ids: TokenIds | None = None,
    ) -> Embeddings:
        """The texts' vectors from the model named `model` (the default one for ""), in order; with `token_ids`,
        the dense vectors from those tokens (the texts are not tokenised again)."""
        served = self.model(model)
        self.validate(texts)
        if len(texts) == 1 and len(texts[0]) <= INLINE_CHARS:
            # A lone short text (a search query) is tokenised right here: tens of microseconds, less than the hop
            # to a worker thread and back.
            prepared, sparse_vectors = self._prepare(served, texts, input_type, sparse, token_ids)
        else:
            # Tokenising (one fast-tokenizer batch call, which releases the GIL) and BM25 run off the event loop.
            prepared, sparse_vectors = await asyncio.to_thread(
                self._prepare, served, texts, input_type, sparse, token_ids
            )
        if token_ids is not None:
            self._metrics.pretokenized.labels(model=served.name).inc(len(texts))
        attributes: dict[str, AttributeValue] = {
            Attr.BATCH_SIZE: len(texts),
            Attr.MODEL: served.backend.model_id,
            Attr.MODEL_NAME: served.name,
        }
        annotate(attributes)
        vectors = None
        if dense:
            # The model call as a span of its own (queue wait included: the batcher shares batches).
            with self._tracer.start_as_current_span("embedder.model", attributes=attributes):
                vectors = await served.batcher.embed(prepared, urgent=input_type is InputType.QUERY)
        return Embeddings(vectors, sparse_vectors, prepared.token_counts, prepared.truncated)

    def _prepare(
        self,
        model: Model,
        texts: Sequence[str],
        input_type: InputType,
        sparse: bool,
        token_ids: TokenIds | None,
    ) -> tuple[Prepared, list[SparseVector] | None]:
        prepared = model.backend.prepare(texts) if token_ids is None else self._from_ids(model, texts, token_ids)
        if not sparse:
            return prepared, None
        bm25 = self._bm25.embed_query if input_type is InputType.QUERY else self._bm25.embed_document
        return prepared, [_sorted_sparse(bm25(text)) for text in texts]

    @staticmethod
    def _from_ids(model: Model, texts: Sequence[str], token_ids: TokenIds) -> Prepared:
        """The texts from the caller's token ids, once they are shown to be the model's own: TOKENIZER_MISMATCH,
        or TOKEN_IDS_INVALID naming what does not fit."""
        backend = model.backend
        if not backend.tokenizer or token_ids.tokenizer != backend.tokenizer:
            raise invalid_argument(
                Reason.TOKENIZER_MISMATCH,
                f"token_ids were made by tokenizer {token_ids.tokenizer!r}, but model {model.name!r} "
                + (f"uses tokenizer {backend.tokenizer!r}" if backend.tokenizer else "takes texts only (no tokenizer)")
                + ": send the texts alone",
                field="token_ids.tokenizer",
                tokenizer=token_ids.tokenizer,
                model_tokenizer=backend.tokenizer,
            )
        lengths = np.asarray(token_ids.lengths, dtype=np.int64)
        if len(lengths) != len(texts):
            raise invalid_argument(
                Reason.TOKEN_IDS_INVALID,
                f"token_ids has {len(lengths)} lengths for {len(texts)} texts",
                field="token_ids.lengths",
                lengths=len(lengths),
                texts=len(texts),
            )
        if len(token_ids.ids) != 4 * int(lengths.sum()):
            raise invalid_argument(
                Reason.TOKEN_IDS_INVALID,
                f"token_ids.ids holds {len(token_ids.ids)} bytes; its lengths add up to "
                f"{int(lengths.sum())} int32 ids ({4 * int(lengths.sum())} bytes)",
                field="token_ids.ids",
            )
        window = backend.max_sequence_length
        if (bad := np.flatnonzero((lengths < 1) | (lengths > window))).size:
            index = int(bad[0])
            raise invalid_argument(
                Reason.TOKEN_IDS_INVALID,
                f"texts[{index}] has {int(lengths[index])} token ids; each text needs 1 to "
                f"{window} (the model's window)",
                field=f"token_ids.lengths[{index}]",
                index=index,
                length=int(lengths[index]),
                limit=window,
            )
        ids = unpacked_ids(token_ids.ids)
        if ids.size and (int(ids.min()) < 0 or int(ids.max()) >= backend.vocab_size):
            raise invalid_argument(
                Reason.TOKEN_IDS_INVALID,
                f"token_ids.ids holds ids outside the model's vocabulary (0 to {backend.vocab_size - 1})",
                field="token_ids.ids",
                vocabulary=backend.vocab_size,
            )
        return backend.prepare_ids(texts, ids, lengths)

    def close(self) -> None:
        """Stop every model's batcher and release its backend."""
        for model in self.models.values():
            model.batcher.close()
            model.backend.close()


def _sorted_sparse(vector: Bm25Vector) -> SparseVector:
    pairs = sorted(zip(vector.indices, vector.values, strict=True))
    return SparseVector([index for index, _ in pairs], [value for _, value in pairs])


def _load(settings: EmbedderSettings) -> DenseBackend:
    backend = create_backend(settings)
    try:
        warm_up(backend)
    except BaseException:
        backend.close()
        raise
    return backend


def build_embedder(settings: EmbedderSettings) -> Embedder:
    """Create every model's backend (loading local models), warm each up and start their batchers. A model
    that cannot load or answer its warm-up call stops the start-up with a message that names it."""
    for name in REMOVED_SETTINGS.keys() & os.environ.keys():
        log.warning("%s is set but no longer read: %s", name, REMOVED_SETTINGS[name])
    backend = _load(settings)
    extra: dict[str, DenseBackend] = {}
    try:
        for spec in settings.extra_models:
            try:
                extra[spec.name] = _load(settings.for_model(spec))
            except (Exception, ConfigError) as exc:
                raise ConfigError(
                    f"RAGMESH_EMBEDDER_EXTRA_MODELS entry {spec.name!r} could not be loaded and warmed up: {exc}"
                ) from exc
            log.info(
                "extra model %r: %s, dimension %d", spec.name, extra[spec.name].model_id, extra[spec.name].dimension
            )
    except BaseException:
        for loaded in (backend, *extra.values()):
            loaded.close()
        raise
    return Embedder(backend, settings, extra)
