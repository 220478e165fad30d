"""Answer settings: environment only (RAGMESH_ANSWER_*, plus RAGMESH_SEARCH_ADDR, RAGMESH_EMBEDDER_ADDR,
RAGMESH_GRAPH_ENABLED, RAGMESH_GRAPH_ADDR, RAGMESH_REDIS_URL and RAGMESH_DATA_DIR), validated at start-up.

The chat model is any OpenAI-compatible chat-completions API (OpenAI, Azure OpenAI's /openai/v1 endpoint,
Ollama, vLLM, llama.cpp's server, ...). Without RAGMESH_ANSWER_MODEL no model is configured and answers are
extractive, unless RAGMESH_ANSWER_REQUIRE_MODEL=true, which makes every question a 503 that names the setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict
from ragmesh_common import config
from ragmesh_common.config import ServiceSettings


class AnswerSettings(ServiceSettings):
    """Settings of the answer service."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_ANSWER_", extra="ignore", frozen=True, populate_by_name=True)

    port: int = config.port_field("answer")
    metrics_port: int = config.metrics_port_field("answer")
    search_addr: str = config.addr_field("search")
    embedder_addr: str = config.addr_field(
        "embedder", "Where the embedder listens (host:port); ranks extractive sentences."
    )

    # --- the chat model ---------------------------------------------------------------------------------------
    base_url: str = Field(
        "",
        description=(
            "Base URL of an OpenAI-compatible chat API, e.g. http://localhost:11434/v1 (Ollama), "
            "http://vllm:8000/v1, https://<resource>.openai.azure.com/openai/v1/; empty means OpenAI's."
        ),
    )
    api_key: SecretStr | None = Field(None, description="The chat API's key; local servers may need none.")
    model: str = Field("", description="The chat model's name; empty: no model, answers are extractive.")
    require_model: bool = Field(
        False,
        description=(
            "Refuse to answer (503 CHAT_MODEL_NOT_CONFIGURED) instead of answering extractively without a model."
        ),
    )
    temperature: float = Field(0.1, ge=0, le=2, description="Sampling temperature of answers.")
    max_output_tokens: int = Field(1024, ge=16, le=65_536, description="The longest answer, in model tokens.")
    timeout_seconds: float = Field(120.0, gt=0, le=3600, description="Timeout of one chat-model request.")
    max_retries: int = Field(
        1, ge=0, le=10, description=("Retries (with backoff) of a chat request that could not connect or got 429/5xx.")
    )

    # --- retrieval and context ------------------------------------------------------------------------------------
    top_k: int = Field(5, ge=1, le=50, description="Chunks retrieved when the request does not say.")
    search_mode: Literal["dense", "hybrid", "sparse", "semantic", "keyword"] = Field(
        "dense",
        description=(
            "How chunks are retrieved. Dense scores are cosine similarities, an absolute measure of relevance that "
            "min_relevance can cut on; hybrid scores are relative to the candidates (the best is always near 1)."
        ),
    )
    min_relevance: float = Field(
        0.3,
        ge=0,
        le=1,
        description=("Chunks scoring below this are not relevant; when none is left the answer is NO_RESULTS."),
    )
    context_tokens: int = Field(
        3000,
        ge=100,
        le=1_000_000,
        description=("Budget of the numbered sources given to the model, in estimated tokens (4 characters each)."),
    )
    max_query_chars: int = Field(1000, ge=1, le=100_000, description="Longest question accepted.")
    extractive_sentences: int = Field(3, ge=1, le=20, description="Sentences in an extractive answer.")
    search_timeout_seconds: float = Field(15.0, gt=0, description="Deadline of a Search or Embed call.")

    # --- the graph (RAGMESH_GRAPH_ENABLED) -------------------------------------------------------------------
    graph_enabled: bool = Field(
        False,
        validation_alias="RAGMESH_GRAPH_ENABLED",
        description=(
            "The graph service runs: sources that are graph entities get their neighbourhood (one hop) in the context."
        ),
    )
    graph_addr: str = config.addr_field("graph")
    graph_entities: int = Field(
        3, ge=0, le=10, description="Graph entities among the sources whose neighbourhood is added (the best first)."
    )
    graph_neighbours: int = Field(20, ge=1, le=100, description="Relations listed per graph entity at most.")
    graph_timeout_seconds: float = Field(
        2.0,
        gt=0,
        le=60,
        description="Deadline of the graph calls; a graph that fails or is late leaves the sources without relations.",
    )

    # --- sessions ---------------------------------------------------------------------------------------------
    session_turns: int = Field(
        5,
        ge=1,
        le=100,
        description=("Exchanges a session keeps (and a follow-up is rewritten with); older ones are dropped."),
    )
    session_ttl_seconds: int = Field(
        7 * 24 * 3600, ge=60, description=("A session is forgotten this long after its last turn.")
    )
    redis_url: str = Field(
        "",
        validation_alias="RAGMESH_REDIS_URL",
        description=(
            "redis://host:6379/0: sessions live in Redis, so any replica serves any turn; empty: under the data "
            "directory (SQLite, one file)."
        ),
    )
    redis_prefix: str = Field("ragmesh:answer:", max_length=128, description="Prefix of the Redis keys.")
    data_dir: Path = Field(
        Path(".ragmesh"),
        validation_alias="RAGMESH_DATA_DIR",
        description=("The data directory; without Redis, sessions are kept in <data_dir>/answer/sessions.sqlite3."),
    )

    @field_validator("model")
    @classmethod
    def _model_for_a_base_url(cls, model: str, info: ValidationInfo) -> str:
        # Runs after base_url (declared above), so the error names RAGMESH_ANSWER_MODEL.
        if info.data.get("base_url") and not model:
            raise ValueError("RAGMESH_ANSWER_BASE_URL is set: name the chat model too")
        return model

    @property
    def model_configured(self) -> bool:
        return bool(self.model)

    @property
    def sessions_path(self) -> Path:
        return self.data_dir / "answer" / "sessions.sqlite3"
