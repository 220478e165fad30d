"""Graph settings: environment only (RAGMESH_GRAPH_*, plus RAGMESH_DATA_DIR), validated at start-up.

The graphs live under <data_dir>/graph/<collection>/ (`data`: the entities, `ontology`: their types), each an
embedded LadybugDB database that this process alone opens for writing: one graph pod per data directory.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import SettingsConfigDict
from ragmesh_common import config
from ragmesh_common.config import ServiceSettings


class GraphSettings(ServiceSettings):
    """Settings of the graph service."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_GRAPH_", extra="ignore", frozen=True, populate_by_name=True)

    port: int = config.port_field("graph")
    metrics_port: int = config.metrics_port_field("graph")
    data_dir: Path = Field(
        Path(".ragmesh"),
        validation_alias="RAGMESH_DATA_DIR",
        description="The data directory; each collection's graph is kept in <data_dir>/graph/<collection>/.",
    )
    query_timeout_seconds: float = Field(
        10.0, gt=0, le=3600, description="A raw Cypher query running longer than this fails with QUERY_TIMEOUT."
    )
    row_limit: int = Field(
        1000, ge=1, le=1_000_000, description="Rows a raw query returns when the request does not say how many."
    )
    max_row_limit: int = Field(
        10_000, ge=1, le=1_000_000, description="The most rows a raw query may ask for (row_limit of a request)."
    )
    buffer_pool_mb: int = Field(128, ge=16, le=1_048_576, description="Page cache of each open graph database, in MiB.")
    max_db_size_gb: int = Field(
        64,
        ge=1,
        le=8192,
        description=(
            "Address space each graph database reserves (its largest size), in GiB, a power of two; a process "
            "opens two per collection and a read-only copy for raw queries."
        ),
    )

    @field_validator("max_row_limit")
    @classmethod
    def _at_least_the_default(cls, value: int, info: ValidationInfo) -> int:
        if value < info.data.get("row_limit", 0):
            raise ValueError("must be at least RAGMESH_GRAPH_ROW_LIMIT")
        return value

    @field_validator("max_db_size_gb")
    @classmethod
    def _power_of_two(cls, value: int) -> int:
        if value & (value - 1):
            raise ValueError("must be a power of two")
        return value

    @property
    def graphs_dir(self) -> Path:
        return self.data_dir / "graph"
