"""Dense embedding backends behind one small interface.

A backend first `prepare`s texts (tokenises them where it can, off the event loop, once per request) and
then `embed`s micro-batches of prepared texts in the batcher's worker thread. Every backend returns unit
vectors (cosine), float32, one row per text.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from ragmesh_common.errors import unavailable

from .config import EmbedderSettings


@dataclass(frozen=True)
class Prepared:
    """One text ready for a backend's `embed`."""

    text: str
    # The text's length in model tokens, special tokens included (0 when the backend cannot tell).
    token_count: int
    # True when the model sees only the start of the text.
    truncated: bool
    # How much work the text is for the model (tokens it sees, or characters); the batcher sorts by it.
    size: int
    # Backend-specific input: the truncated token encoding (local) or the words (hash).
    features: object = None


class DenseBackend(Protocol):
    """What the batcher and GetModelInfo need from a dense backend."""

    name: str  # "local", "openai" or "hash"
    model_id: str
    dimension: int
    # The longest input (in tokens, special tokens included) embedded whole; 0 when the backend has no window.
    max_sequence_length: int

    def prepare(self, texts: Sequence[str]) -> list[Prepared]: ...

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        """Unit vectors, shape (len(batch), dimension). Called from one thread at a time."""

    def close(self) -> None: ...


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Scale each row to length 1 (rows of zeros stay zero)."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1, norms)


class LocalBackend:
    """A sentence-transformers model on this machine's CPU.

    Texts are tokenised once, in `prepare`, with the model's own (fast) tokenizer and no truncation, which
    gives the true token count; the encoding is then cut to the model's window exactly as
    sentence-transformers would, and `embed` pads a micro-batch and runs the model on it directly.
    """

    name = "local"

    def __init__(self, model_path: str, model_id: str, *, torch_threads: int | None = None) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach out to the Hugging Face Hub
        # Imported here: torch is heavy, and the other backends do not need it.
        import torch
        from sentence_transformers import SentenceTransformer
        from tokenizers import Tokenizer

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self._torch = torch
        self._model = SentenceTransformer(model_path, device="cpu", local_files_only=True)
        self._model.eval()
        self.model_id = model_id
        self.dimension = int(self._model.get_embedding_dimension())
        self.max_sequence_length = int(self._model.max_seq_length)
        hf_tokenizer = self._model.tokenizer
        # A private copy of the fast tokenizer without truncation or padding (we do both ourselves).
        self._tokenizer = Tokenizer.from_str(hf_tokenizer.backend_tokenizer.to_str())
        self._tokenizer.no_truncation()
        self._tokenizer.no_padding()
        self._specials = self._tokenizer.num_special_tokens_to_add(False)
        self._pad_id = hf_tokenizer.pad_token_id or 0
        self._with_type_ids = "token_type_ids" in hf_tokenizer.model_input_names

    def prepare(self, texts: Sequence[str]) -> list[Prepared]:
        prepared = []
        for text, encoding in zip(texts, self._tokenizer.encode_batch(list(texts), add_special_tokens=False),
                                  strict=True):
            token_count = len(encoding.ids) + self._specials
            truncated = token_count > self.max_sequence_length
            if truncated:
                encoding.truncate(self.max_sequence_length - self._specials)
            encoding = self._tokenizer.post_process(encoding)
            prepared.append(Prepared(text, token_count, truncated, len(encoding.ids), encoding))
        return prepared

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        width = max(item.size for item in batch)
        ids = np.full((len(batch), width), self._pad_id, dtype=np.int64)
        mask = np.zeros_like(ids)
        types = np.zeros_like(ids)
        for row, item in enumerate(batch):
            encoding = item.features
            ids[row, : item.size] = encoding.ids
            mask[row, : item.size] = 1
            types[row, : item.size] = encoding.type_ids
        features = {"input_ids": self._torch.from_numpy(ids), "attention_mask": self._torch.from_numpy(mask)}
        if self._with_type_ids:
            features["token_type_ids"] = self._torch.from_numpy(types)
        with self._torch.inference_mode():
            vectors = self._model(features)["sentence_embedding"]
        return unit_rows(vectors.float().numpy())

    def close(self) -> None:
        """Nothing to release: the model goes with the process."""


