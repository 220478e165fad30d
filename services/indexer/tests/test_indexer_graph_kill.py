"""The graph service killed (SIGKILL) in the middle of a many-batch IngestEntities: the call fails saying so, and
once the graph service is back every entity is in both stores or in neither; killed before a DeleteEntities, the
delete is finished in both stores once it is back. The graph runs as its own process (`ragmesh serve graph`),
the rest of the mesh in this one."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import grpc
import pytest
import pytest_asyncio
from ragmesh.graph.v1 import graph_service_pb2 as graph_pb
from ragmesh.graph.v1 import graph_service_pb2_grpc as graph_grpc
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_common.telemetry import setup_telemetry
from ragmesh_indexer.server import job_folder

from tests.e2e.mesh_process import Proc, free_port, wait_serving

pytestmark = pytest.mark.asyncio(loop_scope="session")
ENTITIES = 1500
BATCH = 10


class GraphProcess:
    """`ragmesh serve graph` on one port and data directory: killed with SIGKILL, started again on both."""

    def __init__(self, tmp_path) -> None:
        self.tmp_path = tmp_path
        self.port = free_port()
        self.addr = f"127.0.0.1:{self.port}"
        self.starts = 0
        self.proc: Proc | None = None

    async def start(self) -> None:
        self.starts += 1
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMESH_", "QDRANT_", "OTEL_"))}
        env.update(
            RAGMESH_DATA_DIR=str(self.tmp_path / "graph-data"),
            RAGMESH_GRAPH_HOST="127.0.0.1",
            RAGMESH_GRAPH_PORT=str(self.port),
            RAGMESH_GRAPH_METRICS_PORT="0",
            RAGMESH_LOG_LEVEL="INFO",
        )
        self.proc = Proc(["serve", "graph"], env, self.tmp_path / f"graph-{self.starts}.log").start()
        await asyncio.to_thread(wait_serving, self.addr, [self.proc])

    def kill(self) -> None:
        assert self.proc is not None and self.proc.popen is not None
        self.proc.popen.send_signal(signal.SIGKILL)
        self.proc.popen.wait(10)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()


@pytest_asyncio.fixture(loop_scope="session")
async def graph(tmp_path):
    process = GraphProcess(tmp_path)
    await process.start()
    yield process
    process.stop()


def entities_file() -> pb.FileInput:
    """Items, each related to the one before (so batches point back at earlier ones)."""
    lines = [
        json.dumps(
            {
                "type": "Item",
                "primary_key": ["n"],
                "properties": {"n": i, "text": f"item number {i}"},
                "relations": [{"type": "FOLLOWS", "target_id": f"Item/{i - 1}"}] if i else [],
            }
        )
        for i in range(ENTITIES)
    ]
    return pb.FileInput(data="\n".join(lines).encode(), filename="items.jsonl")


async def graph_ids(addr: str) -> set[str]:
    async with grpc.aio.insecure_channel(addr) as channel:
        graph = graph_grpc.GraphServiceStub(channel)
        try:
            reply = await graph.Query(
                graph_pb.QueryRequest(collection="items", query="MATCH (n:Item) RETURN n.id", row_limit=10_000)
            )
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                return set()
            raise
    return {row.values[0].string_value for row in reply.rows}


def pending() -> float:
    """The indexer's ragmesh_indexer_graph_pending_entities."""
    value = setup_telemetry("indexer").registry.get_sample_value("ragmesh_indexer_graph_pending_entities")
    return value or 0.0


def store_ids(mesh) -> set[str]:
    return {row["doc_id"] for row in mesh.store.list_documents("items", {}, ["doc_id"])}


async def drained() -> None:
    """Wait until the indexer has no undo left to do (the graph answers again)."""
    deadline = time.monotonic() + 120
    while pending() and time.monotonic() < deadline:
        await asyncio.sleep(0.2)
    assert pending() == 0


async def test_a_graph_killed_mid_ingest_leaves_no_entity_in_one_store_only(mesh_factory, graph):
    mesh = await mesh_factory(indexer={"graph_enabled": True, "graph_addr": graph.addr, "graph_batch_entities": BATCH})
    indexer = mesh.stub("indexer")
    ingest = asyncio.ensure_future(
        indexer.IngestEntities(pb.IngestEntitiesRequest(collection="items", files=[entities_file()]))
    )
    # kill the graph once the first batches are in both stores
    while not ingest.done():
        try:
            if len(store_ids(mesh)) >= 3 * BATCH:
                break
        except Exception:  # noqa: BLE001 - the collection is not there yet
            pass
        await asyncio.sleep(0.005)
    assert not ingest.done(), "the ingest finished before the graph could be killed"
    graph.kill()

    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await ingest
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "graph" in failed.value.details()

    # the batch the graph may or may not have taken waits to be deleted from both stores
    journal = job_folder(mesh.settings["indexer"], mesh.data_dir) / "graph-pending.json"
    assert pending() == sum(map(len, json.loads(journal.read_text()).values())) > 0
    assert not set(json.loads(journal.read_text())["items"]) & store_ids(mesh)

    # the indexer finishes that undo once the graph is back (its journal and the gauge go to zero)
    await graph.start()
    await drained()
    assert json.loads(journal.read_text()) == {}
    in_graph, in_store = await graph_ids(graph.addr), store_ids(mesh)
    assert in_graph == in_store  # each entity in both stores or in neither
    assert 3 * BATCH <= len(in_graph) < ENTITIES  # the batches before the kill stayed, the rest never came


async def test_a_delete_the_graph_dies_under_finishes_in_both_stores_once_it_is_back(mesh_factory, graph):
    mesh = await mesh_factory(indexer={"graph_enabled": True, "graph_addr": graph.addr})
    indexer = mesh.stub("indexer")
    file = pb.FileInput(data=b"\n".join(entities_file().data.splitlines()[:20]), filename="items.jsonl")
    await indexer.IngestEntities(pb.IngestEntitiesRequest(collection="items", files=[file]))
    graph.kill()

    with pytest.raises(grpc.aio.AioRpcError) as failed:
        await indexer.DeleteEntities(pb.DeleteEntitiesRequest(collection="items", ids=["Item/3", "Item/4"]))
    assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
    assert pending() == 2  # the delete is not forgotten

    await graph.start()
    await drained()
    in_graph, in_store = await graph_ids(graph.addr), store_ids(mesh)
    assert in_graph == in_store == {f"Item/{i}" for i in range(20)} - {"Item/3", "Item/4"}
