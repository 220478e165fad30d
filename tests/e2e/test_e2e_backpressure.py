"""Back-pressure as a user meets it: with the embedder's queue too small for the load, `ragmesh up` answers
REST ingests with 429 and Retry-After, and `ragmesh ingest` waits as told and gets every document in."""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time

import httpx

from .mesh_process import RAGMESH, Mesh, Proc, wait_ready

# A queue of 2 texts, each micro-batch taking 300 ms (the hash backend's stand-in for a model's time):
# concurrent documents overflow it.
BUSY = {
    "RAGMESH_EMBEDDER_BACKEND": "hash",
    "RAGMESH_EMBEDDER_MAX_QUEUE_TEXTS": "2",
    "RAGMESH_EMBEDDER_MAX_TEXTS_PER_REQUEST": "2",
    "RAGMESH_EMBEDDER_HASH_DELAY_MS": "300",
    "RAGMESH_INDEXER_MAX_CONCURRENT_DOCUMENTS": "16",
}


async def _burst(url: str, n: int) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        return await asyncio.gather(
            *(
                client.post(
                    "/api/v1/ingest",
                    json={"text": f"Kelp forest number {i}.", "collection": "burst", "doc_id": f"k{i}"},
                )
                for i in range(n)
            )
        )


async def _flood(url: str, until, clients: int = 4, limit: float = 120.0) -> None:
    """`clients` loops of REST ingests, each sending its next as soon as the last is answered, until `until()`."""
    deadline = time.monotonic() + limit

    async def client_loop(client: httpx.AsyncClient, worker: int) -> None:
        sent = 0
        while not until() and time.monotonic() < deadline:
            response = await client.post(
                "/api/v1/ingest",
                json={"text": f"Flood {worker} {sent}.", "collection": "flood", "doc_id": f"f{worker}-{sent}"},
            )
            sent += 1
            if response.status_code == 429:
                await asyncio.sleep(0.05)  # refused at once: do not spin

    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await asyncio.gather(*(client_loop(client, worker) for worker in range(clients)))


def test_overload_is_429_on_rest_and_the_cli_retries_until_everything_is_in(tmp_path):
    mesh = Mesh(tmp_path / "data", extra_env=BUSY)
    proc = Proc(["up"], mesh.env(), tmp_path / "up.log").start()
    try:
        wait_ready(mesh.url, [proc], timeout=120)
        responses = asyncio.run(_burst(mesh.url, 12))
        statuses = {r.status_code for r in responses}
        assert statuses <= {200, 429} and 429 in statuses, [r.text for r in responses]
        assert all(r.headers["retry-after"] == "1" for r in responses if r.status_code == 429)

        folder = tmp_path / "docs"
        folder.mkdir()
        for i in range(12):
            (folder / f"note-{i}.md").write_text(f"# Note {i}\n\nSea otters hold hands while sleeping, note {i}.")
        cli = subprocess.Popen(
            [RAGMESH, "ingest", str(folder), "--collection", "cli-busy"],
            env=mesh.env() | {"COLUMNS": "200"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        # Other clients keep the queue full until the CLI has been refused and says it is retrying.
        stderr: list[str] = []
        reader = threading.Thread(target=lambda: stderr.extend(cli.stderr), daemon=True)
        reader.start()
        asyncio.run(_flood(mesh.url, until=lambda: cli.poll() is not None or any("retrying" in s for s in stderr)))
        code = cli.wait(timeout=300)
        reader.join(10)
        assert code == 0, cli.stdout.read() + "".join(stderr) + proc.log()[-3000:]
        output = "".join(stderr)
        assert "retrying" in output and "12 indexed, 0 unchanged, 0 failed" in output, output
        listed = {c["name"]: c for c in httpx.get(f"{mesh.url}/api/v1/collections").json()["collections"]}
        assert listed["cli-busy"]["documents"] == 12
    finally:
        assert proc.stop() == 0, proc.log()[-3000:]
