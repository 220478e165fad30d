"""Bearer API keys: a plain check (for REST now and the MCP endpoint later) and the FastAPI dependency."""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from typing import Annotated

import grpc
from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr
from ragmesh_common.errors import RagmeshError

from .errors import DOMAIN

# Only documents the scheme in OpenAPI (the "Authorize" button in /docs); the check reads the raw header.
_bearer_scheme = HTTPBearer(auto_error=False, description="An API key from RAGMESH_API_KEYS.")


def check_api_key(authorization: str | None, keys: Sequence[SecretStr]) -> None:
    """Accept the request when no keys are configured or `authorization` is `Bearer <one of the keys>`;
    else raise UNAUTHENTICATED (API_KEY_MISSING or API_KEY_INVALID). Every key is compared in constant time."""
    if not keys:
        return
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        raise RagmeshError(
            grpc.StatusCode.UNAUTHENTICATED, "API_KEY_MISSING",
            "this API needs an API key: send 'Authorization: Bearer <key>'", DOMAIN,
        )
    presented = token.encode()
    matched = False
    for key in keys:
        matched |= hmac.compare_digest(presented, key.get_secret_value().encode())
    if not matched:
        raise RagmeshError(grpc.StatusCode.UNAUTHENTICATED, "API_KEY_INVALID", "the API key is not valid", DOMAIN)


async def require_api_key(
    request: Request, _: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer_scheme)] = None
) -> None:
    """Dependency for the /api/v1 routers: enforces RAGMESH_API_KEYS."""
    check_api_key(request.headers.get("authorization"), request.app.state.settings.api_keys)
