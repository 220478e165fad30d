"""MCP overhead vs REST on the same gateway (in-process mesh, hash embedder, embedded store).
Run: .venv/bin/python -m bench.bench_mcp"""

import asyncio
import logging
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import httpx  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from ragmesh_gateway.app import run_gateway  # noqa: E402
from ragmesh_gateway.config import GatewaySettings  # noqa: E402

from conftest import start_mesh  # noqa: E402

N = 200
logging.getLogger("httpx").setLevel(logging.WARNING)


def p(values, q):
    return sorted(values)[int(q * (len(values) - 1))] * 1000


async def timed(call, n=N):
    out = []
    for _ in range(n):
        t = time.perf_counter()
        await call()
        out.append(time.perf_counter() - t)
    return out


async def main():
    mesh = await start_mesh(Path(tempfile.mkdtemp()))
    addrs = {f"{n}_addr": a for n, a in mesh.addrs.items()}
    try:
        async with run_gateway(GatewaySettings(http_port=0, **addrs)) as url:
            async with httpx.AsyncClient(base_url=url) as rest:
                for i in range(20):
                    await rest.post(
                        "/api/v1/ingest",
                        json={
                            "text": f"document {i} about glaciers and ice {i}",
                            "collection": "bench",
                            "doc_id": f"d{i}",
                        },
                    )
                body = {"query": "glaciers", "collection": "bench", "top_k": 5}
                rest_t = await timed(lambda: rest.post("/api/v1/search", json=body))
            args = {"query": "glaciers", "collection": "bench", "top_k": 5}
            async with Client(url + "/mcp") as c:
                http_t = await timed(lambda: c.call_tool("search", args))
            t0 = time.perf_counter()
            env = {f"RAGMESH_{n.upper()}_ADDR": a for n, a in mesh.addrs.items()}
            params = StdioServerParameters(
                command=str(Path(sys.executable).with_name("ragmesh")), args=["mcp"], env=env
            )
            async with Client(params) as c:
                first = time.perf_counter() - t0
                stdio_t = await timed(lambda: c.call_tool("search", args))
        for name, t in (
            ("REST POST /api/v1/search", rest_t),
            ("MCP search over /mcp (HTTP)", http_t),
            ("MCP search over stdio", stdio_t),
        ):
            print(f"{name:32s} p50 {p(t, 0.5):6.2f} ms  p95 {p(t, 0.95):6.2f} ms  (n={len(t)})")
        print(f"ragmesh mcp spawn + initialize: {first * 1000:.0f} ms")
    finally:
        await mesh.stop()


asyncio.run(main())
