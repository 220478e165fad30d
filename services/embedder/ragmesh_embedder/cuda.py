"""The CUDA-only paths of the torch backend, each behind a setting: micro-batches padded to a few shapes
(RAGMESH_EMBEDDER_GPU_SHAPES), the forward pass as CUDA graphs (CUDA_GRAPHS), and micro-batches run on their real
tokens only with flash attention's variable-length kernel (UNPADDED). `configure` and `start` set them up for a
`backends.TorchBackend` on CUDA, and its `embed` hands micro-batches to `embed` here when one is on. torch is
passed in, never imported here. The tests run these paths on the CPU, with eager stand-ins for the CUDA parts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from ragmesh_common.config import ConfigError

from .config import EmbedderSettings

log = logging.getLogger(__name__)

# What captures a forward pass (`run`, on fixed input tensors) as a CUDA graph: (the replay, the output tensor that
# each replay writes). Tests stand in for it with eager runs on the CPU.
Capture = Callable[[Callable[[], Any]], tuple[Callable[[], object], Any]]


class TorchModel(Protocol):
    """What the CUDA paths take from the torch backend (`backends.TorchBackend`)."""

    device: str
    pad_id: int
    max_sequence_length: int
    batch_size: int
    max_batch_tokens: int
    unpadded: Unpadded | None
    graphs: ShapeGraphs | None
    bucketed: bool

    def forward(self, input_ids: Any, attention_mask: Any) -> Any: ...

    def eager(self, input_ids: np.ndarray, attention_mask: np.ndarray, rows: int) -> np.ndarray: ...


def configure(torch: Any, settings: EmbedderSettings, precision: str) -> None:
    """Before the model loads on CUDA: refuse what cannot run, and pick the attention kernels."""
    if settings.unpadded and precision != "fp16":
        raise ConfigError(
            f"RAGMESH_EMBEDDER_UNPADDED=true runs flash attention, which takes fp16, and the model "
            f"would run in {precision}: set RAGMESH_EMBEDDER_PRECISION=fp16 (or auto), or "
            "RAGMESH_EMBEDDER_UNPADDED=false"
        )
    # Process-wide: torch's SDPA then takes the memory-efficient kernel (flash takes no padding mask).
    torch.backends.cuda.enable_cudnn_sdp(settings.cudnn_attention)


def start(
    backend: TorchModel, model: Any, settings: EmbedderSettings, torch: Any
) -> tuple[Unpadded | None, ShapeGraphs | None, bool]:
    """The paths the settings ask for, for `backend`'s loaded sentence-transformers `model` on CUDA: (its
    unpadded runner, its shape graphs, whether micro-batches are padded to `gpu_shape`). CUDA graphs are captured
    here, for every shape the batcher's micro-batches can take, rather than under traffic."""
    if settings.unpadded:
        unpadded = Unpadded(model, settings.model_path, torch, backend.device, flash_varlen(torch))
        if settings.cuda_graphs:
            graphs = unpadded.capture_graphs(backend.batch_size, backend.max_batch_tokens, backend.max_sequence_length)
            log.info(
                "captured the unpadded model as %d CUDA graphs, one per token bucket, in %.1f s",
                len(graphs),
                graphs.capture_seconds,
            )
        return unpadded, None, settings.gpu_shapes
    if not settings.cuda_graphs:
        return None, None, settings.gpu_shapes
    graphs = ShapeGraphs(backend.forward, torch, backend.device)
    graphs.capture_all(graph_shapes(backend.batch_size, backend.max_batch_tokens, backend.max_sequence_length))
    log.info(
        "captured the model as %d CUDA graphs, one per micro-batch shape, in %.1f s",
        len(graphs),
        graphs.capture_seconds,
    )
    return None, graphs, True


def embed(backend: TorchModel, torch: Any, input_ids: np.ndarray, attention_mask: np.ndarray, rows: int) -> np.ndarray:
    """One padded micro-batch through the backend's CUDA paths: its `rows` texts' embeddings (float32, on the
    host, not normalised)."""
    if backend.unpadded is not None:
        with torch.inference_mode():
            return backend.unpadded(input_ids, attention_mask)
    if backend.bucketed:
        input_ids, attention_mask = pad_to_gpu_shape(
            input_ids, attention_mask, backend.pad_id, backend.max_sequence_length
        )
    if backend.graphs is not None:
        return backend.graphs(input_ids, attention_mask)[:rows]
    return backend.eager(input_ids, attention_mask, rows)


