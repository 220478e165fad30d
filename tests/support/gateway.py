"""Gateway test helpers shared by the gateway's test modules: settings that point at a test mesh, and the one
error shape every REST error has."""

from __future__ import annotations

import httpx
from ragmesh_gateway.config import GatewaySettings


def settings_for(mesh, **overrides) -> GatewaySettings:
    """A gateway on a free port in front of `mesh` (a started test Mesh), with `overrides` on top."""
    addrs = {f"{name}_addr": addr for name, addr in mesh.addrs.items()}
    return GatewaySettings(http_port=0, **{**addrs, **overrides})


def assert_error(response: httpx.Response, status: int, reason: str) -> dict:
    """The REST error shape with this status and reason, the request id echoed; returns the error object."""
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"code", "reason", "message", "details", "request_id", "trace_id"}
    assert error["reason"] == reason, error
    assert error["request_id"] == response.headers["x-request-id"]
    return error
