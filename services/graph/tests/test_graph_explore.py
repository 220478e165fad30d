"""Walking a graph: an entity's neighbourhood 1..3 hops out, a type's neighbourhood in the ontology, the shortest
type paths between two types, the list of graphs, and every way such a request is refused."""

from __future__ import annotations

import grpc
import pytest
from ragmesh.graph.v1 import graph_service_pb2 as pb

from tests.support.graph import cluster, entity


@pytest.fixture
async def k8s(graph):
    await graph.upsert(cluster())
    return graph


def _neighbours(reply: pb.ExploreEntityResponse) -> list[tuple[str, str, int, int, str]]:
    return [(n.id, n.relation, n.direction, n.depth, n.via_id) for n in reply.neighbours]


async def test_exploring_an_entity_gives_its_neighbours_nearest_first_with_the_hop_that_reached_them(k8s):
    one = await k8s.ExploreEntity(pb.ExploreEntityRequest(collection="k8s", entity_id="Service/shop/web"))
    assert one.entity.id == "Service/shop/web" and one.entity.properties[0].name == "spec.type"
    assert _neighbours(one) == [
        ("Ingress/shop/web", "REFERENCES", pb.DIRECTION_INCOMING, 1, "Service/shop/web"),
        ("Deployment/shop/web", "SELECTS", pb.DIRECTION_OUTGOING, 1, "Service/shop/web"),
    ]
    assert not one.truncated

    three = await k8s.ExploreEntity(pb.ExploreEntityRequest(collection="k8s", entity_id="Service/shop/web", depth=3))
    assert _neighbours(three) == [
        *_neighbours(one),
        ("Container/shop/web/app", "HAS", pb.DIRECTION_OUTGOING, 2, "Deployment/shop/web"),
        ("ConfigMap/shop/settings", "USES", pb.DIRECTION_OUTGOING, 2, "Deployment/shop/web"),
        ("ServiceAccount/shop/runner", "USES", pb.DIRECTION_OUTGOING, 2, "Deployment/shop/web"),
        ("RoleBinding/shop/runner-read", "APPLIES_TO", pb.DIRECTION_INCOMING, 3, "ServiceAccount/shop/runner"),
    ]
    assert {n.type for n in three.neighbours} == {
        "Ingress",
        "Deployment",
        "Container",
        "ConfigMap",
        "ServiceAccount",
        "RoleBinding",
    }
    two = await k8s.ExploreEntity(pb.ExploreEntityRequest(collection="k8s", entity_id="Service/shop/web", depth=2))
    assert _neighbours(two) == _neighbours(three)[:5]


async def test_a_limit_keeps_the_nearest_neighbours_and_says_there_were_more(k8s):
    reply = await k8s.ExploreEntity(
        pb.ExploreEntityRequest(collection="k8s", entity_id="Service/shop/web", depth=3, limit=3)
    )
    assert [n.id for n in reply.neighbours] == ["Ingress/shop/web", "Deployment/shop/web", "Container/shop/web/app"]
    assert reply.truncated
    exact = await k8s.ExploreEntity(
        pb.ExploreEntityRequest(collection="k8s", entity_id="Service/shop/web", depth=3, limit=6)
    )
    assert len(exact.neighbours) == 6 and not exact.truncated


async def test_an_entity_without_relations_has_no_neighbours(k8s):
    await k8s.upsert([entity("Namespace/lonely", key=("name",))])
    reply = await k8s.ExploreEntity(pb.ExploreEntityRequest(collection="k8s", entity_id="Namespace/lonely", depth=3))
    assert reply.entity.id == "Namespace/lonely" and list(reply.neighbours) == [] and not reply.truncated


