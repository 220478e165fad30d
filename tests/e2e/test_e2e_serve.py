"""`ragmesh serve` as on Kubernetes: services in separate processes, talking gRPC over loopback."""

from __future__ import annotations

import re
import time

import httpx

from .mesh_process import Mesh, Proc, wait_ready, wait_serving


def test_services_in_separate_processes_serve_the_api(tmp_path):
    # The hash embedder keeps this test fast; the real model runs in test_e2e_up.
    mesh = Mesh(tmp_path / "data", extra_env={"RAGMESH_EMBEDDER_BACKEND": "hash"})
    env = mesh.env()
    groups = [["converter"], ["embedder"], ["indexer", "search"], ["answer"], ["gateway"]]
    # Each on uvloop (the default where it is installed), but the gateway on asyncio's own loop.
    loops = ["uvloop", "uvloop", "uvloop", "uvloop", "asyncio"]
    procs = [
        Proc(
            ["serve", *g],
            {**env, "RAGMESH_EVENT_LOOP": loop} if loop == "asyncio" else env,
            tmp_path / f"{'-'.join(g)}.log",
        ).start()
        for g, loop in zip(groups, loops, strict=True)
    ]
    try:
        wait_ready(mesh.url, procs, timeout=120)
        for proc, loop in zip(procs, loops, strict=True):
            # Once serving, each process takes its start-up objects out of the collector's scans.
            assert _objects_frozen_at_ready(proc) > 10_000, proc.log()[-1500:]
            assert f"on {loop}'s event loop" in proc.log(), proc.log()[-1500:]
        with httpx.Client(base_url=mesh.url, timeout=60) as http:
            ingested = http.post(
                "/api/v1/ingest", json={"text": "Separate processes still share one contract.", "doc_id": "sep"}
            )
            assert ingested.status_code == 200, ingested.text
            results = http.post("/api/v1/search", json={"query": "separate processes"}).json()["results"]
            assert results[0]["doc_id"] == "sep"
            # The answer service in a process of its own: gateway -> answer -> search and embedder.
            asked = http.post("/api/v1/ask", json={"query": "do separate processes share one contract?"})
            assert asked.status_code == 200, asked.text
            assert asked.json()["generator"] == "extractive" and asked.json()["sources"][0]["doc_id"] == "sep"

            # Stop the answer service: /ask is 503 naming it, search keeps working.
            assert procs[3].stop() == 0
            down = http.post("/api/v1/ask", json={"query": "separate processes"})
            assert down.status_code == 503 and down.json()["error"]["details"]["service"] == "answer", down.text
            assert http.post("/api/v1/search", json={"query": "separate processes"}).status_code == 200

            # Stop the embedder: search fails with 503 naming it, and the gateway reports not ready.
            assert procs[1].stop() == 0
            down = http.post("/api/v1/search", json={"query": "separate processes", "mode": "dense"})
            assert down.status_code == 503, down.text
            assert down.json()["error"]["details"]["service"] == "embedder"
            assert http.get("/ready").status_code == 503
    finally:
        codes = [p.stop() for p in procs]
    assert all(code == 0 for code in codes), [(p.args, c, p.log()[-1500:]) for p, c in zip(procs, codes, strict=True)]


def test_embedded_store_refuses_a_second_owner_process(tmp_path):
    mesh = Mesh(tmp_path / "data", extra_env={"RAGMESH_EMBEDDER_BACKEND": "hash"})
    env = mesh.env()
    embedder = Proc(["serve", "embedder"], env, tmp_path / "embedder.log").start()
    indexer = Proc(["serve", "indexer"], env, tmp_path / "indexer.log").start()
    try:
        wait_serving(f"127.0.0.1:{mesh.ports['indexer']}", [embedder, indexer])  # the indexer owns the store
        search = Proc(["serve", "search"], env, tmp_path / "search.log").start()
        code = search.popen.wait(120)
        assert code != 0
        log = search.log()
        assert "another process" in log and "QDRANT_URL" in log, log[-2000:]
        assert indexer.popen.poll() is None, indexer.log()[-2000:]  # the first owner keeps running
    finally:
        indexer.stop()
        embedder.stop()


def _objects_frozen_at_ready(proc: Proc, timeout: float = 30) -> int:
    """The count of start-up objects the process's ready line reports (0 if it never says it is ready)."""
    deadline = time.monotonic() + timeout
    while True:
        ready = re.search(r"ragmesh ready: [^\n]*\((\d+) start-up objects kept out of garbage collection\)", proc.log())
        if ready or time.monotonic() > deadline:
            return int(ready[1]) if ready else 0
        time.sleep(0.2)
