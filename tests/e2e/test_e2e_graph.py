"""`ragmesh serve graph` as on Kubernetes: the graph service alone in a process, serving whatever
RAGMESH_GRAPH_ENABLED says, keeping its graphs in the data directory across a restart."""

from __future__ import annotations

import grpc
from ragmesh.graph.v1 import graph_service_pb2 as pb
from ragmesh.graph.v1 import graph_service_pb2_grpc as pb_grpc

from tests.support.graph import cluster

from .mesh_process import Mesh, Proc, wait_ready, wait_serving


def test_serve_graph_runs_the_graph_service_and_its_graphs_outlive_the_process(tmp_path):
    mesh = Mesh(tmp_path / "data")
    env = {**mesh.env(), "RAGMESH_GRAPH_ENABLED": "false"}
    target = f"127.0.0.1:{mesh.ports['graph']}"
    for run in range(2):
        proc = Proc(["serve", "graph"], env, tmp_path / f"graph-{run}.log").start()
        try:
            wait_serving(target, [proc], timeout=60)
            with grpc.insecure_channel(target) as channel:
                graph = pb_grpc.GraphServiceStub(channel)
                if run == 0:
                    reply = graph.UpsertEntities(pb.UpsertEntitiesRequest(collection="k8s", entities=cluster()))
                    assert reply.entities == 7
                listed = graph.ListEntityTypes(pb.ListEntityTypesRequest(), timeout=10)
                assert [(g.collection, g.entities) for g in listed.graphs] == [("k8s", 7)]
        finally:
            code = proc.stop()
        assert code == 0, proc.log()[-2000:]
    assert (tmp_path / "data" / "graph" / "k8s" / "data").exists()


def test_up_with_the_graph_enabled_serves_it_next_to_the_others(tmp_path):
    mesh = Mesh(tmp_path / "data", extra_env={"RAGMESH_EMBEDDER_BACKEND": "hash", "RAGMESH_GRAPH_ENABLED": "true"})
    proc = Proc(["up"], mesh.env(), tmp_path / "up.log").start()
    try:
        wait_ready(mesh.url, [proc], timeout=120)
        assert "graph listening on" in proc.log(), proc.log()[-2000:]
        target = f"127.0.0.1:{mesh.ports['graph']}"
        with grpc.insecure_channel(target) as channel:
            graph = pb_grpc.GraphServiceStub(channel)
            reply = graph.UpsertEntities(pb.UpsertEntitiesRequest(collection="k8s", entities=cluster()), timeout=30)
            assert reply.entities == 7
    finally:
        code = proc.stop()
    assert code == 0, proc.log()[-2000:]
    assert (tmp_path / "data" / "graph" / "k8s" / "data").exists()