@pytest.mark.parametrize(
    ("request_", "reason", "field"),
    [
        (pb.ExploreEntityRequest(entity_id="Service/shop/web", depth=4), "DEPTH_OUT_OF_RANGE", "depth"),
        (pb.ExploreEntityRequest(entity_id="Service/shop/web", depth=-1), "DEPTH_OUT_OF_RANGE", "depth"),
        (pb.ExploreEntityRequest(entity_id="Service/shop/web", limit=1001), "LIMIT_OUT_OF_RANGE", "limit"),
        (pb.ExploreEntityRequest(entity_id="Service/shop/web", limit=-5), "LIMIT_OUT_OF_RANGE", "limit"),
        (pb.ExploreEntityRequest(entity_id="no-slash"), "ENTITY_INVALID", "entity_id"),
        (pb.ExploreEntityRequest(entity_id=""), "ENTITY_INVALID", "entity_id"),
    ],
)
async def test_an_explore_out_of_range_or_malformed_is_refused(k8s, rpc_error, request_, reason, field):
    request_.collection = "k8s"
    error = await rpc_error(k8s.ExploreEntity(request_))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, reason)
    assert [v.field for v in error.field_violations] == [field]


async def test_an_unknown_entity_is_not_found_whether_or_not_its_type_is_known(k8s, rpc_error):
    for entity_id in ("Service/shop/nope", "Gateway/shop/web"):
        for call in (
            k8s.ExploreEntity(pb.ExploreEntityRequest(collection="k8s", entity_id=entity_id)),
            k8s.GetEntity(pb.GetEntityRequest(collection="k8s", entity_id=entity_id)),
        ):
            error = await rpc_error(call)
            assert (error.code, error.reason, error.metadata["entity_id"]) == (
                grpc.StatusCode.NOT_FOUND,
                "ENTITY_NOT_FOUND",
                entity_id,
            )


async def test_exploring_the_ontology_gives_a_types_relation_types_hop_by_hop(k8s):
    one = await k8s.ExploreOntology(pb.ExploreOntologyRequest(collection="k8s", entity_type="Deployment"))
    assert (one.entity_type.name, one.entity_type.count) == ("Deployment", 1)
    assert list(one.entity_type.primary_key) == ["namespace", "name"]
    hops = [(r.from_type, r.type, r.to_type, r.count, r.depth) for r in one.relations]
    assert hops == [
        ("Deployment", "HAS", "Container", 1, 1),
        ("Deployment", "USES", "ConfigMap", 1, 1),
        ("Deployment", "USES", "ServiceAccount", 1, 1),
        ("Service", "SELECTS", "Deployment", 1, 1),
    ]
    two = await k8s.ExploreOntology(pb.ExploreOntologyRequest(collection="k8s", entity_type="Deployment", depth=2))
    assert [(r.from_type, r.type, r.to_type, r.depth) for r in two.relations][4:] == [
        ("Ingress", "REFERENCES", "Service", 2),
        ("RoleBinding", "APPLIES_TO", "ServiceAccount", 2),
    ]


async def test_shortest_paths_follow_relations_either_way_and_list_every_path_of_the_shortest_length(k8s):
    reply = await k8s.ShortestPaths(
        pb.ShortestPathsRequest(collection="k8s", from_type="Ingress", to_type="ServiceAccount")
    )
    assert [p.cypher for p in reply.paths] == [
        "(:Ingress)-[:REFERENCES]->(:Service)-[:SELECTS]->(:Deployment)-[:USES]->(:ServiceAccount)"
    ]
    assert [(h.from_type, h.type, h.to_type) for h in reply.paths[0].hops] == [
        ("Ingress", "REFERENCES", "Service"),
        ("Service", "SELECTS", "Deployment"),
        ("Deployment", "USES", "ServiceAccount"),
    ]
    back = await k8s.ShortestPaths(pb.ShortestPathsRequest(collection="k8s", from_type="ConfigMap", to_type="Service"))
    assert [p.cypher for p in back.paths] == ["(:ConfigMap)<-[:USES]-(:Deployment)<-[:SELECTS]-(:Service)"]

    # A second way of the same length: a Service that also selects the ServiceAccount's RoleBinding (made up).
    guards = [("SELECTS", "Deployment/shop/web"), ("GUARDS", "RoleBinding/shop/runner-read")]
    await k8s.upsert([entity("Service/shop/web", rels=guards)])
    two = await k8s.ShortestPaths(
        pb.ShortestPathsRequest(collection="k8s", from_type="Service", to_type="ServiceAccount")
    )
    assert [p.cypher for p in two.paths] == [
        "(:Service)-[:GUARDS]->(:RoleBinding)-[:APPLIES_TO]->(:ServiceAccount)",
        "(:Service)-[:SELECTS]->(:Deployment)-[:USES]->(:ServiceAccount)",
    ]


