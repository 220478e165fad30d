"""The gateway's settings: one pydantic-settings class, environment only, validated at start-up.

Environment variables:
  RAGMESH_HTTP_HOST / RAGMESH_HTTP_PORT     where the REST (and later MCP) server listens
  RAGMESH_API_KEYS                          comma-separated KEY[:SCOPE[:COLLECTIONS[:RATE]]]; empty: no auth
  RAGMESH_RATE_LIMIT_PER_SECOND             requests/s per key (per client address without keys); 0: off
  RAGMESH_RATE_LIMIT_BURST                  requests a client may send at once (default 2 x the rate)
  RAGMESH_REDIS_URL / RAGMESH_REDIS_PREFIX  Redis for the rate limits every replica shares; empty: memory
  RAGMESH_ALLOW_UNAUTHENTICATED             without keys, allow binding a non-loopback address
  RAGMESH_<SERVICE>_ADDR                    where the gRPC services are (host:port)
  RAGMESH_GATEWAY_TIMEOUT_SECONDS           deadline of one backend call
  RAGMESH_GATEWAY_INGEST_TIMEOUT_SECONDS    deadline of an ingestion (convert + chunk + embed + store)
  RAGMESH_GATEWAY_ANSWER_TIMEOUT_SECONDS    deadline of an answer (retrieval + the chat model, streamed or not)
  RAGMESH_GATEWAY_READY_TIMEOUT_SECONDS     how long /ready waits for each service's health answer
  RAGMESH_MAX_UPLOAD_BYTES                  the largest request body accepted (413 above it)
  RAGMESH_CORS_ORIGINS                      comma-separated origins allowed by CORS; empty means none
  RAGMESH_MCP_READ_ONLY                     register only the read tools on the MCP endpoint / `ragmesh mcp`
  RAGMESH_MCP_ROOTS                         comma-separated folders MCP `convert_to_text` may read; empty: none
  RAGMESH_GRAPH_ENABLED                     serve the graph routes and MCP tools (RAGMESH_GRAPH_ADDR is the service)
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict
from ragmesh_common.config import default_addr
from ragmesh_common.paths import existing_folders, split_commas

from .auth import ApiKey, parse_api_keys


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, localhost)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class GatewaySettings(BaseSettings):
    """Everything the gateway reads from the environment (HTTP server, auth, backends, limits)."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_", extra="ignore", frozen=True)

    http_host: str = Field("127.0.0.1", description="Address the HTTP server binds to.")
    http_port: int = Field(8000, ge=0, le=65535, description="HTTP port; 0 picks a free one (tests).")
    api_keys: Annotated[tuple[ApiKey, ...], NoDecode] = Field(
        (),
        description=(
            "Bearer keys accepted on /api/v1 and /mcp, comma-separated KEY[:SCOPE[:COLLECTIONS[:RATE]]] "
            "(see ragmesh_gateway.auth); empty disables auth."
        ),
    )
    rate_limit_per_second: float = Field(
        0.0,
        ge=0,
        allow_inf_nan=False,
        description="Requests per second each key (or, without keys, each client address) may make; 0: unlimited.",
    )
    rate_limit_burst: int = Field(
        0,
        ge=0,
        description="Requests a client may make at once above the rate; 0: twice the rate (at least 1).",
    )
    redis_url: SecretStr | None = Field(
        None,
        description=(
            "Redis (redis://host:6379/0) holding the rate limits, so every gateway replica charges one budget per "
            "key; unset: each gateway keeps them in memory. An unreachable Redis lets requests through (logged, "
            "counted in ragmesh_gateway_rate_limit_store_errors_total)."
        ),
    )
    redis_prefix: str = Field(
        "ragmesh:gateway:",
        pattern=r"^[A-Za-z0-9_:.-]{0,64}$",
        description="Prefix of the gateway's Redis keys, so deployments can share a Redis.",
    )
    allow_unauthenticated: bool = Field(
        False,
        validate_default=True,
        description="Without API keys, allow binding an address other than loopback.",
    )
    converter_addr: str = Field(
        default_addr("converter"), min_length=1, description="Where the converter service listens (host:port)."
    )
    embedder_addr: str = Field(
        default_addr("embedder"), min_length=1, description="Where the embedder service listens (host:port)."
    )
    indexer_addr: str = Field(
        default_addr("indexer"), min_length=1, description="Where the indexer service listens (host:port)."
    )
    search_addr: str = Field(
        default_addr("search"), min_length=1, description="Where the search service listens (host:port)."
    )
    answer_addr: str = Field(
        default_addr("answer"), min_length=1, description="Where the answer service listens (host:port)."
    )
    graph_addr: str = Field(
        default_addr("graph"), min_length=1, description="Where the graph service listens (host:port)."
    )
    graph_enabled: bool = Field(
        False,
        description=(
            "Serve the graph: the /api/v1/collections/{name}/graph routes and the graph MCP tools (without it they "
            "do not exist)."
        ),
    )
    gateway_timeout_seconds: float = Field(30.0, gt=0, le=3600, description="Deadline of one backend call.")
    gateway_ingest_timeout_seconds: float = Field(
        300.0, gt=0, le=24 * 3600, description="Deadline of one ingestion call (files, URLs, batches)."
    )
    gateway_answer_timeout_seconds: float = Field(
        300.0, gt=0, le=24 * 3600, description="Deadline of one answer (retrieval and the whole model call)."
    )
    gateway_ready_timeout_seconds: float = Field(
        2.0, gt=0, le=60, description="How long /ready waits for each service's health check."
    )
    max_upload_bytes: int = Field(
        50 * 1024 * 1024, ge=1, description="The largest request body accepted; larger ones get 413."
    )
    cors_origins: Annotated[tuple[str, ...], NoDecode] = Field((), description="Origins allowed by CORS.")
    shutdown_grace_seconds: float = Field(5.0, ge=0, le=300, description="How long in-flight requests may drain.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", description="The lowest level of log records written."
    )
    grpc_max_message_bytes: int = Field(64 * 1024 * 1024, ge=1024, description="Largest gRPC message sent.")
    mcp_read_only: bool = Field(False, description="MCP: register only the read tools (no ingest or delete).")
    mcp_roots: Annotated[tuple[Path, ...], NoDecode] = Field(
        (), description="MCP convert_to_text: the folders local paths must lie in; empty refuses local paths."
    )

    _split = field_validator("cors_origins", "mcp_roots", mode="before")(split_commas)
    _keys = field_validator("api_keys", mode="before")(parse_api_keys)

    _roots_are_folders = field_validator("mcp_roots")(existing_folders)

    @field_validator("allow_unauthenticated")
    @classmethod
    def _refuse_open_non_loopback(cls, allowed: bool, info: ValidationInfo) -> bool:
        # Runs after http_host and api_keys (declared above), so the error names this variable.
        host, keys = info.data.get("http_host", ""), info.data.get("api_keys")
        if not keys and not allowed and not is_loopback(host):
            raise ValueError(
                f"refusing to serve {host} without authentication: set RAGMESH_API_KEYS, "
                "bind RAGMESH_HTTP_HOST to a loopback address, or set RAGMESH_ALLOW_UNAUTHENTICATED=true"
            )
        return allowed

    @property
    def addresses(self) -> dict[str, str]:
        """Backend service name -> host:port."""
        return {
            "converter": self.converter_addr,
            "embedder": self.embedder_addr,
            "indexer": self.indexer_addr,
            "search": self.search_addr,
            "answer": self.answer_addr,
            "graph": self.graph_addr,
        }