_WORD = re.compile(r"\w+")


class HashBackend:
    """Hashed word unigrams and bigrams, L2-normalised: fast and deterministic, so texts that share words
    are similar. For tests and development only - it knows nothing about meaning."""

    name = "hash"
    max_sequence_length = 0

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self.model_id = f"ragmesh/hash-{dimension}"

    def prepare(self, texts: Sequence[str]) -> list[Prepared]:
        prepared = []
        for text in texts:
            words = _WORD.findall(text.lower()) or [text.strip()]
            prepared.append(Prepared(text, len(words), False, len(words), words))
        return prepared

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        vectors = np.zeros((len(batch), self.dimension), dtype=np.float32)
        for row, item in enumerate(batch):
            words = item.features
            for feature in (*words, *(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))):
                digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
                vectors[row, (digest >> 1) % self.dimension] += 1.0 if digest & 1 else -1.0
        return unit_rows(vectors)

    def close(self) -> None:
        """Nothing to release."""


class OpenAIBackend:
    """Any OpenAI-compatible /v1/embeddings API through the `openai` package (which retries with backoff).

    The API does not report per-text token counts, so token_count is 0 and truncated is False. The vector
    size is `dimensions` when set, else learnt from the first answer (the start-up warm-up)."""

    name = "openai"
    max_sequence_length = 0

    def __init__(
        self, *, base_url: str, api_key: str | None, model: str, dimensions: int | None, timeout: float,
        max_retries: int,
    ) -> None:
        import openai

        self._openai = openai
        # Local OpenAI-compatible servers often need no key, but the client insists on one.
        self._client = openai.OpenAI(
            base_url=base_url, api_key=api_key or "unused", timeout=timeout, max_retries=max_retries
        )
        self._base_url = base_url
        self._dimensions = dimensions
        self.model_id = model
        self.dimension = dimensions or 0

    def prepare(self, texts: Sequence[str]) -> list[Prepared]:
        return [Prepared(text, 0, False, len(text)) for text in texts]

    def embed(self, batch: Sequence[Prepared]) -> np.ndarray:
        extra = {"dimensions": self._dimensions} if self._dimensions else {}
        try:
            response = self._client.embeddings.create(
                input=[item.text for item in batch], model=self.model_id, encoding_format="float", **extra
            )
        except self._openai.OpenAIError as exc:
            status = getattr(exc, "status_code", None)
            raise self._failed(f"{type(exc).__name__}: {exc}", **({"status": status} if status else {})) from exc
        rows = sorted(response.data, key=lambda item: item.index)
        if len(rows) != len(batch) or len({len(row.embedding) for row in rows}) != 1:
            raise self._failed(f"it returned {len(rows)} embeddings of mixed or wrong shape for {len(batch)} texts")
        vectors = np.asarray([row.embedding for row in rows], dtype=np.float32)
        if self.dimension == 0:
            self.dimension = vectors.shape[1]
        elif vectors.shape[1] != self.dimension:
            raise self._failed(f"it returned {vectors.shape[1]}-dimensional vectors, expected {self.dimension}")
        return unit_rows(vectors)

    def _failed(self, why: str, **metadata: object):
        return unavailable(
            "EMBEDDING_BACKEND_FAILED", f"the embedding API at {self._base_url} failed: {why}",
            backend=self.name, model=self.model_id, **metadata,
        )

    def close(self) -> None:
        self._client.close()


def create_backend(settings: EmbedderSettings) -> DenseBackend:
    """The dense backend the settings ask for (loads the local model)."""
    if settings.backend == "openai":
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        return OpenAIBackend(
            base_url=settings.openai_base_url, api_key=key, model=settings.openai_model,
            dimensions=settings.openai_dimensions, timeout=settings.openai_timeout_seconds,
            max_retries=settings.openai_max_retries,
        )
    if settings.backend == "hash":
        return HashBackend(settings.hash_dimension)
    return LocalBackend(settings.model_path, settings.model_id, torch_threads=settings.torch_threads)
