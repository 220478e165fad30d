"""Dense embedding backends behind one small interface.

A backend first `prepare`s one request's texts (tokenises them in one call of the fast tokenizer, off the
event loop) into numpy arrays, then `embed`s padded micro-batches that the batcher cuts from everything
queued, in the batcher's model thread. Every backend returns unit vectors (cosine), float32, one row per text.

The local model runs on ONNX Runtime (default) or torch, on the CPU or a CUDA GPU (see `resolve_plan`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import Protocol

import numpy as np
from ragmesh_common.config import ConfigError
from ragmesh_common.errors import unavailable
from ragmesh_common.tokens import tokenizer_fingerprint

from .config import EmbedderSettings
from .cpus import available_cpus

log = logging.getLogger(__name__)

# What precision="auto" means on the CPU: int8, because `ragmesh eval` on msmarco-5k stayed within 0.005
# nDCG@10 of fp32 in every mode (README, "The embedder") while the model runs ~2x faster.
CPU_AUTO_PRECISION = "int8"
# Micro-batch limits by device when the settings leave them unset: on a CPU bigger batches are slower (padding,
# attention cost; shared/MEASUREMENTS.md), a GPU needs large ones to be busy. The CPU token budgets are the best
# of side-by-side sweeps on 2 cores (msmarco passages, cut from windows of 32, 64 and 1,000 texts), with one
# single-threaded call per core: ONNX Runtime int8 256 (128-1024 swept: 178-224 passages/s at 256 against 141-195
# at 1024; from windows of 32 texts, as an ingest often queues, 1024 pads 18 % and 256 3 %), fp32 512 (512-4096:
# 84-98 against 47-78 at 4096), and torch 512, as fp32 ONNX: the model alone did 119-125 passages/s at 512-2048
# (sorted over the whole corpus), but a REST ingest, whose windows hold what four clients have queued, did 100 at
# 512 and 84-86 at 2048 (padding 5 % against 30 %); it had been 4096, best when torch ran one two-thread call.
# "cpu" alone is the fallback (the hash backend, whose tokens are words).
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


@dataclass(frozen=True, eq=False)
class MicroBatch:
    """One model call: padded token ids and mask (token backends) or the texts themselves."""

    size: int
    input_ids: np.ndarray | None = None
    attention_mask: np.ndarray | None = None
    texts: Sequence[str] | None = None


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
    max_batch_tokens: int | None
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

    def prepare(self, texts: Sequence[str]) -> Prepared: ...

    def embed(self, batch: MicroBatch) -> np.ndarray:
        """Unit vectors, shape (batch.size, dimension). Called from up to `runners` threads at once."""

    def close(self) -> None: ...


def gpu_shape(rows: int, width: int, limit: int) -> tuple[int, int]:
    """The shape a micro-batch is padded to on a GPU (torch): rows up to a power of two below 64 and to a multiple
    of 64 above, width up to a multiple of 16 (at most `limit`, the model's window). The batcher cuts micro-batches
    of every size, and a shape the GPU has not run before costs far more than a known one: on an H200, torch fp16
    ran 40 micro-batches of random shapes at 3,200 msmarco passages/s the first time and at 48,600 the second
    (cuDNN's attention, which builds a plan per shape, is the likely cause, and is now off by default:
    `cudnn_attention`). These buckets keep the shapes few: the service on that GPU, with cuDNN's attention on, did
    21,100 passages/s with them against 18,900 without (README, "On a GPU")."""
    rows = 1 << max(0, rows - 1).bit_length() if rows <= 64 else -(-rows // 64) * 64
    return rows, min(-(-width // 16) * 16, max(limit, width))


def graph_shapes(batch_size: int, max_batch_tokens: int, limit: int) -> list[tuple[int, int]]:
    """Every `gpu_shape` that a micro-batch within these limits can be padded to: at most `batch_size` texts, texts
    x longest text within `max_batch_tokens` (a lone text always runs), widths up to the model's window `limit`."""
    widths = sorted({gpu_shape(1, width, limit)[1] for width in range(1, limit + 1)})
    rows = sorted({gpu_shape(count, 1, 1)[0] for count in range(1, batch_size + 1)})
    # gpu_shape only rounds up, so the fewest texts and the narrowest width that pad to a bucket are one more than
    # the bucket below it: a bucket is reachable when those fit.
    fewest = dict(zip(rows, [1, *(bucket + 1 for bucket in rows[:-1])], strict=True))
    narrowest = dict(zip(widths, [1, *(bucket + 1 for bucket in widths[:-1])], strict=True))
    return [
        (bucket, width)
        for width in widths
        for bucket in rows
        if fewest[bucket] == 1 or fewest[bucket] * narrowest[width] <= max_batch_tokens
    ]


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


def resolve_plan(settings: EmbedderSettings, *, ort_cuda=_ort_has_cuda, torch_cuda=_torch_has_cuda) -> Plan:
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
    precision = settings.precision
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
    defaults to one single-threaded runner per CPU. Measured on 2 cores: ONNX Runtime int8 embeds msmarco passages
    11-25 % faster with 2 x 1 than with 1 x 2, and a lone query is no slower; torch (1,024-token micro-batches) did
    98-99 against 86-90 passages/s in a REST ingest, and answered a one-client REST search in 12.2-12.6 against
    14.7-15.2 ms p50, though alone a query takes 6.6 ms on one thread against 4.4 on two. CUDA: one runner."""
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
        # A lone text (a query, tokenised on the event loop) with `encode`, which keeps the GIL: the batch call costs
        # ~25 % less CPU (22 against 30 us for a query) but gives the GIL up for those microseconds, and at 32
        # concurrent searches the loop then waits for the model threads to hand it back, queries reach the batcher
        # spread out, and micro-batches get smaller: +0.3 CPU ms per dense query in the model threads (measured).
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
    """sentence-transformers on torch (CPU, or CUDA in fp16), fed the same padded micro-batches."""

    def __init__(self, settings: EmbedderSettings, plan: Plan) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach out to the Hugging Face Hub
        # Imported here: torch is heavy, and the other backends do not need it.
        import torch
        from sentence_transformers import SentenceTransformer

        if plan.device == "cuda" and settings.unpadded and plan.precision != "fp16":
            raise ConfigError(
                f"RAGMESH_EMBEDDER_UNPADDED=true runs flash attention, which takes fp16, and the model "
                f"would run in {plan.precision}: set RAGMESH_EMBEDDER_PRECISION=fp16 (or auto), or "
                "RAGMESH_EMBEDDER_UNPADDED=false"
            )
        super().__init__(settings.model_path, settings.model_id, plan)
        torch.set_num_threads(plan.threads)
        if plan.device == "cuda":
            # Process-wide: torch's SDPA then takes the memory-efficient kernel (flash takes no padding mask).
            torch.backends.cuda.enable_cudnn_sdp(settings.cudnn_attention)
        self._torch = torch
        self._model = SentenceTransformer(settings.model_path, device=plan.device, local_files_only=True)
        if plan.precision == "fp16":
            self._model.half()
        self._model.eval()
        self.dimension = int(self._model.get_embedding_dimension())
        self.max_sequence_length = int(self._model.max_seq_length)
        self._with_type_ids = "token_type_ids" in self._model.tokenizer.model_input_names
        # On CUDA with `unpadded`: each micro-batch's real tokens only, back to back (variable-length attention),
        # and with cuda_graphs one graph per token bucket (`Unpadded.capture_graphs`).
        self.unpadded = None
        if plan.device == "cuda" and settings.unpadded:
            self.unpadded = Unpadded(self._model, settings.model_path, torch, plan.device, flash_varlen(torch))
            if settings.cuda_graphs:
                self.unpadded.capture_graphs(self.batch_size, self.max_batch_tokens, self.max_sequence_length)
                log.info(
                    "captured the unpadded model as %d CUDA graphs, one per token bucket, in %.1f s",
                    len(self.unpadded.graphs),
                    self.unpadded.graphs.capture_seconds,
                )
        # Else on CUDA: micro-batches padded to a few shapes (gpu_shape), and with cuda_graphs each shape's forward
        # pass captured once and replayed.
        self.graphs = None
        if plan.device == "cuda" and settings.cuda_graphs and self.unpadded is None:
            # Every shape the batcher's micro-batches can take, captured now rather than under traffic.
            self.graphs = ShapeGraphs(self.forward, torch, plan.device)
            self.graphs.capture_all(graph_shapes(self.batch_size, self.max_batch_tokens, self.max_sequence_length))
            log.info(
                "captured the model as %d CUDA graphs, one per micro-batch shape, in %.1f s",
                len(self.graphs),
                self.graphs.capture_seconds,
            )
        self.bucketed = plan.device == "cuda" and (settings.gpu_shapes or self.graphs is not None)

    def forward(self, input_ids, attention_mask):
        """The model on token ids and mask already on the device (torch tensors): the rows' sentence embeddings."""
        features = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self._with_type_ids:
            features["token_type_ids"] = self._torch.zeros_like(input_ids)
        return self._model(features)["sentence_embedding"]

    def embed(self, batch: MicroBatch) -> np.ndarray:
        torch, device = self._torch, self.device
        input_ids, attention_mask = batch.input_ids, batch.attention_mask
        if self.unpadded is not None:
            with torch.inference_mode():
                return unit_rows(self.unpadded(input_ids, attention_mask))
        if self.bucketed:
            input_ids, attention_mask = _padded(input_ids, attention_mask, self.pad_id, self.max_sequence_length)
        if self.graphs is not None:
            return unit_rows(self.graphs(input_ids, attention_mask)[: batch.size])
        with torch.inference_mode():
            vectors = self.forward(
                torch.from_numpy(input_ids).to(device, non_blocking=True),
                torch.from_numpy(attention_mask).to(device, non_blocking=True),
            )[: batch.size]
        return unit_rows(vectors.float().cpu().numpy())

    def close(self) -> None:
        """Nothing to release: the model goes with the process."""


def _padded(
    input_ids: np.ndarray, attention_mask: np.ndarray, pad_id: int, limit: int
) -> tuple[np.ndarray, np.ndarray]:
    """The micro-batch padded to its `gpu_shape`: extra columns are padding, extra rows repeat the first row (a
    row with no token at all could make attention's softmax NaN); the caller keeps the first rows' vectors."""
    rows, width = input_ids.shape
    shape = gpu_shape(rows, width, limit)
    if shape == (rows, width):
        return input_ids, attention_mask
    ids = np.full(shape, pad_id, dtype=input_ids.dtype)
    mask = np.zeros(shape, dtype=attention_mask.dtype)
    ids[:rows, :width], mask[:rows, :width] = input_ids, attention_mask
    ids[rows:, :width], mask[rows:, :width] = input_ids[0], attention_mask[0]
    return ids, mask


class ShapeGraphs:
    """The model's forward pass as one CUDA graph per input shape (RAGMESH_EMBEDDER_CUDA_GRAPHS; the shapes are
    the gpu_shape buckets). Eager torch launches the forward pass's kernels one by one from Python, and a
    micro-batch costs the GPU's time plus the CPU's around it: fitted to an H200's runs (README, "On a GPU"), ~2.7
    ms a call besides ~117 ns a padded token, so that a smaller token budget, which pads less, adds as much in calls
    as it saves. A graph replays the whole forward pass with one launch.

    The backend captures every shape its micro-batches can take at start (`graph_shapes`); a shape missed there is
    captured by its first micro-batch. A capture is two eager runs on a side stream (what torch's CUDA graph notes
    ask for, so that lazily created handles and workspaces exist before capture), then the capture into a memory
    pool that every shape shares (graphs that never run at once may share one, in any order). Each shape keeps
    its input and output tensors; a call copies the micro-batch into the inputs, replays, and copies the output
    back, under a lock (one graph at a time, as one CUDA runner calls anyway). `capture` stands in for the CUDA
    capture where there is no GPU (tests, with the model run eagerly on the same tensors).

    The inputs are the padded micro-batch's ids and mask unless `inputs` says otherwise: for a shape (the first
    input's), the device tensors `forward` takes, filled as a real micro-batch could be (unpadded micro-batches
    have their own: `Unpadded.capture_graphs`)."""

    def __init__(
        self,
        forward: Callable,
        torch,
        device: str,
        capture: Callable[[Callable], tuple[Callable[[], object], object]] | None = None,
        inputs: Callable[[tuple[int, ...]], tuple] | None = None,
    ) -> None:
        self._forward, self._torch, self._device = forward, torch, device
        self._capture = capture or self._cuda_capture
        self._inputs = inputs or self._padded_inputs
        self._shapes: dict[tuple[int, ...], tuple[tuple, Callable[[], object], object]] = {}
        self._lock = threading.Lock()
        self._pool = self._stream = None
        self.capture_seconds = 0.0  # spent capturing, over all shapes

    def __len__(self) -> int:
        return len(self._shapes)

    def capture_all(self, shapes: Sequence[tuple[int, ...]]) -> None:
        """Capture each of `shapes` not captured yet; a start-up error that names the setting if one cannot be."""
        with self._lock, self._torch.inference_mode():
            for shape in shapes:
                if shape in self._shapes:
                    continue
                try:
                    self._add(shape)
                except Exception as exc:  # torch: RuntimeError, e.g. an operation not permitted while capturing
                    raise ConfigError(
                        f"RAGMESH_EMBEDDER_CUDA_GRAPHS=true: the model could not be captured as a CUDA graph for "
                        f"micro-batches of shape {shape} ({type(exc).__name__}: {exc}); set "
                        "RAGMESH_EMBEDDER_CUDA_GRAPHS=false to run it eagerly"
                    ) from exc

    def __call__(self, *arrays: np.ndarray) -> np.ndarray:
        """The rows' embeddings (float32, on the host) of one micro-batch whose inputs (the padded ids and mask,
        unless `inputs` says otherwise) have a bucket's shape, the first input's shape naming it."""
        torch = self._torch
        with self._lock, torch.inference_mode():
            tensors, replay, output = self._shapes.get(arrays[0].shape) or self._add(arrays[0].shape)
            for tensor, array in zip(tensors, arrays, strict=True):
                tensor.copy_(torch.from_numpy(array))
            replay()
            # A copy: the next replay of this shape overwrites `output`.
            return output.to("cpu", dtype=torch.float32, copy=True).numpy()

    def _padded_inputs(self, shape: tuple[int, ...]) -> tuple:
        torch = self._torch
        ids = torch.zeros(shape, dtype=torch.int64, device=self._device)
        mask = torch.ones(shape, dtype=torch.int64, device=self._device)
        mask[:, -1] = 0  # padding, as micro-batches have: the runs before capture take the kernels it records
        return ids, mask

    def _add(self, shape: tuple[int, ...]) -> tuple[tuple, Callable[[], object], object]:
        tensors = self._inputs(shape)
        started = time.perf_counter()
        replay, output = self._capture(lambda: self._forward(*tensors))
        self.capture_seconds += time.perf_counter() - started
        self._shapes[shape] = (tensors, replay, output)
        log.debug("captured a CUDA graph for micro-batches of shape %s (%d shapes)", shape, len(self._shapes))
        return self._shapes[shape]

    def _cuda_capture(self, run: Callable[[], object]) -> tuple[Callable[[], object], object]:
        torch = self._torch
        if self._stream is None:
            self._stream, self._pool = torch.cuda.Stream(), torch.cuda.graph_pool_handle()
        self._stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self._stream):
            for _ in range(2):
                run()
        torch.cuda.current_stream().wait_stream(self._stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool, stream=self._stream, capture_error_mode="thread_local"):
            output = run()
        return graph.replay, output


