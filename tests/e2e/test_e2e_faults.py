"""Faults, one service at a time: each service in its own process (`ragmesh serve <svc>`, as on Kubernetes), and
while clients ingest and search, one of them dies -- the embedder (SIGKILL), the converter (SIGTERM), and the
process that owns the embedded store, which runs the indexer and search (SIGKILL, then SIGTERM; with a Qdrant
server they are separate pods, and each failure below is what its callers see).

What must hold, every time:
- a caller gets either a clean answer or 503 UNAVAILABLE naming the service that is down -- never a 500;
- nothing acknowledged is lost, and no document is half-written (every stored document has all its chunks and
  exactly its text);
- a client's retry never duplicates (re-ingesting is `unchanged`, the document count stays);
- everything recovers once the service is back, without restarting the others.
The hash embedder keeps it fast."""

from __future__ import annotations

import asyncio
import signal
import time
from dataclasses import dataclass, field

import httpx
import pytest

from .mesh_process import Mesh, Proc, wait_ready, wait_serving

GROUPS = {
    "converter": ["converter"],
    "embedder": ["embedder"],
    "store": ["indexer", "search"],
    "answer": ["answer"],
    "gateway": ["gateway"],
}
# ~3 chunks per document at 200 tokens, so that a half-written document would show.
PARAGRAPH = (
    "The {i}th survey of the {name} glacier measured its tongue, its crevasses and the moraines of granite "
    "and gneiss that the ice pushed down the valley over the winter before the meltwater rose. "
)
NAMES = ["Aletsch", "Rhone", "Gorner", "Morteratsch", "Hintereis", "Pasterze"]


def document(doc_id: str) -> str:
    seed = sum(map(ord, doc_id))
    return "".join(PARAGRAPH.format(i=i, name=NAMES[(seed + i) % len(NAMES)]) for i in range(14)) + doc_id


@dataclass
class Traffic:
    """What the clients saw while a service was killed."""

    acknowledged: dict[str, int] = field(default_factory=dict)  # doc_id -> chunks
    attempted: set[str] = field(default_factory=set)
    statuses: dict[int, int] = field(default_factory=dict)
    refusals: list[dict] = field(default_factory=list)  # the 5xx error bodies
    file: bool = False  # documents went in as file uploads (through the converter)


class Cluster:
    def __init__(self, tmp_path) -> None:
        self.mesh = Mesh(
            tmp_path / "data", extra_env={"RAGMESH_EMBEDDER_BACKEND": "hash", "RAGMESH_SHUTDOWN_GRACE_SECONDS": "2"}
        )
        self.env = self.mesh.env()
        self.tmp_path = tmp_path
        self.procs = {name: self._proc(name) for name in GROUPS}

    def _proc(self, name: str) -> Proc:
        return Proc(["serve", *GROUPS[name]], self.env, self.tmp_path / f"{name}-{time.monotonic_ns()}.log")

    def start(self, name: str) -> None:
        if self.procs[name].popen is not None:
            self.procs[name] = self._proc(name)
        self.procs[name].start()

    def kill(self, name: str, sig: signal.Signals) -> None:
        popen = self.procs[name].popen
        popen.send_signal(sig)
        popen.wait(30)

    def serving(self, name: str) -> None:
        for service in GROUPS[name]:
            wait_serving(f"127.0.0.1:{self.mesh.ports[service]}", [self.procs[name]], timeout=120)

    def stop_all(self) -> list[tuple[str, int, str]]:
        return [(name, proc.stop(), proc.log()[-2000:]) for name, proc in self.procs.items() if proc.popen is not None]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    cluster = Cluster(tmp_path_factory.mktemp("faults"))
    for name in GROUPS:
        cluster.start(name)
    try:
        wait_ready(cluster.mesh.url, list(cluster.procs.values()), timeout=180)
        yield cluster
    finally:
        results = cluster.stop_all()
    assert all(code == 0 for _, code, _ in results), results


def _send(http: httpx.AsyncClient, doc_id: str, *, file: bool):
    if file:
        # HTML, which the converter turns into Markdown (plain text and Markdown are kept verbatim without it).
        html = f"<html><body><p>{document(doc_id)}</p></body></html>"
        return http.post(
            "/api/v1/ingest/file",
            data={"collection": "faults", "doc_id": doc_id},
            files={"file": (f"{doc_id}.html", html.encode(), "text/html")},
        )
    return http.post("/api/v1/ingest", json={"text": document(doc_id), "collection": "faults", "doc_id": doc_id})


async def _ingest(http: httpx.AsyncClient, traffic: Traffic, doc_id: str, *, file: bool) -> None:
    traffic.attempted.add(doc_id)
    traffic.file = file
    response = await _send(http, doc_id, file=file)
    _record(traffic, response)
    if response.status_code == 200:
        traffic.acknowledged[doc_id] = response.json()["chunks"]


async def _search(http: httpx.AsyncClient, traffic: Traffic) -> bool:
    response = await http.post("/api/v1/search", json={"query": "glacier moraines", "collection": "faults"})
    _record(traffic, response)
    return response.status_code == 200


