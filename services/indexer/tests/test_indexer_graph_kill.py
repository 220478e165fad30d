"""The graph service killed (SIGKILL) in the middle of a many-batch IngestEntities: the call fails saying so, and
once the graph service is back every entity is in both stores or in neither. The graph runs as its own process
(`ragmesh serve graph`), the rest of the mesh in this one."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import grpc
import pytest
from ragmesh.graph.v1 import graph_service_pb2 as graph_pb
from ragmesh.graph.v1 import graph_service_pb2_grpc as graph_grpc
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_indexer.server import job_folder

from tests.e2e.mesh_process import Proc, free_port, wait_serving

pytestmark = pytest.mark.asyncio(loop_scope="session")
ENTITIES = 1500
BATCH = 10


def graph_process(data_dir, port: int, log_path) -> Proc:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMESH_", "QDRANT_", "OTEL_"))}
    env.update(
        RAGMESH_DATA_DIR=str(data_dir),
        RAGMESH_GRAPH_HOST="127.0.0.1",
        RAGMESH_GRAPH_PORT=str(port),
        RAGMESH_GRAPH_METRICS_PORT="0",
        RAGMESH_LOG_LEVEL="INFO",
    )
    return Proc(["serve", "graph"], env, log_path)


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


def store_ids(mesh) -> set[str]:
    return {row["doc_id"] for row in mesh.store.list_documents("items", {}, ["doc_id"])}


async def test_a_graph_killed_mid_ingest_leaves_no_entity_in_one_store_only(mesh_factory, tmp_path):
    port = free_port()
    addr = f"127.0.0.1:{port}"
    graph_dir = tmp_path / "graph-data"
    proc = graph_process(graph_dir, port, tmp_path / "graph-1.log").start()
    try:
        await asyncio.to_thread(wait_serving, addr, [proc])
        mesh = await mesh_factory(indexer={"graph_enabled": True, "graph_addr": addr, "graph_batch_entities": BATCH})
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
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(10)

        with pytest.raises(grpc.aio.AioRpcError) as failed:
            await ingest
        assert failed.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "graph" in failed.value.details()

        proc = graph_process(graph_dir, port, tmp_path / "graph-2.log").start()
        await asyncio.to_thread(wait_serving, addr, [proc])
        # the indexer finishes the undo it could not do while the graph was away (its journal empties)
        journal = job_folder(mesh.settings["indexer"], mesh.data_dir) / "graph-pending.json"
        deadline = time.monotonic() + 120
        while json.loads(journal.read_text()) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        assert json.loads(journal.read_text()) == {}

        in_graph, in_store = await graph_ids(addr), store_ids(mesh)
        assert in_graph == in_store  # each entity in both stores or in neither
        assert 3 * BATCH <= len(in_graph) < ENTITIES  # the batches before the kill stayed, the rest never came
    finally:
        proc.stop()