# How transformers' attention registry knows `_unpadded_attention` (models loaded by `Unpadded` only).
UNPADDED_ATTENTION = "ragmesh_unpadded"


def _unpadded_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention interface on one packed row (a batch of 1: every text's tokens back to back): the
    kernel the call passes (`ragmesh_attend`) attends each text's tokens to its own, as `cu_seq_lens_q` bounds them.
    Returns (batch, tokens, heads, head size), as the interface's other functions do."""
    if query.shape[0] != 1 or attention_mask is not None:
        raise ValueError("the unpadded attention takes one packed row and no mask")
    head = query.shape[-1]
    if scaling is not None and abs(scaling - head**-0.5) > 1e-6:
        raise ValueError(f"the unpadded attention scales by 1/sqrt({head}), the model by {scaling}")
    # (1, heads, tokens, head size), a view of (tokens, heads, head size): that layout again, no copy.
    q, k, v = (t[0].transpose(0, 1) for t in (query, key, value))
    return kwargs["ragmesh_attend"](q, k, v, kwargs["cu_seq_lens_q"], kwargs["max_length_q"])[None], None


def flash_varlen(torch) -> Callable:
    """torch's variable-length attention (flash attention's kernel; torch >= 2.10, CUDA, fp16 or bf16) as an
    `Unpadded` kernel: (q, k, v of (tokens, heads, head size), cumulative text starts, longest text) -> output."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        raise ConfigError(
            f"RAGMESH_EMBEDDER_UNPADDED=true needs torch's variable-length attention "
            f"(torch.nn.attention.varlen, torch >= 2.10); this is torch {torch.__version__}: upgrade "
            "torch or set RAGMESH_EMBEDDER_UNPADDED=false"
        ) from None

    def attend(q, k, v, starts, longest: int):
        return varlen_attn(q, k, v, starts, starts, longest, longest)

    return attend


def token_buckets(max_tokens: int) -> list[int]:
    """The token counts unpadded micro-batches are padded to for CUDA graphs: powers of two from 64 to 2,048 (a
    query, a few passages), then multiples of 2,048 up to `max_tokens` (at most one call's tokens in 16 wasted)."""
    buckets = [64]
    while buckets[-1] < max_tokens:
        buckets.append(buckets[-1] * 2 if buckets[-1] < 2048 else buckets[-1] + 2048)
    return buckets


class Unpadded:
    """The model on a micro-batch's real tokens only (RAGMESH_EMBEDDER_UNPADDED), as TEI runs models on a GPU: the
    texts' tokens back to back in one row, each token at its position in its own text, attention bounded per text
    by a variable-length kernel (`attend`: flash attention's on CUDA), mean pooling per text. A padded micro-batch
    makes the GPU run every text to the longest one's length: the service's, cut from what is queued when the
    model thread is free, pad ~146 % on msmarco (README, "On a GPU"), and so run ~2.5x the tokens.

    The transformer is a copy of the sentence-transformers model's, with its attention switched to
    `_unpadded_attention` (the padded path keeps the original); the model must pool by mean, as the ONNX export
    does. Micro-batches come padded from the batcher, right-padded: the mask picks the real tokens out.

    With CUDA graphs (`capture_graphs`), each micro-batch's row is padded to a `token_buckets` size and its texts
    to the batch size, so that a graph per token bucket serves every micro-batch: the padding tokens belong to no
    text (attention skips them; their pooling goes to a row that is dropped), the extra texts are empty."""

    def __init__(self, model, model_path: str, torch, device: str, attend: Callable) -> None:
        import copy

        from transformers import AttentionInterface

        from .export import pooling_modes

        if (modes := pooling_modes(Path(model_path))) != ["pooling_mode_mean_tokens"]:
            raise ConfigError(
                f"RAGMESH_EMBEDDER_UNPADDED=true pools by mean, and this model pools by {modes}: set "
                "RAGMESH_EMBEDDER_UNPADDED=false"
            )
        AttentionInterface.register(UNPADDED_ATTENTION, _unpadded_attention)
        self._model = copy.deepcopy(model[0].auto_model)
        try:
            self._model.set_attn_implementation(UNPADDED_ATTENTION)
        except (ValueError, AttributeError) as exc:
            raise ConfigError(
                f"RAGMESH_EMBEDDER_UNPADDED=true: this model's attention cannot be replaced ({exc}); "
                "set RAGMESH_EMBEDDER_UNPADDED=false"
            ) from None
        self._torch, self._device, self._attend = torch, device, attend
        self.graphs: ShapeGraphs | None = None
        self._buckets: list[int] = []
        self._texts = 0

    @staticmethod
    def arrays(
        input_ids: np.ndarray, attention_mask: np.ndarray, tokens: int | None = None, texts: int | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The micro-batch as the model takes it unpadded: (3, tokens) int64 rows of token ids, each token's
        position in its text and which text it is of; the texts' starts and end (texts + 1, int32); their lengths
        (texts, 1; float32, to divide by). `tokens` and `texts` pad the row and the texts (graphs): a padding token
        is of text `texts`, which the model's pooling drops, and an extra text is empty (length 1 to divide by)."""
        real = attention_mask.astype(bool)
        lengths = real.sum(axis=1)
        count, total = len(lengths), int(lengths.sum())
        texts = texts or count
        packed = np.zeros((3, tokens or total), dtype=np.int64)
        packed[2] = texts
        packed[0, :total], packed[1, :total] = input_ids[real], (np.cumsum(real, axis=1) - 1)[real]
        packed[2, :total] = np.repeat(np.arange(count), lengths)
        starts = np.full(texts + 1, total, dtype=np.int32)
        starts[0] = 0
        np.cumsum(lengths, out=starts[1 : count + 1])
        counts = np.ones((texts, 1), dtype=np.float32)
        counts[:count, 0] = lengths
        return packed, starts, counts

    def run(self, packed, starts, counts, longest: int):
        """The texts' sentence embeddings (float32, on the device, not normalised) from `arrays`' three, on the
        device; `longest` at least the longest text's token count."""
        torch = self._torch
        ids, positions, text = packed
        hidden = self._model(
            input_ids=ids[None],
            position_ids=positions[None],
            cu_seq_lens_q=starts,
            max_length_q=longest,
            ragmesh_attend=self._attend,
        ).last_hidden_state[0]
        sums = torch.zeros((counts.shape[0] + 1, hidden.shape[-1]), dtype=torch.float32, device=hidden.device)
        return sums.index_add_(0, text, hidden.float())[:-1] / counts

    def __call__(self, input_ids: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        """The micro-batch's sentence embeddings (float32, on the host, not normalised)."""
        torch, count, total = self._torch, len(input_ids), int(attention_mask.sum())
        if self.graphs is not None and count <= self._texts and total <= self._buckets[-1]:
            tokens = next(b for b in self._buckets if b >= total)
            return self.graphs(*self.arrays(input_ids, attention_mask, tokens, self._texts))[:count]
        # Everything the device needs goes before the model's kernels are queued (a copy queued after them would
        # wait for them).
        arrays = self.arrays(input_ids, attention_mask)
        packed, starts, counts = (torch.from_numpy(a).to(self._device, non_blocking=True) for a in arrays)
        return self.run(packed, starts, counts, int(arrays[2].max())).cpu().numpy()  # the longest text's length

    def capture_graphs(self, batch_size: int, max_tokens: int, limit: int, capture: Callable | None = None) -> None:
        """One CUDA graph per `token_buckets(max(max_tokens, limit))` size, for micro-batches of up to `batch_size`
        texts of up to `limit` tokens (RAGMESH_EMBEDDER_CUDA_GRAPHS with UNPADDED); `capture` as ShapeGraphs'."""
        torch, device = self._torch, self._device
        self._buckets, self._texts = token_buckets(max(max_tokens, limit)), batch_size

        def inputs(shape: tuple[int, ...]) -> tuple:
            # As `arrays` pads: every token of no text, every text empty (the kernels do not depend on the values).
            packed = torch.zeros(shape, dtype=torch.int64, device=device)
            packed[2] = batch_size
            return (
                packed,
                torch.zeros(batch_size + 1, dtype=torch.int32, device=device),
                torch.ones((batch_size, 1), dtype=torch.float32, device=device),
            )

        self.graphs = ShapeGraphs(
            lambda packed, starts, counts: self.run(packed, starts, counts, limit),
            torch,
            device,
            capture=capture,
            inputs=inputs,
        )
        self.graphs.capture_all([(3, tokens) for tokens in self._buckets])


# --- the other backends ------------------------------------------------------------------------------
_WORD = re.compile(r"\w+")


def _untokenized(texts: Sequence[str], lengths: np.ndarray) -> Prepared:
    zeros = np.zeros(len(texts), dtype=np.int32)
    return Prepared(list(texts), lengths, zeros, zeros.astype(bool))


class HashBackend:
    """Hashed word unigrams and bigrams, L2-normalised: fast and deterministic, so texts that share words
    are similar. For tests and development only - it knows nothing about meaning. Its words count as tokens
    (for token_count and the batcher's budget), so batching behaves as with a model."""

    name = "hash"
    max_sequence_length = 0
    tokenized = False
    tokenizer, vocab_size = "", 0
    runtime = device = precision = ""

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
        for row, text in enumerate(batch.texts):
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


class OpenAIBackend:
    """Any OpenAI-compatible /v1/embeddings API through the `openai` package (which retries with backoff).

    The API does not report per-text token counts, so token_count is 0 and truncated is False; micro-batches
    are `batch_size` texts (no token budget). The vector size is `dimensions` when set, else learnt from the
    first answer (the start-up warm-up)."""

    name = "openai"
    max_sequence_length = 0
    tokenized = False
    tokenizer, vocab_size = "", 0
    max_batch_tokens = None
    runtime = device = precision = ""

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
        extra = {"dimensions": self._dimensions} if self._dimensions else {}
        try:
            response = self._client.embeddings.create(
                input=list(batch.texts), model=self.model_id, encoding_format="float", **extra
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

    def _failed(self, why: str, **metadata: object):
        return unavailable(
            "EMBEDDING_BACKEND_FAILED",
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
        ids = prepared.ids[None, :]
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
    return (OnnxBackend if plan.runtime == "onnx" else TorchBackend)(settings, plan)
