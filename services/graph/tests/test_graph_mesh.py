"""The graph service in the test mesh: `mesh_factory(graph=True)` starts it next to the others, with its graphs
under the mesh's data directory, and tells the other services where it is."""

from __future__ import annotations

import os

from ragmesh.graph.v1 import graph_service_pb2 as pb

from tests.support.graph import cluster


async def test_a_mesh_with_the_graph_serves_it_and_tells_the_others_where_it_is(mesh_factory):
    mesh = await mesh_factory(graph=True)
    assert os.environ["RAGMESH_GRAPH_ENABLED"] == "true"
    assert os.environ["RAGMESH_GRAPH_ADDR"] == mesh.addrs["graph"]
    graph = mesh.stub("graph")
    reply = await graph.UpsertEntities(pb.UpsertEntitiesRequest(collection="k8s", entities=cluster()))
    assert reply.entities == 7
    got = await graph.GetEntity(pb.GetEntityRequest(collection="k8s", entity_id="Service/shop/web"))
    assert {r.target_id for r in got.entity.relations} == {"Ingress/shop/web", "Deployment/shop/web"}
    assert (mesh.data_dir / "graph" / "k8s" / "data").exists()
    assert mesh.settings["graph"].data_dir == mesh.data_dir
