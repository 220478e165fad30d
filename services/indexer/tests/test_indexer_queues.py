"""The two job stores (SQLite embedded, Redis Streams) under one contract: results count once however often a
batch is delivered, a batch taken and never acknowledged is delivered again (after a restart for SQLite,
to another consumer after the idle time for Redis), acknowledged batches never come back.

Redis tests use the real Redis at RAGMESH_TEST_REDIS_URL (default redis://127.0.0.1:6379/0) with a random
key prefix, deleted afterwards; they are skipped, saying so, when no Redis answers there."""

from __future__ import annotations

import asyncio
import json
import os
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
from ragmesh_indexer.queues import ItemResult, JobStoreBusyError, RedisJobStore, SqliteJobStore

REDIS_URL = os.environ.get("RAGMESH_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
pytestmark = pytest.mark.asyncio(loop_scope="session")


async def redis_available() -> bool:
    import redis.asyncio as aioredis

    client = aioredis.from_url(REDIS_URL, socket_connect_timeout=1)
    try:
        await client.ping()
        return True
    except Exception:  # noqa: BLE001
        return False
    finally:
        await client.aclose()


async def drop_prefix(prefix: str) -> None:
    import redis.asyncio as aioredis

    client = aioredis.from_url(REDIS_URL)
    try:
        keys = [k async for k in client.scan_iter(match=f"{prefix}*")]
        if keys:
            await client.delete(*keys)
    finally:
        await client.aclose()


@pytest_asyncio.fixture(loop_scope="session")
async def redis_prefix():
    if not await redis_available():
        pytest.skip(f"no Redis at {REDIS_URL} (set RAGMESH_TEST_REDIS_URL)")
    prefix = f"ragmesh-test-{uuid.uuid4().hex[:8]}:"
    yield prefix
    await drop_prefix(prefix)


def job(job_id: str, total: int) -> dict:
    return {"job_id": job_id, "collection": "c", "total": total, "state": "queued", "created_at": "now"}


def batch(job_id: str, start: int, n: int) -> bytes:
    return json.dumps({"job_id": job_id, "start": start, "items": [{"label": str(i)} for i in range(n)]}).encode()


async def exercise(store, restart) -> None:
    """The contract, for one store; `restart()` returns a store whose previous consumer is gone."""
    await store.create(job("j1", 4), [batch("j1", 0, 2), batch("j1", 2, 2)])
    first = await store.claim("a", 0.1)
    assert first is not None and first.job_id == "j1" and json.loads(first.payload)["start"] == 0
    await store.start("j1", "2026-01-01T00:00:00+00:00")
    counts = await store.record(
        "j1",
        [
            ItemResult(0, "indexed", 10),
            ItemResult(
                1,
                "failed",
                5,
                {
                    "document": "1",
                    "error": {
                        "code": "INVALID_ARGUMENT",
                        "reason": "EMPTY_DOCUMENT",
                        "domain": "d",
                        "message": "m",
                        "metadata": {},
                    },
                },
            ),
        ],
    )
    assert counts == {"indexed": 1, "unchanged": 0, "failed": 1}
    # The same results again (a redelivered batch) count nothing.
    assert await store.record("j1", [ItemResult(0, "unchanged", 10), ItemResult(1, "failed", 5)]) == counts
    await store.ack(first)
    second = await store.claim("a", 0.1)
    assert second is not None and json.loads(second.payload)["start"] == 2
    # The worker dies before acknowledging the second batch: it is delivered again, and only it.
    store = await restart(store)
    again = await store.claim("b", 2.0)
    assert again is not None and json.loads(again.payload)["start"] == 2
    await store.record("j1", [ItemResult(2, "unchanged", 1), ItemResult(3, "indexed", 1)])
    await store.ack(again)
    assert await store.claim("b", 0.1) is None
    got = await store.get("j1")
    assert (got["state"], got["indexed"], got["unchanged"], got["failed"], got["bytes"]) == ("running", 2, 1, 1, 17)
    assert got["started_at"] and [e["document"] for e in got["errors"]] == ["1"]
    await store.update("j1", state="done", finished_at="later", deleted=3)
    assert [(j["job_id"], j["state"], j["deleted"]) for j in await store.list(10)] == [("j1", "done", 3)]
    await store.save_datasource({"datasource_id": "ds-1", "collection": "c"})
    assert await store.list_datasources() == [{"datasource_id": "ds-1", "collection": "c"}]
    assert await store.get("nope") is None
    await store.close()


async def test_sqlite_job_store(tmp_path: Path) -> None:
    async def restart(store: SqliteJobStore) -> SqliteJobStore:
        await store.close()  # like a killed process: the claim was never acknowledged
        return SqliteJobStore(tmp_path)

    await exercise(SqliteJobStore(tmp_path), restart)


async def test_sqlite_job_store_has_one_owner(tmp_path: Path) -> None:
    store = SqliteJobStore(tmp_path)
    try:
        with pytest.raises(JobStoreBusyError, match="RAGMESH_REDIS_URL"):
            SqliteJobStore(tmp_path)
    finally:
        await store.close()


async def test_redis_job_store(redis_prefix: str) -> None:
    async def restart(store: RedisJobStore) -> RedisJobStore:
        await store.close()  # consumer "a" is gone; "b" takes its pending batch once it is idle for 0.5 s
        await asyncio.sleep(0.6)
        return RedisJobStore(REDIS_URL, redis_prefix, claim_idle_seconds=0.5)

    await exercise(RedisJobStore(REDIS_URL, redis_prefix, claim_idle_seconds=0.5), restart)


async def test_redis_keep_alive_keeps_a_batch_with_its_worker(redis_prefix: str) -> None:
    store = RedisJobStore(REDIS_URL, redis_prefix, claim_idle_seconds=1.0)
    other = RedisJobStore(REDIS_URL, redis_prefix, claim_idle_seconds=1.0)
    try:
        await store.create(job("k", 1), [batch("k", 0, 1)])
        taken = await store.claim("a", 0.1)
        for _ in range(3):
            await asyncio.sleep(0.4)
            await store.keep_alive(taken, "a")
            assert await other.claim("b", 0.05) is None  # never idle long enough to be taken over
        await asyncio.sleep(1.2)
        assert (await other.claim("b", 0.1)).id == taken.id  # stopped renewing: taken over
    finally:
        await store.close()
        await other.close()
