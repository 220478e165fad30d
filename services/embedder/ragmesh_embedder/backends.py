"""Dense embedding backends behind one small interface (`DenseBackend`).

A backend `prepare`s one request's texts into numpy arrays (one call of the fast tokenizer, off the event loop),
then `embed`s the padded micro-batches the batcher cuts, in the batcher's model threads; every backend returns
unit vectors, float32, one row per text. The local model runs on ONNX Runtime (default) or torch, on the CPU or
a CUDA GPU (`resolve_plan`); torch's CUDA-only paths live in `cuda.py`. The hash and openai backends take texts.
Why the defaults are what they are: docs/decisions/embedder-cpu-defaults.md.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from ragmesh_common.config import ConfigError
from ragmesh_common.errors import RagmeshError, unavailable
from ragmesh_common.reasons import Reason
from ragmesh_common.tokens import tokenizer_fingerprint

from . import cuda
from .config import EmbedderSettings
from .cpus import available_cpus

log = logging.getLogger(__name__)

# What precision="auto" means on the CPU: int8, within 0.005 nDCG@10 of fp32 and ~2x faster (embedder-cpu-defaults).
CPU_AUTO_PRECISION = "int8"
# Micro-batch limits by device when the settings leave them unset: on a CPU bigger batches are slower (padding,
# attention cost), a GPU needs large ones to be busy. The CPU token budgets are the best of side-by-side sweeps
# (docs/decisions/embedder-cpu-defaults.md); "cpu" alone is the fallback (the hash backend, whose tokens are words).
DEFAULT_BATCH_SIZE = {"cpu": 256, "cuda": 1024}
DEFAULT_MAX_BATCH_TOKENS = {
    "cpu": 4096,
    "cpu-onnx-int8": 256,
    "cpu-onnx-fp32": 512,
    "cpu-torch-fp32": 512,
    "cuda": 131072,
}


@dataclass(frozen=True, eq=False)
class Prepared:
    """One request's texts, ready for the batcher: numpy arrays, no per-text objects."""

    texts: Sequence[str]
    # What each text costs the model (the tokens it sees; words or characters for backends without a
    # tokenizer): the batcher sorts and budgets by it.
    lengths: np.ndarray
    # Each text's length in model tokens, special tokens included (0 when the backend cannot tell).
    token_counts: np.ndarray
    # True where the model sees only the start of the text.
    truncated: np.ndarray
    # Token backends: every text's (truncated) token ids, concatenated, and where each text starts.
    ids: np.ndarray | None = None
    starts: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def token_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, starts): a token backend's arrays; TypeError for texts prepared by a backend that takes texts."""
        if self.ids is None or self.starts is None:
            raise TypeError("these texts were prepared by a backend that takes texts, not token ids")
        return self.ids, self.starts


@dataclass(frozen=True, eq=False)
class MicroBatch:
    """One model call: padded token ids and mask (token backends) or the texts themselves."""

    size: int
    input_ids: np.ndarray | None = None
    attention_mask: np.ndarray | None = None
    texts: Sequence[str] | None = None

    def tokens(self) -> tuple[np.ndarray, np.ndarray]:
        """(input_ids, attention_mask), for a token backend; TypeError for a micro-batch of texts."""
        if self.input_ids is None or self.attention_mask is None:
            raise TypeError("this micro-batch carries texts, not token ids")
        return self.input_ids, self.attention_mask

    def text_list(self) -> list[str]:
        """The texts, for a backend that takes texts; TypeError for a micro-batch of token ids."""
        if self.texts is None:
            raise TypeError("this micro-batch carries token ids, not texts")
        return list(self.texts)


