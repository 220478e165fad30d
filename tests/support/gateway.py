"""Gateway test helpers shared by the gateway's test modules: settings that point at a test mesh, the one
error shape every REST error has, and the official MCP client on a gateway's /mcp with its results' two shapes."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult
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


@contextlib.asynccontextmanager
async def mcp_http_client(url: str, key: str | None = None) -> AsyncIterator[Client]:
    """The official MCP client over streamable HTTP to the gateway at `url` (with `key` as its bearer key)."""
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


def tool_ok(result: CallToolResult) -> dict[str, Any]:
    """The structured content of a successful call."""
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def tool_failed(result: CallToolResult, reason: str) -> dict[str, Any]:
    """The error object of a failed call (the REST error shape), checked to carry `reason`."""
    assert result.is_error, result.structured_content
    error = result.structured_content["error"]
    assert set(error) == {"code", "reason", "message", "details", "request_id", "trace_id"}
    assert error["reason"] == reason, error
    assert error["message"]
    assert result.content[0].text.startswith(f"{reason}: ")
    return error
