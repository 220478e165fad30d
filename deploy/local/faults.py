"""The faults of the replicated topology, with clients running throughout and every response counted.

Each scenario takes a started `Topology`, leaves every replica running again, and returns what it counted; the
tests (tests/e2e/test_e2e_ha.py) assert on it and the bench (bench/bench_ha.py) records it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx

from deploy.local.topology import Topology

CLIENTS = 8
# The hash embedder scores no chunk as relevant as the model does: answer whatever was retrieved.
ANSWER_ENV = {"RAGMESH_ANSWER_MIN_RELEVANCE": "0"}
TOPICS = ["replicas", "balancer", "sessions", "streams", "embedders", "gateways", "rolling", "restart"]


def seed(topology: Topology, per_topic: int = 5) -> int:
    """A few short documents on each topic, so that every search has results; how many."""
    documents = [
        {"doc_id": f"{topic}-{i}", "text": f"Notes on {topic}, part {i}: what a platform team sees."}
        for topic in TOPICS
        for i in range(per_topic)
    ]
    with httpx.Client(base_url=topology.url, timeout=120) as http:
        reply = http.post("/api/v1/ingest/batch", json={"documents": documents})
        reply.raise_for_status()
    return len(documents)


@dataclasses.dataclass
class Load:
    """What clients searching in a loop counted: outcomes, the first failures' text, each success's latency."""

    outcomes: Counter[str] = dataclasses.field(default_factory=Counter)
    failures: list[str] = dataclasses.field(default_factory=list)
    latencies_ms: list[float] = dataclasses.field(default_factory=list)

    @property
    def ok(self) -> int:
        return self.outcomes["ok"]

    @property
    def failed(self) -> int:
        return self.outcomes["failed"]

    async def until(self, ok: int) -> None:
        """Wait until `ok` searches in all have succeeded."""
        while self.ok < ok:
            await asyncio.sleep(0.05)

    def counts(self) -> dict[str, int]:
        return {"ok": self.ok, "failed": self.failed}


async def _loop(call: Callable[[int], Awaitable[None]], load: Load, stop: asyncio.Event, client: int) -> None:
    n = client
    while not stop.is_set():
        n += CLIENTS
        started = time.perf_counter()
        try:
            await call(n)
        except Exception as exc:  # every failure is counted and kept, whatever its kind
            load.outcomes["failed"] += 1
            if len(load.failures) < 20:
                load.failures.append(f"client {client}: {type(exc).__name__}: {exc}"[:300])
        else:
            load.outcomes["ok"] += 1
            load.latencies_ms.append((time.perf_counter() - started) * 1000)


@contextlib.asynccontextmanager
async def searching(url: str, clients: int = CLIENTS, mode: str = "hybrid", warm: int = 20) -> AsyncIterator[Load]:
    """`clients` REST clients searching through `url` from before the block (`warm` searches done) to its end."""
    load, stop = Load(), asyncio.Event()
    async with httpx.AsyncClient(base_url=url, timeout=30, limits=httpx.Limits(max_connections=clients)) as http:

        async def one(n: int) -> None:
            reply = await http.post(
                "/api/v1/search", json={"query": f"{TOPICS[n % len(TOPICS)]} notes {n}", "mode": mode}
            )
            if reply.status_code != 200:
                raise RuntimeError(f"HTTP {reply.status_code}: {reply.text[:200]}")
            if not reply.json()["results"]:
                raise RuntimeError(f"no results: {reply.text[:200]}")

        tasks = [asyncio.create_task(_loop(one, load, stop, i)) for i in range(clients)]
        try:
            await load.until(warm)
            yield load
        finally:
            stop.set()
            await asyncio.gather(*tasks)


async def kill_embedder(topology: Topology, after: int = 300) -> dict[str, Any]:
    """SIGKILL embedder-1 while 8 clients run hybrid searches; `after` more searches succeed after it."""
    async with searching(topology.url) as load:
        await load.until(load.ok + 80)
        killed_at = load.ok
        await asyncio.to_thread(topology.replicas["embedder-1"].kill)
        await load.until(killed_at + after)
    await asyncio.to_thread(topology.restart, "embedder-1")
    return {"searches": load.counts(), "failures": load.failures}


async def kill_gateway(
    topology: Topology, after: int = 300, while_down: Callable[[], Awaitable[Any]] | None = None
) -> dict[str, Any]:
    """SIGKILL gateway-1 while 8 REST clients and the MCP bridge's REST client (`ragmesh mcp --remote`, which
    retries) search through HAProxy. `while_down` (say, MCP clients going on in their sessions) is awaited once
    `after` searches have succeeded since the kill, before gateway-1 is started again; its result is kept."""
    from ragmesh_cli.bridge import Remote

    bridge = Remote(topology.url, None, backoff=0.2)
    bridged, stop = Load(), asyncio.Event()

    async def through_bridge(n: int) -> None:
        reply = await bridge.request("POST", "/api/v1/search", json={"query": "gateways notes", "mode": "hybrid"})
        if not reply["results"]:
            raise RuntimeError("no results")

    try:
        async with searching(topology.url) as load:
            task = asyncio.create_task(_loop(through_bridge, bridged, stop, 0))
            await load.until(load.ok + 80)
            killed_at = load.ok
            await asyncio.to_thread(topology.replicas["gateway-1"].kill)
            await load.until(killed_at + after)
            beside = await while_down() if while_down is not None else None
            stop.set()
            await task
    finally:
        await bridge.http.aclose()
    await asyncio.to_thread(topology.restart, "gateway-1")
    return {
        "while_down": beside,
        "clients": CLIENTS,
        "searches": load.counts(),
        "failures": load.failures,
        "bridge_searches": bridged.counts(),
        "bridge_failures": bridged.failures,
    }


async def kill_answer_mid_conversation(topology: Topology) -> dict[str, Any]:
    """Two turns of a conversation (round robin: one on each answer replica), SIGKILL answer-1, a third turn."""
    queries = ["what do replicas keep", "and the balancer", "after the restart"]
    async with httpx.AsyncClient(base_url=topology.url, timeout=60) as http:
        replies = []
        session = None
        for i, query in enumerate(queries):
            if i == 2:
                await asyncio.to_thread(topology.replicas["answer-1"].kill)
            body = {"query": query} | ({"session_id": session} if session else {})
            reply = await http.post("/api/v1/ask", json=body)
            replies.append(reply.status_code)
            if reply.status_code != 200:
                break
            session = reply.json()["session_id"]
            last = reply.json()
        turns = (await http.get(f"/api/v1/sessions/{session}")).json()["turns"] if session else []
    await asyncio.to_thread(topology.restart, "answer-1")
    return {
        "statuses": replies,
        "last_standalone_query": last["standalone_query"] if replies[-1] == 200 else None,
        "session_queries": [t["query"] for t in turns],
        "queries": queries,
    }


async def rolling_restart(
    topology: Topology, files: int = 120, tiers: tuple[str, ...] = ("embedder", "answer", "gateway")
) -> dict[str, Any]:
    """A folder job of `files` pages and 8 searching clients while every replicated tier is restarted, one
    replica at a time (SIGTERM, wait for ready, next); the job waited for, the collection counted."""
    folder = topology.roots / f"handbook-{time.monotonic_ns()}"
    folder.mkdir(parents=True)
    for i in range(files):
        (folder / f"page-{i:03d}.md").write_text(f"# Page {i}\n\nRolling restarts leave page {i} in place.\n")
    collection = "handbook"
    async with httpx.AsyncClient(base_url=topology.url, timeout=60) as http, searching(topology.url) as load:
        accepted = await http.post("/api/v1/jobs", json={"collection": collection, "folder": str(folder)})
        accepted.raise_for_status()
        job_id = accepted.json()["job_id"]
        for tier in tiers:
            await asyncio.to_thread(topology.rolling_restart, tier)
        await load.until(load.ok + 50)  # searches still answered once the last replica is back
        job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
        while job["state"] in ("queued", "running"):
            await asyncio.sleep(0.2)
            job = (await http.get(f"/api/v1/jobs/{job_id}")).json()
        stored = next(
            c for c in (await http.get("/api/v1/collections")).json()["collections"] if c["name"] == collection
        )
    return {
        "searches": load.counts(),
        "failures": load.failures,
        "files": files,
        "job": {k: job[k] for k in ("state", "total", "indexed", "failed", "skipped")},
        "documents": stored["documents"],
        "chunks": stored["chunks"],
    }