class DenseBackend(Protocol):
    """What the batcher and GetModelInfo need from a dense backend."""

    name: str  # "local", "openai" or "hash"
    model_id: str
    dimension: int
    # The longest input (in tokens, special tokens included) embedded whole; 0 when the backend has no window.
    max_sequence_length: int
    # True: `embed` gets padded input_ids/attention_mask; False: it gets the texts.
    tokenized: bool
    # Micro-batch limits: the most texts, and the most padded length units (None: no budget).
    batch_size: int

    @property
    def max_batch_tokens(self) -> int | None: ...

    # How the local model runs ("" for the other backends).
    runtime: str
    device: str
    precision: str
    # How many threads call `embed` at once (the batcher starts one model thread per runner).
    runners: int
    # The fingerprint of the tokenizer whose ids `prepare_ids` takes (`tokenizer_fingerprint`); "" for backends
    # that take texts only, and `vocab_size` its ids' range (0 there).
    tokenizer: str
    vocab_size: int
    # The id a micro-batch is padded with (0 for backends that take texts).
    pad_id: int

    def prepare(self, texts: Sequence[str]) -> Prepared: ...

    def prepare_ids(self, texts: Sequence[str], ids: np.ndarray, lengths: np.ndarray) -> Prepared:
        """The texts from their token ids, as `tokenizer` gives them (token backends only)."""

    def embed(self, batch: MicroBatch) -> np.ndarray:
        """Unit vectors, shape (batch.size, dimension). Called from up to `runners` threads at once."""

    def close(self) -> None: ...


def unit_rows(matrix: np.ndarray) -> np.ndarray:
    """Scale each row to length 1 (rows of zeros stay zero), in place when already float32."""
    matrix = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    norms[norms == 0] = 1
    return np.divide(matrix, norms, out=matrix if matrix.flags.writeable else None)


# --- the local model ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Plan:
    """How the local model will run, from the settings and what this machine has."""

    runtime: str  # "onnx" or "torch"
    device: str  # "cpu" or "cuda"
    precision: str  # "fp32", "fp16" or "int8"
    threads: int  # per model call
    runners: int  # model calls at once
    batch_size: int
    max_batch_tokens: int


def _ort_has_cuda() -> bool:
    import onnxruntime

    return "CUDAExecutionProvider" in onnxruntime.get_available_providers()


def _torch_has_cuda() -> bool:
    from importlib import metadata

    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        return False
    if "+cpu" in version:  # a CPU-only build: no need to import torch to know
        return False
    import torch

    return bool(torch.cuda.is_available())


def resolve_plan(
    settings: EmbedderSettings,
    *,
    ort_cuda: Callable[[], bool] = _ort_has_cuda,
    torch_cuda: Callable[[], bool] = _torch_has_cuda,
) -> Plan:
    """Pick runtime, device and precision. CUDA goes through ONNX Runtime's CUDA execution provider when it is
    installed (onnxruntime-gpu), else through torch; `device=cuda` without either is a start-up error."""
    runtime, device = settings.runtime, "cpu"
    if settings.device != "cpu":
        if runtime == "onnx" and ort_cuda():
            device = "cuda"
        elif torch_cuda():
            if runtime == "onnx":
                log.warning(
                    "onnxruntime has no CUDAExecutionProvider (install onnxruntime-gpu): torch runs the model on CUDA"
                )
            runtime, device = "torch", "cuda"
        elif settings.device == "cuda":
            raise ConfigError(
                "RAGMESH_EMBEDDER_DEVICE=cuda but no CUDA device is usable: onnxruntime has no "
                "CUDAExecutionProvider and torch sees no GPU (torch.cuda.is_available() is False). Use "
                "RAGMESH_EMBEDDER_DEVICE=cpu or auto, or run on a GPU node with the NVIDIA driver and a CUDA "
                "build of onnxruntime-gpu or torch."
            )
    precision: str = settings.precision
    if precision == "auto":
        precision = "fp16" if device == "cuda" else CPU_AUTO_PRECISION if runtime == "onnx" else "fp32"
    if precision == "int8" and device == "cuda":
        raise ConfigError(
            "RAGMESH_EMBEDDER_PRECISION=int8 runs on the CPU only, but RAGMESH_EMBEDDER_DEVICE=auto "
            "found a GPU: set RAGMESH_EMBEDDER_PRECISION=fp16 (or auto), or DEVICE=cpu"
        )
    if precision == "int8" and runtime != "onnx":
        raise ConfigError("RAGMESH_EMBEDDER_PRECISION=int8 needs the onnx runtime, which has no CUDA provider here")
    runners, threads = _concurrency(settings, device)
    return Plan(
        runtime=runtime,
        device=device,
        precision=precision,
        threads=threads,
        runners=runners,
        batch_size=settings.batch_size or DEFAULT_BATCH_SIZE[device],
        max_batch_tokens=settings.max_batch_tokens
        or DEFAULT_MAX_BATCH_TOKENS.get(f"{device}-{runtime}-{precision}", DEFAULT_MAX_BATCH_TOKENS[device]),
    )