def gpu_shape(rows: int, width: int, limit: int) -> tuple[int, int]:
    """The shape a micro-batch is padded to on a GPU (torch): rows up to a power of two below 64 and to a multiple
    of 64 above, width up to a multiple of 16 (at most `limit`, the model's window). The batcher cuts micro-batches
    of every size, and a shape the GPU has not run before can cost far more than a known one: the buckets keep the
    shapes few (docs/decisions/gpu-micro-batches.md)."""
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


def pad_to_gpu_shape(
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
    the gpu_shape buckets). Eager torch launches the forward pass's kernels one by one from Python, which costs a
    fixed few ms a call on top of the GPU's work (gpu-micro-batches); a graph replays the whole pass in one launch.

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
        forward: Callable[..., Any],
        torch: Any,
        device: str,
        capture: Capture | None = None,
        inputs: Callable[[tuple[int, ...]], tuple[Any, ...]] | None = None,
    ) -> None:
        self._forward, self._torch, self._device = forward, torch, device
        self._capture = capture or self._cuda_capture
        self._inputs = inputs or self._padded_inputs
        # shape -> (its input tensors, the replay, its output tensor)
        self._shapes: dict[tuple[int, ...], tuple[tuple[Any, ...], Callable[[], object], Any]] = {}
        self._lock = threading.Lock()
        self._pool: Any = None  # torch.cuda's graph memory pool and side stream, made at the first capture
        self._stream: Any = None
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

    def _padded_inputs(self, shape: tuple[int, ...]) -> tuple[Any, ...]:
        torch = self._torch
        ids = torch.zeros(shape, dtype=torch.int64, device=self._device)
        mask = torch.ones(shape, dtype=torch.int64, device=self._device)
        mask[:, -1] = 0  # padding, as micro-batches have: the runs before capture take the kernels it records
        return ids, mask

    def _add(self, shape: tuple[int, ...]) -> tuple[tuple[Any, ...], Callable[[], object], Any]:
        tensors = self._inputs(shape)
        started = time.perf_counter()
        replay, output = self._capture(lambda: self._forward(*tensors))
        self.capture_seconds += time.perf_counter() - started
        self._shapes[shape] = (tensors, replay, output)
        log.debug("captured a CUDA graph for micro-batches of shape %s (%d shapes)", shape, len(self._shapes))
        return self._shapes[shape]

    def _cuda_capture(self, run: Callable[[], Any]) -> tuple[Callable[[], object], Any]:
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


def _unpadded_attention(
    module: Any,
    query: Any,
    key: Any,
    value: Any,
    attention_mask: Any,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[Any, None]:
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


def flash_varlen(torch: Any) -> Callable[..., Any]:
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

    def attend(q: Any, k: Any, v: Any, starts: Any, longest: int) -> Any:
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
    makes the GPU run every text to the longest one's length (~146 % padding for the service's micro-batches on
    msmarco: gpu-micro-batches).

    The transformer is a copy of the sentence-transformers model's, with its attention switched to
    `_unpadded_attention` (the padded path keeps the original); the model must pool by mean, as the ONNX export
    does. Micro-batches come padded from the batcher, right-padded: the mask picks the real tokens out.

    With CUDA graphs (`capture_graphs`), each micro-batch's row is padded to a `token_buckets` size and its texts
    to the batch size, so that a graph per token bucket serves every micro-batch: the padding tokens belong to no
    text (attention skips them; their pooling goes to a row that is dropped), the extra texts are empty."""

    def __init__(self, model: Any, model_path: str, torch: Any, device: str, attend: Callable[..., Any]) -> None:
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

    def run(self, packed: Any, starts: Any, counts: Any, longest: int) -> Any:
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

    def capture_graphs(
        self, batch_size: int, max_tokens: int, limit: int, capture: Capture | None = None
    ) -> ShapeGraphs:
        """One CUDA graph per `token_buckets(max(max_tokens, limit))` size, for micro-batches of up to `batch_size`
        texts of up to `limit` tokens (RAGMESH_EMBEDDER_CUDA_GRAPHS with UNPADDED); `capture` as ShapeGraphs'."""
        torch, device = self._torch, self._device
        self._buckets, self._texts = token_buckets(max(max_tokens, limit)), batch_size

        def inputs(shape: tuple[int, ...]) -> tuple[Any, ...]:
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
        return self.graphs
