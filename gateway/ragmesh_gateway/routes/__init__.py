"""The REST routers; `API_ROUTERS` are under /api/v1 (behind the API key), `health.router` is open.
`GRAPH_ROUTERS` (under /api/v1 too) are served only with RAGMESH_GRAPH_ENABLED=true: `api_routers(settings)`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import ask, collections, convert, documents, golden, graph, ingest, jobs, search, sessions

if TYPE_CHECKING:
    from fastapi import APIRouter

    from ..config import GatewaySettings

API_ROUTERS = (
    ingest.router,
    convert.router,
    search.router,
    documents.router,
    collections.router,
    jobs.router,
    golden.router,
    ask.router,
    sessions.router,
)
GRAPH_ROUTERS = (graph.router,)


def api_routers(settings: GatewaySettings) -> tuple[APIRouter, ...]:
    """The /api/v1 routers a gateway with these settings serves."""
    return API_ROUTERS + (GRAPH_ROUTERS if settings.graph_enabled else ())