def _record(traffic: Traffic, response: httpx.Response) -> None:
    traffic.statuses[response.status_code] = traffic.statuses.get(response.status_code, 0) + 1
    if response.status_code >= 500:
        traffic.refusals.append(response.json()["error"])


async def _under_fault(cluster: Cluster, name: str, sig: signal.Signals, prefix: str, *, file: bool) -> Traffic:
    """Clients ingest and search; after a few acknowledged ingests `name` is killed with `sig`; clients keep
    going for a while against the dead service; then it is started again and the clients go on until they
    have seen it work again."""
    traffic = Traffic()
    killed = asyncio.Event()
    restarted = asyncio.Event()
    counter = iter(range(10_000))

    async def client(http: httpx.AsyncClient, worker: int) -> None:
        ok_after_restart = 0
        while ok_after_restart < 2:
            before = len(traffic.acknowledged)
            await _ingest(http, traffic, f"{prefix}-{worker}-{next(counter)}", file=file)
            searched = await _search(http, traffic)
            if restarted.is_set() and len(traffic.acknowledged) > before and searched:
                ok_after_restart += 1  # both ingest and search work again

    async def fault() -> None:
        while len(traffic.acknowledged) < 4:
            await asyncio.sleep(0.05)
        await asyncio.to_thread(cluster.kill, name, sig)
        killed.set()
        # Clients meet the dead service for a while: well past the ~1 s one layer of retries takes to give up
        # (a hop that already retried its callee tells its own callers not to retry again).
        await asyncio.sleep(6)
        cluster.start(name)
        await asyncio.to_thread(cluster.serving, name)
        restarted.set()

    async with httpx.AsyncClient(base_url=cluster.mesh.url, timeout=60) as http:
        await asyncio.wait_for(asyncio.gather(fault(), *(client(http, w) for w in range(3))), timeout=180)
    assert killed.is_set()
    return traffic


def _assert_refusals_name(traffic: Traffic, services: set[str]) -> None:
    assert set(traffic.statuses) <= {200, 503}, traffic.statuses  # never a 500, a 504 or a 4xx
    for error in traffic.refusals:
        assert error["code"] in ("UNAVAILABLE", "CANCELLED"), error
        assert error["details"].get("service") in services, error


async def _assert_nothing_lost_or_half_written(cluster: Cluster, traffic: Traffic) -> None:
    async with httpx.AsyncClient(base_url=cluster.mesh.url, timeout=60) as http:
        for doc_id in sorted(traffic.attempted):
            response = await http.get(f"/api/v1/documents/{doc_id}", params={"collection": "faults"})
            if doc_id in traffic.acknowledged:
                assert response.status_code == 200, (doc_id, response.text)  # acknowledged: never lost
            if response.status_code == 404:
                continue  # never acknowledged, never written: fine
            assert response.status_code == 200, response.text
            stored = response.json()
            assert stored["text"].replace("\n", " ").split() == document(doc_id).split(), doc_id  # whole, unaltered
            chunks = [c["chunk_index"] for c in stored["chunks"]]
            assert chunks == list(range(len(chunks))), (doc_id, chunks)
            if doc_id in traffic.acknowledged:
                assert len(chunks) == traffic.acknowledged[doc_id]
        # A client that retries everything it sent: nothing is duplicated.
        before = {c["name"]: c for c in (await http.get("/api/v1/collections")).json()["collections"]}["faults"]
        for doc_id in sorted(traffic.acknowledged)[:6]:
            again = await _send(http, doc_id, file=traffic.file)
            assert again.status_code == 200 and again.json()["status"] == "unchanged", again.text
            assert again.json()["chunks"] == traffic.acknowledged[doc_id]
        after = {c["name"]: c for c in (await http.get("/api/v1/collections")).json()["collections"]}["faults"]
        assert after == before


@pytest.mark.parametrize(
    ("name", "sig", "services", "file"),
    [
        ("embedder", signal.SIGKILL, {"embedder"}, False),
        ("converter", signal.SIGTERM, {"converter"}, True),
        ("store", signal.SIGKILL, {"indexer", "search"}, False),
        ("store", signal.SIGTERM, {"indexer", "search"}, False),
    ],
    ids=["embedder-SIGKILL", "converter-SIGTERM", "indexer+search-SIGKILL", "indexer+search-SIGTERM"],
)
async def test_a_service_dies_mid_request_and_comes_back(cluster, name, sig, services, file):
    others = {n: p.popen.pid for n, p in cluster.procs.items() if n != name}
    traffic = await _under_fault(cluster, name, sig, f"{name}-{sig.name}", file=file)
    assert traffic.statuses.get(503), f"nobody met the dead {name}: {traffic.statuses}"
    _assert_refusals_name(traffic, services)
    await _assert_nothing_lost_or_half_written(cluster, traffic)
    # The others were never restarted.
    assert {n: p.popen.pid for n, p in cluster.procs.items() if n != name} == others
    assert all(p.popen.poll() is None for p in cluster.procs.values())
