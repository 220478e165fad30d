"""Rate limits shared by gateway replicas: two gateways (in-process, each on its own port) in front of one mesh,
with RAGMESH_REDIS_URL set to the real Redis at RAGMESH_TEST_REDIS_URL (default redis://127.0.0.1:6379/0) and a
key prefix of their own, charge one budget per key whichever replica answers, and tell the same instant to retry
at. Without Redis each gateway keeps its own (the embedded default); with an unreachable Redis requests are let
through, logged and counted. Skipped, saying so, when no Redis answers."""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
from ragmesh_gateway.app import run_gateway

from tests.support.gateway import assert_error, settings_for

REDIS_URL = os.environ.get("RAGMESH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
KEY = "k-shared"
# Rate 0.1/s with a burst of 4: a window of 4 requests per 40 s, long enough that no slot frees during a test.
KEYS = f"{KEY}:read:*:0.1, k-other:read:*:0.1"


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory()


@pytest.fixture
async def redis_prefix() -> AsyncIterator[str]:
    import redis.asyncio as aioredis

    client = aioredis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        await client.ping()
    except Exception:  # noqa: BLE001
        pytest.skip(f"no Redis at {REDIS_URL} (set RAGMESH_TEST_REDIS_URL)")
    prefix = f"ragmesh-test-{uuid.uuid4().hex[:8]}:"
    try:
        yield prefix
    finally:
        keys = [key async for key in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


@contextlib.asynccontextmanager
async def replicas(mesh, n: int, **overrides) -> AsyncIterator[list[httpx.AsyncClient]]:
    """`n` gateways with the same settings, a client with KEY on each."""
    async with contextlib.AsyncExitStack() as stack:
        clients = []
        for _ in range(n):
            url = await stack.enter_async_context(
                run_gateway(settings_for(mesh, api_keys=KEYS, rate_limit_burst=4, **overrides))
            )
            clients.append(
                await stack.enter_async_context(
                    httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
                )
            )
        yield clients


async def test_replicas_on_redis_share_one_budget_per_key_and_one_retry_instant(mesh, redis_prefix):
    async with replicas(mesh, 2, redis_url=REDIS_URL, redis_prefix=redis_prefix) as (a, b):
        responses = []
        for i in range(8):  # alternating replicas, as a round-robin balancer sends them
            response = await (a, b)[i % 2].get("/api/v1/collections")
            responses.append((response, time.time()))
        statuses = [response.status_code for response, _ in responses]
        assert statuses == [200] * 4 + [429] * 4, statuses  # the burst of 4, not 4 on each replica
        retry_at = []
        for response, received in responses[4:]:
            error = assert_error(response, 429, "RATE_LIMITED")
            assert 1 <= int(response.headers["retry-after"]) <= 40
            retry_at.append(received + float(error["details"]["retry_after_seconds"]))
        # Both replicas name the same instant (the oldest request in the shared window plus the window); the
        # spread is only the time between the responses.
        assert max(retry_at) - min(retry_at) < 1.0, retry_at
        # Another key has its own budget on either replica.
        for client in (a, b):
            other = await client.get("/api/v1/collections", headers={"Authorization": "Bearer k-other"})
            assert other.status_code == 200


async def test_replicas_without_redis_each_keep_their_own_budget(mesh):
    async with replicas(mesh, 2) as (a, b):
        statuses = [(await (a, b)[i % 2].get("/api/v1/collections")).status_code for i in range(10)]
    # 4 on each replica: the embedded default counts per process.
    assert statuses == [200] * 8 + [429] * 2, statuses


async def test_an_unreachable_redis_lets_requests_through_and_counts_them(mesh, redis_prefix):
    async with replicas(mesh, 1, redis_url="redis://127.0.0.1:1/0", redis_prefix=redis_prefix) as (client,):
        before = _store_errors((await client.get("/metrics")).text)
        statuses = [(await client.get("/api/v1/collections")).status_code for _ in range(6)]
        after = _store_errors((await client.get("/metrics")).text)
    assert statuses == [200] * 6  # over the burst of 4, yet served: the limit fails open
    assert after - before == 6


def _store_errors(exposition: str) -> float:
    for line in exposition.splitlines():
        if line.startswith("ragmesh_gateway_rate_limit_store_errors_total "):
            return float(line.split()[1])
    raise AssertionError("no ragmesh_gateway_rate_limit_store_errors_total in /metrics")