def _concurrency(settings: EmbedderSettings, device: str) -> tuple[int, int]:
    """(runners, threads per runner): what is not set fills the CPUs this process may use. On the CPU the model
    defaults to one single-threaded runner per CPU (measured faster than fewer, wider calls: embedder-cpu-defaults);
    on CUDA, one runner."""
    cpus = available_cpus()
    if settings.runners:
        runners = settings.runners
    elif device == "cpu":
        runners = max(1, cpus // settings.threads) if settings.threads else cpus
    else:
        runners = 1
    return runners, settings.threads or max(1, cpus // runners)


class _Tokenized:
    """The model's own fast tokenizer, cut to its window: one `encode_batch` per request, arrays out."""

    name = "local"
    tokenized = True

    def __init__(self, model_path: str, model_id: str, plan: Plan) -> None:
        from tokenizers import Tokenizer

        root = Path(model_path)
        config = root / "sentence_bert_config.json"
        self.max_sequence_length = (
            int(json.loads(config.read_text()).get("max_seq_length", 512)) if config.is_file() else 512
        )
        self._tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self._tokenizer.no_padding()  # the batcher pads each micro-batch to its own longest text
        self._tokenizer.enable_truncation(self.max_sequence_length)
        # Without character offsets (which nothing here needs) where the tokenizers version has it: ~1.3x faster.
        self._encode_batch = getattr(self._tokenizer, "encode_batch_fast", self._tokenizer.encode_batch)
        self._whole = Tokenizer.from_file(str(root / "tokenizer.json"))  # counts the tokens a truncated text had
        self._whole.no_padding()
        self._whole.no_truncation()
        self.pad_id = self._tokenizer.token_to_id("[PAD]") or 0
        self.tokenizer = tokenizer_fingerprint(root / "tokenizer.json")
        self.vocab_size = self._tokenizer.get_vocab_size()
        self.model_id = model_id
        self.runtime, self.device, self.precision = plan.runtime, plan.device, plan.precision
        self.batch_size, self.max_batch_tokens = plan.batch_size, plan.max_batch_tokens
        self.runners = plan.runners  # ONNX Runtime sessions and torch modules take concurrent calls

    def prepare(self, texts: Sequence[str]) -> Prepared:
        texts = list(texts)
        # A lone text (a query, tokenised on the event loop) with `encode`, which keeps the GIL: the batch call gives
        # it up, and under many concurrent searches micro-batches then get smaller (embedder-cpu-defaults).
        encodings = self._encode_batch(texts) if len(texts) > 1 else [self._tokenizer.encode(texts[0])]
        lengths = np.fromiter(map(len, encodings), dtype=np.int64, count=len(texts))
        ids = np.fromiter(chain.from_iterable(e.ids for e in encodings), dtype=np.int64, count=int(lengths.sum()))
        starts = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        token_counts = lengths.astype(np.int32)
        full = np.flatnonzero(lengths >= self.max_sequence_length)
        if full.size:  # maybe cut: count the whole text (rare for chunks sized in model tokens)
            whole = self._whole.encode_batch([texts[i] for i in full])
            token_counts[full] = [len(e) for e in whole]
        return Prepared(texts, lengths, token_counts, token_counts > self.max_sequence_length, ids, starts)

    def prepare_ids(self, texts: Sequence[str], ids: np.ndarray, lengths: np.ndarray) -> Prepared:
        """The texts from their token ids as this tokenizer gives them (every text's ids concatenated, and how
        many each has; checked by the caller to fit the window and the vocabulary): nothing is tokenised."""
        starts = np.zeros(len(texts), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        return Prepared(
            list(texts),
            lengths.astype(np.int64),
            lengths.astype(np.int32),
            np.zeros(len(texts), dtype=bool),
            ids.astype(np.int64),
            starts,
        )


class OnnxBackend(_Tokenized):
    """The model exported to ONNX (cached; see export.py) on ONNX Runtime: mean pooling inside the graph,
    L2 normalisation in numpy."""

    def __init__(self, settings: EmbedderSettings, plan: Plan) -> None:
        import onnxruntime as ort

        from .export import OUTPUT, ExportError, ensure_export

        super().__init__(settings.model_path, settings.model_id, plan)
        try:
            self.path = ensure_export(
                settings.onnx_cache_dir, settings.model_id, Path(settings.model_path), plan.precision
            )
        except ExportError as exc:
            raise ConfigError(f"RAGMESH_EMBEDDER_RUNTIME=onnx: {exc}") from None
        options = ort.SessionOptions()
        options.intra_op_num_threads = plan.threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        # Spinning threads burn the CPU the tokenizer and gRPC need between batches.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.add_session_config_entry("session.inter_op.allow_spinning", "0")
        providers = ["CPUExecutionProvider"]
        if plan.device == "cuda":
            providers.insert(0, "CUDAExecutionProvider")
            if hasattr(ort, "preload_dlls"):  # CUDA and cuDNN from the nvidia-* wheels, when that is where they are
                ort.preload_dlls()
        self._session = ort.InferenceSession(str(self.path), options, providers=providers)
        if plan.device == "cuda" and "CUDAExecutionProvider" not in self._session.get_providers():
            raise ConfigError(
                "RAGMESH_EMBEDDER_DEVICE: onnxruntime lists CUDAExecutionProvider but could not start "
                "it (CUDA or cuDNN libraries missing?); use RAGMESH_EMBEDDER_RUNTIME=torch or DEVICE=cpu"
            )
        self._inputs = {i.name for i in self._session.get_inputs()}
        self._output = [OUTPUT]
        self.dimension = int(self._session.get_outputs()[0].shape[-1])

    def embed(self, batch: MicroBatch) -> np.ndarray:
        feed = {"input_ids": batch.input_ids, "attention_mask": batch.attention_mask}
        if "token_type_ids" in self._inputs:
            feed["token_type_ids"] = np.zeros_like(batch.input_ids)
        return unit_rows(self._session.run(self._output, feed)[0])

    def close(self) -> None:
        """Nothing to release: the session goes with the process."""


class TorchBackend(_Tokenized):
    """sentence-transformers on torch (CPU, or CUDA in fp16), fed the same padded micro-batches. On CUDA the
    settings may add the paths of `cuda.py` (shape buckets, CUDA graphs, unpadded micro-batches)."""

    def __init__(self, settings: EmbedderSettings, plan: Plan) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach out to the Hugging Face Hub
        # Imported here: torch is heavy, and the other backends do not need it.
        import torch
        from sentence_transformers import SentenceTransformer

        if plan.device == "cuda":
            cuda.configure(torch, settings, plan.precision)
        super().__init__(settings.model_path, settings.model_id, plan)
        torch.set_num_threads(plan.threads)
        self._torch = torch
        self._model = SentenceTransformer(settings.model_path, device=plan.device, local_files_only=True)
        if plan.precision == "fp16":
            self._model.half()
        self._model.eval()
        dimension, window = self._model.get_embedding_dimension(), self._model.max_seq_length
        if dimension is None or window is None:
            raise ConfigError(
                f"RAGMESH_EMBEDDER_MODEL_PATH={settings.model_path}: sentence-transformers cannot tell this model's "
                f"vector size ({dimension}) or input window ({window})"
            )
        self.dimension, self.max_sequence_length = dimension, window
        self._with_type_ids = "token_type_ids" in self._model.tokenizer.model_input_names
        # The CUDA paths the settings ask for (`cuda.start`); on the CPU none, and `embed` runs `eager`.
        self.unpadded: cuda.Unpadded | None = None
        self.graphs: cuda.ShapeGraphs | None = None
        self.bucketed = False
        if plan.device == "cuda":
            self.unpadded, self.graphs, self.bucketed = cuda.start(self, self._model, settings, torch)

    def forward(self, input_ids: Any, attention_mask: Any) -> Any:
        """The model on token ids and mask already on the device (torch tensors): the rows' sentence embeddings."""
        features = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self._with_type_ids:
            features["token_type_ids"] = self._torch.zeros_like(input_ids)
        return self._model(features)["sentence_embedding"]

    def eager(self, input_ids: np.ndarray, attention_mask: np.ndarray, rows: int) -> np.ndarray:
        """The model run eagerly on a padded micro-batch: the first `rows` rows' embeddings (float32, on the host,
        not normalised)."""
        torch = self._torch
        with torch.inference_mode():
            vectors = self.forward(
                torch.from_numpy(input_ids).to(self.device, non_blocking=True),
                torch.from_numpy(attention_mask).to(self.device, non_blocking=True),
            )[:rows]
        return vectors.float().cpu().numpy()

    def embed(self, batch: MicroBatch) -> np.ndarray:
        input_ids, attention_mask = batch.tokens()
        if self.unpadded is not None or self.graphs is not None or self.bucketed:
            return unit_rows(cuda.embed(self, self._torch, input_ids, attention_mask, batch.size))
        return unit_rows(self.eager(input_ids, attention_mask, batch.size))

    def close(self) -> None:
        """Nothing to release: the model goes with the process."""


# --- the other backends ------------------------------------------------------------------------------
_WORD = re.compile(r"\w+")


def _untokenized(texts: Sequence[str], lengths: np.ndarray) -> Prepared:
    zeros = np.zeros(len(texts), dtype=np.int32)
    return Prepared(list(texts), lengths, zeros, zeros.astype(bool))


class _Texts:
    """What the backends that take texts (no tokenizer, no window, no local model) have in common."""

    max_sequence_length = 0
    tokenized = False
    tokenizer, vocab_size, pad_id = "", 0, 0
    runtime = device = precision = ""

    def prepare_ids(self, texts: Sequence[str], ids: np.ndarray, lengths: np.ndarray) -> Prepared:
        raise TypeError(f"the {type(self).__name__} takes texts only, not token ids")


class HashBackend(_Texts):
    """Hashed word unigrams and bigrams, L2-normalised: fast and deterministic, so texts that share words
    are similar. For tests and development only - it knows nothing about meaning. Its words count as tokens
    (for token_count and the batcher's budget), so batching behaves as with a model."""

    name = "hash"

    def __init__(
        self,
        dimension: int,
        *,
        batch_size: int = 256,
        max_batch_tokens: int | None = 4096,
        delay: float = 0.0,
        runners: int = 1,
    ) -> None:
        self.dimension = dimension
        self.model_id = f"ragmesh/hash-{dimension}"
        self.batch_size, self.max_batch_tokens = batch_size, max_batch_tokens
        self.runners = runners
        self.delay = delay  # seconds each micro-batch takes, as a model would (rehearsing load without one)

    @staticmethod
    def _words(text: str) -> list[str]:
        return _WORD.findall(text.lower()) or [text.strip()]

    def prepare(self, texts: Sequence[str]) -> Prepared:
        lengths = np.fromiter((len(self._words(text)) for text in texts), dtype=np.int64, count=len(texts))
        return Prepared(list(texts), lengths, lengths.astype(np.int32), np.zeros(len(texts), dtype=bool))

    def embed(self, batch: MicroBatch) -> np.ndarray:
        if self.delay:
            time.sleep(self.delay)
        vectors = np.zeros((batch.size, self.dimension), dtype=np.float32)
        for row, text in enumerate(batch.text_list()):
            words = self._words(text)
            for feature in (*words, *(f"{a} {b}" for a, b in zip(words, words[1:], strict=False))):
                digest = int.from_bytes(hashlib.blake2b(feature.encode(), digest_size=8).digest(), "little")
                vectors[row, (digest >> 1) % self.dimension] += 1.0 if digest & 1 else -1.0
        return unit_rows(vectors)

    def embed_texts(self, texts: Sequence[str]) -> np.ndarray:
        """Vectors for texts directly (no batcher): the reference the tests compare with."""
        return self.embed(MicroBatch(len(texts), texts=list(texts)))

    def close(self) -> None:
        """Nothing to release."""


class OpenAIBackend(_Texts):
    """Any OpenAI-compatible /v1/embeddings API through the `openai` package (which retries with backoff).

    The API does not report per-text token counts, so token_count is 0 and truncated is False; micro-batches
    are `batch_size` texts (no token budget). The vector size is `dimensions` when set, else learnt from the
    first answer (the start-up warm-up)."""

    name = "openai"
    max_batch_tokens: int | None = None

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        model: str,
        dimensions: int | None,
        timeout: float,
        max_retries: int,
        batch_size: int,
        runners: int = 1,
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
        self.batch_size = batch_size
        self.runners = runners  # API requests at once (the client is thread-safe)

    def prepare(self, texts: Sequence[str]) -> Prepared:
        return _untokenized(texts, np.ones(len(texts), dtype=np.int64))

    def embed(self, batch: MicroBatch) -> np.ndarray:
        # Sent only when set (`omit`, which says "not sent" to the client's types, is newer than openai 1.50).
        extra: dict[str, Any] = {"dimensions": self._dimensions} if self._dimensions else {}
        try:
            response = self._client.embeddings.create(
                input=batch.text_list(), model=self.model_id, encoding_format="float", **extra
            )
        except self._openai.OpenAIError as exc:
            status = getattr(exc, "status_code", None)
            raise self._failed(f"{type(exc).__name__}: {exc}", **({"status": status} if status else {})) from exc
        rows = sorted(response.data, key=lambda item: item.index)
        if len(rows) != batch.size or len({len(row.embedding) for row in rows}) != 1:
            raise self._failed(f"it returned {len(rows)} embeddings of mixed or wrong shape for {batch.size} texts")
        vectors = np.asarray([row.embedding for row in rows], dtype=np.float32)
        if self.dimension == 0:
            self.dimension = vectors.shape[1]
        elif vectors.shape[1] != self.dimension:
            raise self._failed(f"it returned {vectors.shape[1]}-dimensional vectors, expected {self.dimension}")
        return unit_rows(vectors)

    def _failed(self, why: str, **metadata: object) -> RagmeshError:
        return unavailable(
            Reason.EMBEDDING_BACKEND_FAILED,
            f"the embedding API at {self._base_url} failed: {why}",
            backend=self.name,
            model=self.model_id,
            **metadata,
        )

    def close(self) -> None:
        self._client.close()


def warm_up(backend: DenseBackend) -> None:
    """One model call before serving (loads lazy kernels; the openai backend learns its dimension)."""
    prepared = backend.prepare(["warm-up"])
    if backend.tokenized:
        ids = prepared.token_arrays()[0][None, :]
        batch = MicroBatch(1, input_ids=ids, attention_mask=np.ones_like(ids))
    else:
        batch = MicroBatch(1, texts=prepared.texts)
    backend.embed(batch)


def create_backend(settings: EmbedderSettings) -> DenseBackend:
    """The dense backend the settings ask for (loads the local model; exports it to ONNX on first use)."""
    if settings.backend == "openai":
        key = settings.openai_api_key.get_secret_value() if settings.openai_api_key else None
        return OpenAIBackend(
            base_url=settings.openai_base_url,
            api_key=key,
            model=settings.openai_model,
            dimensions=settings.openai_dimensions,
            timeout=settings.openai_timeout_seconds,
            max_retries=settings.openai_max_retries,
            batch_size=settings.batch_size or 16,
            runners=settings.runners or 1,
        )
    if settings.backend == "hash":
        return HashBackend(
            settings.hash_dimension,
            batch_size=settings.batch_size or DEFAULT_BATCH_SIZE["cpu"],
            max_batch_tokens=settings.max_batch_tokens or DEFAULT_MAX_BATCH_TOKENS["cpu"],
            delay=settings.hash_delay_ms / 1000,
            runners=settings.runners or 1,
        )
    plan = resolve_plan(settings)
    log.info(
        "local model: %s on %s, %s, %d runner(s) x %d thread(s), micro-batches of <= %d texts / %d tokens",
        plan.runtime,
        plan.device,
        plan.precision,
        plan.runners,
        plan.threads,
        plan.batch_size,
        plan.max_batch_tokens,
    )
    if plan.runtime == "onnx":
        return OnnxBackend(settings, plan)
    return TorchBackend(settings, plan)
