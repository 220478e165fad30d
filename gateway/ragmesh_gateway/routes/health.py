"""Liveness and readiness (open even when API keys are set)."""

from __future__ import annotations

import grpc
from fastapi import APIRouter
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason

from ..deps import Clients
from ..errors import DOMAIN, ErrorResponse
from ..models import HealthResponse, ReadyResponse

router = APIRouter(tags=["health"])


@router.get("/health", response_model=HealthResponse)
async def health() -> HealthResponse:
    """Liveness: the gateway process is up (backends are not contacted)."""
    return HealthResponse()


@router.get("/ready", response_model=ReadyResponse, responses={503: {"model": ErrorResponse}})
async def ready(clients: Clients) -> ReadyResponse:
    """Readiness: 200 when every service's gRPC health check says SERVING (checked in parallel, short
    timeout), else 503 SERVICES_NOT_READY with `details.services` naming the ones that are not."""
    states = await clients.health()
    down = [name for name, serving in states.items() if not serving]
    if down:
        raise RagmeshError(
            grpc.StatusCode.UNAVAILABLE,
            Reason.SERVICES_NOT_READY,
            f"not serving: {', '.join(down)}",
            DOMAIN,
            {"services": ",".join(down)},
        )
    return ReadyResponse(services=dict.fromkeys(states, "SERVING"))