async def test_types_further_apart_than_max_depth_have_no_path(k8s):
    near = pb.ShortestPathsRequest(collection="k8s", from_type="Ingress", to_type="RoleBinding", max_depth=3)
    assert list((await k8s.ShortestPaths(near)).paths) == []
    far = pb.ShortestPathsRequest(collection="k8s", from_type="Ingress", to_type="RoleBinding", max_depth=4)
    assert len((await k8s.ShortestPaths(far)).paths) == 1
    same = pb.ShortestPathsRequest(collection="k8s", from_type="Ingress", to_type="Ingress")
    assert [p.cypher for p in (await k8s.ShortestPaths(same)).paths] == ["(:Ingress)"]


async def test_unknown_types_and_depths_out_of_range_are_refused_with_the_field(k8s, rpc_error):
    cases = [
        (
            k8s.ShortestPaths(pb.ShortestPathsRequest(collection="k8s", from_type="Nope", to_type="Service")),
            grpc.StatusCode.NOT_FOUND,
            "ENTITY_TYPE_NOT_FOUND",
            "from_type",
        ),
        (
            k8s.ShortestPaths(pb.ShortestPathsRequest(collection="k8s", from_type="Service", to_type="Nope")),
            grpc.StatusCode.NOT_FOUND,
            "ENTITY_TYPE_NOT_FOUND",
            "to_type",
        ),
        (
            k8s.ShortestPaths(
                pb.ShortestPathsRequest(collection="k8s", from_type="Service", to_type="Ingress", max_depth=7)
            ),
            grpc.StatusCode.INVALID_ARGUMENT,
            "DEPTH_OUT_OF_RANGE",
            "max_depth",
        ),
        (
            k8s.ExploreOntology(pb.ExploreOntologyRequest(collection="k8s", entity_type="Nope")),
            grpc.StatusCode.NOT_FOUND,
            "ENTITY_TYPE_NOT_FOUND",
            "entity_type",
        ),
        (
            k8s.ExploreOntology(pb.ExploreOntologyRequest(collection="k8s", entity_type="Service", depth=4)),
            grpc.StatusCode.INVALID_ARGUMENT,
            "DEPTH_OUT_OF_RANGE",
            "depth",
        ),
    ]
    for call, code, reason, field in cases:
        error = await rpc_error(call)
        assert (error.code, error.reason) == (code, reason)
        assert field in ([v.field for v in error.field_violations] or [error.metadata.get("field")])


async def test_the_graphs_are_listed_by_collection_with_their_types(k8s):
    await k8s.upsert([entity("Service/other/api")], collection="other")
    listed = await k8s.ListEntityTypes(pb.ListEntityTypesRequest())
    assert [(g.collection, g.entities, [t.name for t in g.entity_types]) for g in listed.graphs] == [
        ("k8s", 7, ["ConfigMap", "Container", "Deployment", "Ingress", "RoleBinding", "Service", "ServiceAccount"]),
        ("other", 1, ["Service"]),
    ]
    one = await k8s.ListEntityTypes(pb.ListEntityTypesRequest(collection="other"))
    assert [g.collection for g in one.graphs] == ["other"]
    assert [(r.from_type, r.type, r.to_type) for r in one.graphs[0].relations] == []
