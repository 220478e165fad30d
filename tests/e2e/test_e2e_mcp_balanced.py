"""MCP behind a load balancer: two gateway replicas (`ragmesh serve gateway` processes on the same in-process mesh)
behind a real HAProxy (round robin per request, no affinity, health checks on /ready), driven by MCP clients of
both SDK generations -- the installed 2.x `Client` and a 1.x client (`mcp<2`, the 2025 protocol with
Mcp-Session-Id) in a venv of its own (tests/support/mcp_v1.py). The gateway serves MCP statelessly
(docs/decisions/mcp-behind-a-load-balancer.md), so whichever replica a request reaches can answer it."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from deploy.local.haproxy import HAProxy, haproxy_binary
from tests.e2e.mesh_process import Proc, free_port
from tests.support.gateway import mcp_http_client, tool_ok
from tests.support.mcp_v1 import V1Client

TEXT = (
    "The Rhone glacier feeds Lake Geneva. Its tongue retreats every summer, and surveyors from Gletsch have "
    "measured its front every autumn since 1874."
)
ADMIN_KEY, READ_KEY = "balanced-admin", "balanced-read"
MCP_POSTS = re.compile(r"ragmesh_http_server_request_duration_seconds_count\{([^}]*)\} ([0-9.e+]+)")


@dataclass
class Balanced:
    """Two gateway replicas and the HAProxy in front of them."""

    replicas: list[Proc]
    urls: list[str]
    lb: HAProxy


async def wait_ready(url: str, proc: Proc, timeout: float = 120) -> None:
    """Wait (without blocking the event loop the mesh runs on) until `url`/ready answers 200."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with httpx.AsyncClient(timeout=2) as http:
        while loop.time() < deadline:
            assert proc.popen is not None
            if proc.popen.poll() is not None:
                raise AssertionError(f"gateway exited with {proc.popen.returncode}:\n{proc.log()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{url}/ready")).status_code == 200:
                    return
            await asyncio.sleep(0.2)
    raise AssertionError(f"{url} not ready after {timeout}s:\n{proc.log()[-4000:]}")


@contextlib.asynccontextmanager
async def balanced_gateways(mesh: Any, workdir: Path, **settings: str) -> AsyncIterator[Balanced]:
    """Two `ragmesh serve gateway` processes on `mesh` (with `settings`, RAGMESH_* variables) and HAProxy in
    front; all stopped on exit."""
    if haproxy_binary() is None:
        pytest.skip("haproxy is not installed (scripts/system-deps.sh installs Debian's package)")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMESH_", "OTEL_"))}
    env.update({f"RAGMESH_{name.upper()}_ADDR": addr for name, addr in mesh.addrs.items()})
    env.update(RAGMESH_HTTP_HOST="127.0.0.1", RAGMESH_LOG_LEVEL="INFO", HF_HUB_OFFLINE="1", **settings)
    await asyncio.to_thread(workdir.mkdir, parents=True, exist_ok=True)
    replicas: list[Proc] = []
    try:
        for i in range(2):
            port = free_port()
            proc = Proc(["serve", "gateway"], {**env, "RAGMESH_HTTP_PORT": str(port)}, workdir / f"gateway{i}.log")
            replicas.append(proc.start())
        urls = [f"http://127.0.0.1:{p.env['RAGMESH_HTTP_PORT']}" for p in replicas]
        await asyncio.gather(*(wait_ready(url, proc) for url, proc in zip(urls, replicas, strict=True)))
        # The balancer `make up-ha` runs (deploy/local/haproxy.py), so the test sees what users get.
        servers = {f"gw{i}": int(proc.env["RAGMESH_HTTP_PORT"]) for i, proc in enumerate(replicas)}
        lb = HAProxy(workdir / "haproxy", free_port(), servers)
        await asyncio.to_thread(lb.start)
        try:
            await wait_balanced(lb)
            yield Balanced(replicas, urls, lb)
        finally:
            await asyncio.to_thread(lb.stop)
    finally:
        await asyncio.gather(*(asyncio.to_thread(proc.stop) for proc in replicas if proc.popen is not None))


async def wait_balanced(lb: HAProxy, timeout: float = 30) -> None:
    """Wait until /ready answers 200 through the balancer (it listens, and counts a replica up)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    async with httpx.AsyncClient(timeout=2) as http:
        while loop.time() < deadline:
            assert lb.popen is not None
            if lb.popen.poll() is not None:
                raise AssertionError(f"haproxy exited with {lb.popen.returncode}:\n{lb.log_path.read_text()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get(f"{lb.url}/ready")).status_code == 200:
                    return
            await asyncio.sleep(0.1)
    raise AssertionError(f"haproxy at {lb.url} not ready after {timeout}s:\n{lb.log_path.read_text()[-4000:]}")


async def mcp_requests(url: str) -> dict[str, float]:
    """The replica's request counts by route, for POSTs whose path was /mcp or that no route matched."""
    async with httpx.AsyncClient(timeout=10) as http:
        text = (await http.get(f"{url}/metrics")).text
    counts: dict[str, float] = {}
    for labels, value in MCP_POSTS.findall(text):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if fields["method"] == "POST":
            counts[fields["route"]] = counts.get(fields["route"], 0) + float(value)
    return counts


