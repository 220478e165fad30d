"""Settings shared by every process. Each service has one pydantic-settings class of its own (environment
only, validated at start-up); they build on `ServiceSettings` here.

Environment variables:
  RAGMESH_<SERVICE>_HOST / _PORT   where a service's gRPC server listens
  RAGMESH_<SERVICE>_ADDR           where clients reach it (host:port)
  RAGMESH_<SERVICE>_METRICS_PORT   its Prometheus /metrics port (DEFAULT_METRICS_PORTS; 0 = off)
  RAGMESH_SHUTDOWN_GRACE_SECONDS   how long in-flight calls may drain on SIGTERM
  RAGMESH_LOG_LEVEL                DEBUG, INFO, WARNING, ERROR
  RAGMESH_GRAPH_ENABLED            the optional graph service and the features that use it (GraphFeatureSettings)
"""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

# The default port of each gRPC service; the gateway's HTTP port is RAGMESH_HTTP_PORT (8000).
DEFAULT_PORTS = {
    "converter": 50051,
    "embedder": 50052,
    "indexer": 50053,
    "search": 50054,
    "answer": 50055,
    "graph": 50056,
}
# Each gRPC service's Prometheus port (RAGMESH_<SERVICE>_METRICS_PORT): distinct, so that `ragmesh up` (all
# services in one process) serves them all; in containers every service uses 9464.
DEFAULT_METRICS_PORTS = {
    "converter": 9464,
    "embedder": 9465,
    "indexer": 9466,
    "search": 9467,
    "answer": 9468,
    "graph": 9469,
}
# Services a mesh runs only when their feature is on (the graph service: RAGMESH_GRAPH_ENABLED=true).
OPTIONAL_SERVICES = ("graph",)
# The services every mesh runs.
SERVICES = tuple(name for name in DEFAULT_PORTS if name not in OPTIONAL_SERVICES)


def default_addr(service: str) -> str:
    return f"127.0.0.1:{DEFAULT_PORTS[service]}"


# The fields each service's settings declare in the same words: a service's own ports, and where a service it
# calls listens. pydantic's `Field` returns Any, and so do these.
def port_field(service: str) -> Any:
    """`port` of a service's settings: its gRPC port, by default `DEFAULT_PORTS[service]`."""
    return Field(DEFAULT_PORTS[service], ge=0, le=65535, description="gRPC port; 0 picks a free one.")


def metrics_port_field(service: str) -> Any:
    """`metrics_port` of a service's settings: by default `DEFAULT_METRICS_PORTS[service]`."""
    return Field(DEFAULT_METRICS_PORTS[service], ge=0, le=65535, description="Prometheus /metrics port; 0 disables it.")


def addr_field(service: str, description: str = "") -> Any:
    """`<service>_addr`: where another service listens, read from RAGMESH_<SERVICE>_ADDR whatever the prefix."""
    return Field(
        default_addr(service),
        validation_alias=f"RAGMESH_{service.upper()}_ADDR",
        description=description or f"Where the {service} service listens (host:port).",
    )


def embedder_wait_field() -> Any:
    """`embedder_wait_seconds` of the services that open the store (its dimension comes from the embedder)."""
    return Field(
        60.0,
        ge=0,
        description="At start-up without a given store, how long to wait for the embedder to report its dimension.",
    )


class ServiceSettings(BaseSettings):
    """What every gRPC service reads. Subclasses set `env_prefix="RAGMESH_<SERVICE>_"`."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_", extra="ignore", frozen=True)

    host: str = Field("127.0.0.1", description="Address to bind the gRPC server to (0.0.0.0 in containers).")
    port: int = Field(0, ge=0, le=65535, description="gRPC port; 0 picks a free one (tests).")
    shutdown_grace_seconds: float = Field(
        5.0,
        ge=0,
        le=300,
        validation_alias="RAGMESH_SHUTDOWN_GRACE_SECONDS",
        description="On SIGTERM, how long in-flight calls may finish (keep below terminationGracePeriodSeconds).",
    )
    metrics_port: int = Field(
        0,
        ge=0,
        le=65535,
        description="Port of the Prometheus /metrics endpoint (on the gRPC host); 0 disables it.",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", validation_alias="RAGMESH_LOG_LEVEL", description="The lowest level of log records written."
    )
    max_message_bytes: int = Field(
        64 * 1024 * 1024,
        ge=1024,
        validation_alias="RAGMESH_GRPC_MAX_MESSAGE_BYTES",
        description="Largest gRPC message accepted or sent.",
    )


class GraphFeatureSettings(BaseSettings):
    """Whether the graph features are on: `ragmesh up` starts the graph service, the indexer takes entities, the
    gateway offers the graph tools and routes, and answers add the neighbourhood of the entities they retrieved.
    Every process that has such a feature reads it."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_GRAPH_", extra="ignore", frozen=True)

    enabled: bool = Field(
        False,
        description=(
            "Turn on the graph service (started by `ragmesh up`) and the features that use it; "
            "`ragmesh serve graph` serves it whatever this says."
        ),
    )


# Variables whose values are never repeated in an error message.
_SECRET_NAME = re.compile(r"KEY|TOKEN|SECRET|PASSWORD", re.IGNORECASE)


S = TypeVar("S", bound=BaseSettings)


class ConfigError(SystemExit):
    """Raised at start-up when the environment does not make valid settings; the message says which."""


def load(settings_cls: type[S], **overrides: Any) -> S:
    """Build a settings object from the environment, failing fast with a message that names the variable."""
    try:
        return settings_cls(**overrides)
    except ValidationError as exc:
        prefix = settings_cls.model_config.get("env_prefix", "")
        lines = []
        for err in exc.errors():
            message = err["msg"].removeprefix("Value error, ")
            if not err["loc"]:  # a check across fields: its message names the variables
                lines.append(f"  {message}")
                continue
            name, *inner = (str(p) for p in err["loc"])
            field = settings_cls.model_fields.get(name)
            env = (field.validation_alias if field and isinstance(field.validation_alias, str) else None) or (
                f"{prefix}{name}".upper()
            )
            # A place inside a structured value (a JSON list of objects): RAGMESH_X_MODELS[0].name
            env += "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in inner)
            # Never a secret, nor a whole object or text that may hold one (JSON with an "api_key").
            value = err.get("input")
            secret = _SECRET_NAME.search(env) or isinstance(value, dict | list) or _SECRET_NAME.search(str(value))
            shown = "" if secret else f" (got {value!r})"
            lines.append(f"  {env}: {message}{shown}")
        raise ConfigError("invalid configuration:\n" + "\n".join(lines)) from None
