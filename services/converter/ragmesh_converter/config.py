"""Settings of the converter service (environment only, prefix RAGMESH_CONVERTER_)."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import SettingsConfigDict
from ragmesh_common import config
from ragmesh_common.config import ServiceSettings

MIB = 1024 * 1024


class ConverterSettings(ServiceSettings):
    """What the converter reads from RAGMESH_CONVERTER_* (plus the shared RAGMESH_* settings)."""

    model_config = SettingsConfigDict(env_prefix="RAGMESH_CONVERTER_", extra="ignore", frozen=True)

    port: int = config.port_field("converter")
    metrics_port: int = config.metrics_port_field("converter")
    max_bytes: int = Field(
        50 * MIB, ge=1, description="Largest document accepted (upload, stream or URL body), in bytes."
    )
    max_unpacked_bytes: int = Field(
        200 * MIB,
        ge=1,
        description="Largest total uncompressed size of a ZIP-based document (ZIP, DOCX, XLSX, PPTX, EPUB), "
        "nested archives included: the guard against decompression bombs.",
    )
    fetch_timeout_seconds: float = Field(20.0, gt=0, le=600, description="Time limit for fetching one URL.")
    allow_private_urls: bool = Field(
        False,
        description="Allow URLs whose host resolves to private, loopback, link-local or other non-public "
        "addresses (SSRF guard off). Only for trusted callers.",
    )
    max_redirects: int = Field(5, ge=0, le=20, description="Redirects followed per URL fetch.")
    max_concurrency: int = Field(2, ge=1, le=64, description="Conversions running at once (CPU bound).")
    user_agent: str = Field("ragmesh-converter/0.1", min_length=1, description="User-Agent of URL fetches.")