async def v2_session(
    url: str,
    collection: str,
    *,
    calls: int,
    key: str | None = None,
    pause: asyncio.Event | None = None,
    paused: asyncio.Event | None = None,
) -> dict[str, Any]:
    """What the 1.x script does, with the installed 2.x client: ingest (with progress), prompt, resource, then
    `calls` searches in one client, pausing (set `paused`, wait for `pause`) after half of them when given."""
    report: dict[str, Any] = {"calls_ok": 0, "errors": [], "progress": []}

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        report["progress"].append((done, total, message))

    async with mcp_http_client(url, key) as client:
        ingested = tool_ok(
            await client.call_tool(
                "ingest_text", {"text": TEXT, "collection": collection, "title": "Rhone"}, progress_callback=on_progress
            )
        )
        report["tools"] = {tool.name for tool in (await client.list_tools()).tools}
        prompt = await client.get_prompt("search_then_fetch", {"question": "glaciers?", "collection": collection})
        report["prompt"] = prompt.messages[0].content.text
        resource = await client.read_resource(f"ragmesh://{collection}/{ingested['doc_id']}")
        report["resource"] = resource.contents[0].text
        for i in range(calls):
            if pause is not None and paused is not None and i == calls // 2:
                paused.set()
                await pause.wait()
            try:
                result = await client.call_tool("search", {"query": "glacier tongue", "collection": collection})
            except Exception as exc:  # every failure is counted
                report["errors"].append(f"call {i}: {type(exc).__name__}: {exc}")
                continue
            if result.is_error or not result.structured_content["results"]:
                report["errors"].append(f"call {i}: {result.content}")
            else:
                report["calls_ok"] += 1
    return report


# --- fixtures -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory()


@pytest.fixture(scope="module")
async def balanced(mesh, tmp_path_factory):
    keys = f"{ADMIN_KEY}:admin,{READ_KEY}:read"
    async with balanced_gateways(mesh, tmp_path_factory.mktemp("balanced"), RAGMESH_API_KEYS=keys) as topology:
        yield topology


# --- tests --------------------------------------------------------------------------------------------------------
async def test_a_1x_sdk_client_makes_every_call_through_the_balancer(balanced):
    before = [await mcp_requests(url) for url in balanced.urls]
    report = await (await V1Client(balanced.lb.url, "v1-balanced", calls=10, key=ADMIN_KEY).start()).report()

    assert report["sdk"].startswith("1."), report["sdk"]
    assert report["calls_ok"] == 10, report["errors"]
    assert report["errors"] == []
    assert report["session_id"] is None  # stateless: no session any replica could lose
    assert report["progress"], "no progress notification reached the 1.x client"
    assert "search" in report["tools"] and "delete_collection" in report["tools"]
    assert "v1-balanced" in report["prompt"]
    assert "Aletsch" in report["resource"]
    # Both replicas served its requests, each labelled with the /mcp route.
    after = [await mcp_requests(url) for url in balanced.urls]
    served = [a.get("/mcp", 0) - b.get("/mcp", 0) for a, b in zip(after, before, strict=True)]
    assert all(n > 0 for n in served), served
    assert sum(served) >= 15  # initialize, initialized, ingest, list, prompt, resource, 10 searches
    assert all(a.get("unmatched", 0) == b.get("unmatched", 0) for a, b in zip(after, before, strict=True))


async def test_a_2x_sdk_client_makes_every_call_through_the_balancer(balanced):
    before = [await mcp_requests(url) for url in balanced.urls]
    report = await v2_session(balanced.lb.url, "v2-balanced", calls=10, key=ADMIN_KEY)

    assert report["calls_ok"] == 10, report["errors"]
    assert report["progress"], "no progress notification reached the 2.x client"
    assert {"search", "ingest_text", "delete_collection"} <= report["tools"]
    assert "v2-balanced" in report["prompt"]
    assert "Rhone" in report["resource"]
    after = [await mcp_requests(url) for url in balanced.urls]
    served = [a.get("/mcp", 0) - b.get("/mcp", 0) for a, b in zip(after, before, strict=True)]
    assert all(n > 0 for n in served), served


async def test_clients_of_both_generations_keep_working_when_a_replica_is_killed(mesh, tmp_path):
    async with balanced_gateways(mesh, tmp_path / "kill") as topology:
        v1 = await V1Client(topology.lb.url, "v1-kill", calls=10, pause_after=5).start()
        pause, paused = asyncio.Event(), asyncio.Event()
        v2 = asyncio.create_task(v2_session(topology.lb.url, "v2-kill", calls=10, pause=pause, paused=paused))
        await v1.paused()
        await asyncio.wait_for(paused.wait(), 300)

        victim = topology.replicas[0].popen
        assert victim is not None
        victim.send_signal(signal.SIGKILL)  # mid-session, between calls: nothing in flight on it
        await asyncio.to_thread(victim.wait, 10)
        await v1.resume()
        pause.set()
        v1_report, v2_report = await v1.report(), await v2
        survivor = await mcp_requests(topology.urls[1])

    # Same client objects, no re-initialising: every call after the kill reached the surviving replica.
    assert v1_report["errors"] == [] and v1_report["calls_ok"] == 10, v1_report["errors"]
    assert v2_report["errors"] == [] and v2_report["calls_ok"] == 10, v2_report["errors"]
    assert v1_report["session_id_at_end"] is None
    assert survivor["/mcp"] >= 10


async def test_a_read_key_sees_only_the_read_tools_through_the_balancer(balanced):
    report = await (await V1Client(balanced.lb.url, "v1-read", key=READ_KEY, tools_only=True).start()).report()
    async with mcp_http_client(balanced.lb.url, READ_KEY) as client:
        v2_tools = {tool.name for tool in (await client.list_tools()).tools}
        refused = await client.call_tool("ingest_text", {"text": TEXT, "collection": "v2-read"})

    assert "search" in report["tools"] and "ingest_text" not in report["tools"]
    assert report["ingest_error"] == "TOOL_NOT_FOUND"
    assert v2_tools == set(report["tools"])
    assert refused.is_error and refused.structured_content["error"]["reason"] == "TOOL_NOT_FOUND"
