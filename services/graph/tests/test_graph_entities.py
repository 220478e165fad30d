"""Writing entities: upsert (idempotent, replacing), relations and dangling ones, children, types of
properties, the ontology's counts, deletes, dropping a graph, a restart, and every way a write is refused."""

from __future__ import annotations

import asyncio

import grpc
import ladybug
import pytest
from ragmesh.graph.v1 import graph_service_pb2 as pb
from ragmesh_common.errors import from_rpc_error

from tests.support.graph import cluster, entity, props_of, value


def _relations(message: pb.Entity) -> set[tuple[str, str, int]]:
    return {(r.type, r.target_id, r.direction) for r in message.relations}


async def test_an_upserted_entity_comes_back_with_its_properties_and_relations_both_ways(graph):
    reply = await graph.upsert(cluster())
    assert (reply.entities, reply.relations, list(reply.dangling_relations)) == (7, 6, [])

    deployment = await graph.get("Deployment/shop/web")
    assert deployment.type == "Deployment"
    assert [(p.name, p.value.string_value) for p in deployment.primary_key] == [
        ("namespace", "shop"),
        ("name", "web"),
    ]
    assert props_of(deployment) == {
        "namespace": "shop",
        "name": "web",
        "spec.replicas": 3,
        "metadata.labels": ["app=web", "tier=front"],
    }
    assert _relations(deployment) == {
        ("USES", "ServiceAccount/shop/runner", pb.DIRECTION_OUTGOING),
        ("USES", "ConfigMap/shop/settings", pb.DIRECTION_OUTGOING),
        ("HAS", "Container/shop/web/app", pb.DIRECTION_OUTGOING),
        ("SELECTS", "Service/shop/web", pb.DIRECTION_INCOMING),
    }
    has = next(r for r in deployment.relations if r.type == "HAS")
    assert has.target_type == "Container" and has.HasField("index") and has.index == 0
    uses = next(r for r in deployment.relations if r.type == "USES")
    assert not uses.HasField("index")
    container = await graph.get("Container/shop/web/app")
    assert container.parent_id == "Deployment/shop/web"


async def test_upserting_the_same_batch_again_changes_nothing(graph):
    await graph.upsert(cluster())
    before = await graph.info()
    again = await graph.upsert(cluster())
    assert (again.entities, again.relations) == (7, 6)
    assert await graph.info() == before
    assert before.entities == 7
    assert _relations(await graph.get("Deployment/shop/web")) == _relations(await graph.get("Deployment/shop/web"))
    rows = await graph.query("MATCH ()-[r]->() RETURN count(r)")
    assert rows.rows[0].values[0].number_value == 6


async def test_an_upsert_replaces_the_entity_and_its_outgoing_relations_but_keeps_incoming_ones(graph):
    await graph.upsert(cluster())
    replaced = entity("Deployment/shop/web", props={"spec.paused": True}, rels=[("USES", "ConfigMap/shop/settings")])
    await graph.upsert([replaced])

    deployment = await graph.get("Deployment/shop/web")
    assert props_of(deployment) == {"namespace": "shop", "name": "web", "spec.paused": True}  # replicas gone
    assert _relations(deployment) == {
        ("USES", "ConfigMap/shop/settings", pb.DIRECTION_OUTGOING),
        ("SELECTS", "Service/shop/web", pb.DIRECTION_INCOMING),
    }


async def test_a_relation_to_an_entity_that_is_nowhere_is_dangling_until_its_target_is_written(graph):
    first = await graph.upsert([entity("Service/shop/web", rels=[("SELECTS", "Deployment/shop/web")])])
    assert (first.entities, first.relations) == (1, 0)
    assert list(first.dangling_relations) == ["Service/shop/web -[SELECTS]-> Deployment/shop/web"]
    assert _relations(await graph.get("Service/shop/web")) == set()

    await graph.upsert([entity("Deployment/shop/web")])  # the target, in a later batch
    again = await graph.upsert([entity("Service/shop/web", rels=[("SELECTS", "Deployment/shop/web")])])
    assert (again.relations, list(again.dangling_relations)) == (1, [])
    assert _relations(await graph.get("Deployment/shop/web")) == {
        ("SELECTS", "Service/shop/web", pb.DIRECTION_INCOMING)
    }


async def test_property_values_take_their_columns_type_when_that_loses_nothing(graph):
    await graph.upsert(
        [entity("Pod/a/p1", props={"cpu": 0.5, "restarts": 1, "phase": "Running", "ready": True, "ports": [80]})]
    )
    # cpu is DOUBLE: an int fits; phase is STRING: a number and a boolean become text; restarts is INT64: a whole
    # double fits; ports is STRING[]: numbers become text.
    await graph.upsert(
        [entity("Pod/a/p2", props={"cpu": 2, "restarts": 4.0, "phase": 7, "ready": False, "ports": [8080, 9090]})]
    )
    await graph.upsert([entity("Pod/a/p3", props={"phase": True})])
    assert props_of(await graph.get("Pod/a/p2")) == {
        "namespace": "a",
        "name": "p2",
        "cpu": 2.0,
        "restarts": 4,
        "phase": "7",
        "ready": False,
        "ports": ["8080", "9090"],
    }
    assert props_of(await graph.get("Pod/a/p3"))["phase"] == "true"
    rows = await graph.query("MATCH (p:Pod) WHERE p.cpu > 1 RETURN p.id")
    assert [r.values[0].string_value for r in rows.rows] == ["Pod/a/p2"]


@pytest.mark.parametrize(
    ("props", "field"),
    [
        ({"restarts": 1.5}, "entities[1].properties[restarts]"),  # INT64 cannot hold 1.5
        ({"restarts": "many"}, "entities[1].properties[restarts]"),
        ({"ready": 1}, "entities[1].properties[ready]"),  # BOOLEAN holds only booleans
        ({"cpu": "half"}, "entities[1].properties[cpu]"),
        ({"ports": 80}, "entities[1].properties[ports]"),  # a list column takes lists only
        ({"phase": ["a"]}, "entities[1].properties[phase]"),
    ],
)
async def test_a_value_its_column_cannot_hold_refuses_the_whole_batch(graph, rpc_error, props, field):
    first = {"cpu": 0.5, "restarts": 1, "ready": True, "ports": [80], "phase": "x"}
    await graph.upsert([entity("Pod/a/p1", props=first)])
    before = await graph.info()
    batch = [entity("Pod/a/p9"), entity("Pod/a/p2", props=props), entity("Node/n1", key=("name",))]
    error = await rpc_error(graph.UpsertEntities(pb.UpsertEntitiesRequest(collection="k8s", entities=batch)))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ENTITY_INVALID")
    assert [v.field for v in error.field_violations] == [field]
    assert await graph.info() == before  # nothing of the batch: not p9, not the new Node type
    error = await rpc_error(graph.GetEntity(pb.GetEntityRequest(collection="k8s", entity_id="Pod/a/p9")))
    assert error.reason == "ENTITY_NOT_FOUND"


async def test_the_ontology_counts_entities_per_type_and_relations_per_type_triple(graph):
    await graph.upsert(cluster())
    await graph.upsert([entity("Deployment/shop/api", rels=[("USES", "ServiceAccount/shop/runner")])])
    info = await graph.info()
    counts = {t.name: t.count for t in info.entity_types}
    assert counts == {
        "ConfigMap": 1,
        "Container": 1,
        "Deployment": 2,
        "Ingress": 1,
        "RoleBinding": 1,
        "Service": 1,
        "ServiceAccount": 1,
    }
    assert info.entities == 8
    deployment = next(t for t in info.entity_types if t.name == "Deployment")
    assert list(deployment.primary_key) == ["namespace", "name"]
    assert list(deployment.properties) == ["metadata.labels", "name", "namespace", "spec.replicas"]
    triples = {(r.from_type, r.type, r.to_type): r.count for r in info.relations}
    assert triples == {
        ("Ingress", "REFERENCES", "Service"): 1,
        ("Service", "SELECTS", "Deployment"): 1,
        ("Deployment", "USES", "ServiceAccount"): 2,
        ("Deployment", "USES", "ConfigMap"): 1,
        ("Deployment", "HAS", "Container"): 1,
        ("RoleBinding", "APPLIES_TO", "ServiceAccount"): 1,
    }
    # The ontology graph says the same to a raw query.
    rows = await graph.query(
        "MATCH (a:EntityType)-[r:RELATION]->(b:EntityType) WHERE r.type = 'USES' "
        "RETURN b.name, r.count ORDER BY b.name",
        target=pb.QUERY_TARGET_ONTOLOGY,
    )
    assert [(r.values[0].string_value, r.values[1].number_value) for r in rows.rows] == [
        ("ConfigMap", 1),
        ("ServiceAccount", 2),
    ]


async def test_deleting_an_entity_deletes_its_children_and_every_relation_touching_them(graph, rpc_error):
    await graph.upsert(cluster())
    await graph.upsert(
        [entity("Volume/shop/web/app/cache", key=(), parent="Container/shop/web/app")]  # a grandchild
    )
    reply = await graph.DeleteEntities(
        pb.DeleteEntitiesRequest(collection="k8s", ids=["Deployment/shop/web", "Deployment/shop/gone"])
    )
    assert list(reply.deleted_ids) == ["Deployment/shop/web", "Container/shop/web/app", "Volume/shop/web/app/cache"]
    for gone in reply.deleted_ids:
        error = await rpc_error(graph.GetEntity(pb.GetEntityRequest(collection="k8s", entity_id=gone)))
        assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "ENTITY_NOT_FOUND")
    # Its SELECTS went with the Deployment; the Ingress's relation to it stays.
    assert _relations(await graph.get("Service/shop/web")) == {
        ("REFERENCES", "Ingress/shop/web", pb.DIRECTION_INCOMING)
    }
    info = await graph.info()
    assert {t.name for t in info.entity_types} == {"ConfigMap", "Ingress", "RoleBinding", "Service", "ServiceAccount"}
    assert {(r.from_type, r.type, r.to_type) for r in info.relations} == {
        ("Ingress", "REFERENCES", "Service"),
        ("RoleBinding", "APPLIES_TO", "ServiceAccount"),
    }
    again = await graph.DeleteEntities(pb.DeleteEntitiesRequest(collection="k8s", ids=["Deployment/shop/web"]))
    assert list(again.deleted_ids) == []


async def test_a_deleted_graph_is_gone_and_deleting_it_again_says_so(graph, rpc_error):
    await graph.upsert(cluster())
    await graph.upsert([entity("Service/other/web")], collection="other")
    assert (await graph.DeleteGraph(pb.DeleteGraphRequest(collection="k8s"))).deleted
    assert not (await graph.DeleteGraph(pb.DeleteGraphRequest(collection="k8s"))).deleted
    error = await rpc_error(graph.ListEntityTypes(pb.ListEntityTypesRequest(collection="k8s")))
    assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "GRAPH_NOT_FOUND")
    listed = await graph.ListEntityTypes(pb.ListEntityTypesRequest())
    assert [g.collection for g in listed.graphs] == ["other"]
    assert not (graph.settings.graphs_dir / "k8s").exists()
    reply = await graph.DeleteEntities(pb.DeleteEntitiesRequest(collection="k8s", ids=["Service/shop/web"]))
    assert list(reply.deleted_ids) == []


async def test_a_restarted_service_finds_its_graphs_as_they_were(start_graph, tmp_path):
    async with start_graph(tmp_path) as graph:
        await graph.upsert(cluster())
        before = await graph.info()
        deployment = await graph.get("Deployment/shop/web")
    async with start_graph(tmp_path) as graph:
        assert await graph.info() == before
        assert await graph.get("Deployment/shop/web") == deployment
        # New properties and relations still go into the tables the first process made.
        changed = entity("Deployment/shop/web", props={"spec.replicas": 5}, rels=[("USES", "ConfigMap/shop/settings")])
        await graph.upsert([changed])
        assert props_of(await graph.get("Deployment/shop/web"))["spec.replicas"] == 5
        rows = await graph.query("MATCH (n:Deployment) RETURN n.`spec.replicas`")
        assert rows.rows[0].values[0].number_value == 5


def _with(message: pb.Entity, **fields) -> pb.Entity:
    out = pb.Entity()
    out.CopyFrom(message)
    for name, item in fields.items():
        if isinstance(item, list):
            del getattr(out, name)[:]
            getattr(out, name).extend(item)
        else:
            setattr(out, name, item)
    return out


_OK = entity("Deployment/shop/web")
_REFUSED = [
    (_with(_OK, type="deploy-ment", id="deploy-ment/shop/web"), "entities[0].type"),
    (_with(_OK, type="9Deployment", id="9Deployment/shop/web"), "entities[0].type"),
    (_with(_OK, id="Service/shop/web"), "entities[0].id"),  # not its type's id
    (_with(_OK, id="Deployment/"), "entities[0].id"),  # no key
    (_with(_OK, id="Deployment/shop/api"), "entities[0].id"),  # not its primary key's values
    (_with(_OK, parent_id="no-type-here"), "entities[0].parent_id"),
    (_with(_OK, relations=[pb.Relation(type="uses", target_id="Pod/a/b")]), "entities[0].relations[0].type"),
    (_with(_OK, relations=[pb.Relation(type="USES", target_id="runner")]), "entities[0].relations[0].target_id"),
    (_with(_OK, properties=[pb.Property(name="_secret", value=value(1))]), "entities[0].properties[_secret]"),
    (_with(_OK, properties=[pb.Property(name="ID", value=value(1))]), "entities[0].properties[ID]"),
    (_with(_OK, properties=[pb.Property(name="a`b", value=value(1))]), "entities[0].properties[a`b]"),
    (_with(_OK, properties=[pb.Property(name="spec", value=value({"replicas": 3}))]), "entities[0].properties[spec]"),
    (_with(_OK, properties=[pb.Property(name="m", value=value([[1]]))]), "entities[0].properties[m]"),
    (_with(_OK, properties=[pb.Property(name="name", value=value("again"))]), "entities[0].properties[name]"),
    (
        _with(_OK, primary_key=[pb.Property(name="namespace", value=value(["shop"])), _OK.primary_key[1]]),
        "entities[0].primary_key",
    ),
]


@pytest.mark.parametrize(("bad", "field"), _REFUSED, ids=[f for _, f in _REFUSED])
async def test_a_malformed_entity_is_refused_with_its_field(graph, rpc_error, bad, field):
    error = await rpc_error(graph.UpsertEntities(pb.UpsertEntitiesRequest(collection="k8s", entities=[_OK, bad])))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "ENTITY_INVALID")
    assert [v.field.replace("entities[1]", "entities[0]") for v in error.field_violations] == [field]
    listed = await graph.ListEntityTypes(pb.ListEntityTypesRequest())
    assert list(listed.graphs) == []  # nothing written, no graph made


async def test_a_type_or_property_clashing_with_the_graphs_tables_or_columns_is_refused(graph, rpc_error):
    await graph.upsert([entity("Deployment/shop/web", props={"spec.replicas": 1})])
    await graph.upsert([entity("Service/shop/web", rels=[("SELECTS", "Deployment/shop/web")])])
    for batch, field in [
        ([entity("deployment/shop/api")], "entities[0].type"),
        ([entity("Deployment/shop/api", props={"Spec.Replicas": 1})], "entities[0].properties[Spec.Replicas]"),
        ([entity("Pod/shop/a"), entity("POD/shop/b")], "entities[1].type"),  # two new ones in one batch
        # Entity types and relation types are tables of one namespace.
        ([entity("Selects/shop/a")], "entities[0].type"),
        ([entity("Pod/shop/a"), entity("Job/shop/b", rels=[("POD", "Pod/shop/a")])], "entities[1].relations[0].type"),
    ]:
        error = await rpc_error(graph.UpsertEntities(pb.UpsertEntitiesRequest(collection="k8s", entities=batch)))
        assert (error.reason, [v.field for v in error.field_violations]) == ("ENTITY_INVALID", [field])
    assert {t.name for t in (await graph.info()).entity_types} == {"Deployment", "Service"}


async def test_a_bad_collection_name_is_refused(graph, rpc_error):
    error = await rpc_error(graph.UpsertEntities(pb.UpsertEntitiesRequest(collection="Bad Name", entities=[_OK])))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "COLLECTION_NAME_INVALID")
    error = await rpc_error(graph.GetEntity(pb.GetEntityRequest(collection="../etc", entity_id="Deployment/a/b")))
    assert error.reason == "COLLECTION_NAME_INVALID"


async def test_reading_a_collection_without_a_graph_is_graph_not_found(graph, rpc_error):
    for call in (
        graph.GetEntity(pb.GetEntityRequest(collection="none", entity_id="Deployment/a/b")),
        graph.ExploreEntity(pb.ExploreEntityRequest(collection="none", entity_id="Deployment/a/b")),
        graph.ExploreOntology(pb.ExploreOntologyRequest(collection="none", entity_type="Deployment")),
        graph.ShortestPaths(pb.ShortestPathsRequest(collection="none", from_type="A", to_type="B")),
        graph.ListEntityTypes(pb.ListEntityTypesRequest(collection="none")),
        graph.Query(pb.QueryRequest(collection="none", query="RETURN 1")),
    ):
        error = await rpc_error(call)
        assert (error.code, error.reason) == (grpc.StatusCode.NOT_FOUND, "GRAPH_NOT_FOUND")
    assert not (graph.settings.graphs_dir / "none").exists()  # reading makes no graph


async def test_too_many_entities_or_a_malformed_id_to_delete_is_refused(graph, rpc_error):
    many = [entity(f"Pod/a/p{i}") for i in range(10_001)]
    error = await rpc_error(graph.UpsertEntities(pb.UpsertEntitiesRequest(collection="k8s", entities=many)))
    assert (error.reason, [v.field for v in error.field_violations]) == ("ENTITY_INVALID", ["entities"])
    await graph.upsert([_OK])
    bad = pb.DeleteEntitiesRequest(collection="k8s", ids=["Deployment/shop/web", "no-type"])
    error = await rpc_error(graph.DeleteEntities(bad))
    assert (error.reason, [v.field for v in error.field_violations]) == ("ENTITY_INVALID", ["ids[1]"])
    assert (await graph.get("Deployment/shop/web")).id == "Deployment/shop/web"  # nothing deleted


async def test_deleting_a_graph_while_it_is_read_fails_the_reads_cleanly(graph):
    await graph.upsert(cluster())
    reads = [
        graph.ExploreEntity(pb.ExploreEntityRequest(collection="k8s", entity_id="Service/shop/web", depth=3))
        for _ in range(20)
    ] + [graph.Query(pb.QueryRequest(collection="k8s", query="MATCH (n) RETURN n")) for _ in range(10)]
    dropped = graph.DeleteGraph(pb.DeleteGraphRequest(collection="k8s"))
    results = await asyncio.gather(*reads[:15], dropped, *reads[15:], return_exceptions=True)
    assert results[15].deleted
    for result in results[:15] + results[16:]:
        if isinstance(result, grpc.aio.AioRpcError):
            assert from_rpc_error(result).reason in ("GRAPH_NOT_FOUND", "ENTITY_NOT_FOUND"), result
        else:
            assert isinstance(result, pb.ExploreEntityResponse | pb.QueryResponse)
    # The service still serves: a new graph under the same name.
    await graph.upsert([entity("Service/shop/web")])
    assert (await graph.info()).entities == 1


async def test_an_ontology_left_behind_its_data_is_counted_again_at_start(start_graph, tmp_path):
    async with start_graph(tmp_path) as graph:
        await graph.upsert(cluster())
    # As if a process stopped between a write of the data and the rewrite of its ontology.
    database = ladybug.Database(str(tmp_path / "graph" / "k8s" / "data"))
    ladybug.Connection(database).execute("MATCH (c:ConfigMap) DETACH DELETE c")
    database.close()
    async with start_graph(tmp_path) as graph:
        info = await graph.info()
        assert "ConfigMap" not in {t.name for t in info.entity_types} and info.entities == 6
        assert ("Deployment", "USES", "ConfigMap") not in {(r.from_type, r.type, r.to_type) for r in info.relations}
        rows = await graph.query("MATCH (t:EntityType) RETURN count(t)", target=pb.QUERY_TARGET_ONTOLOGY)
        assert rows.rows[0].values[0].number_value == 6


async def test_a_batch_too_big_for_the_page_cache_is_refused_whole_and_the_graph_still_writes(
    start_graph, tmp_path, rpc_error
):
    # Each pair of types a relation joins takes room while the batch is written: 40 child types of one parent.
    children = [entity(f"Part{i}/a/p/c", key=("namespace", "parent", "name"), parent="Whole/a/p") for i in range(40)]
    whole = entity("Whole/a/p", rels=[("HAS", f"Part{i}/a/p/c", 0) for i in range(40)])
    async with start_graph(tmp_path, buffer_pool_mb=64) as graph:
        await graph.upsert(cluster())
        before = await graph.info()
        request = pb.UpsertEntitiesRequest(collection="k8s", entities=[whole, *children])
        error = await rpc_error(graph.UpsertEntities(request))
        assert (error.code, error.reason) == (grpc.StatusCode.RESOURCE_EXHAUSTED, "GRAPH_BUFFER_POOL_FULL")
        assert "RAGMESH_GRAPH_BUFFER_POOL_MB" in error.message
        assert await graph.info() == before  # nothing of the batch
        error = await rpc_error(graph.GetEntity(pb.GetEntityRequest(collection="k8s", entity_id="Whole/a/p")))
        assert error.reason == "ENTITY_NOT_FOUND"
        reply = await graph.upsert([entity("Deployment/shop/api", rels=[("USES", "ServiceAccount/shop/runner")])])
        assert reply.entities == 1


async def test_the_ontology_a_write_keeps_equals_a_recount_of_the_graph(start_graph, tmp_path):
    """A write changes the ontology's counts by what its batch adds and replaces; a restarted service counts the
    whole graph again. After new, replaced and re-pointed entities both agree."""
    async with start_graph(tmp_path) as graph:
        await graph.upsert(cluster())
        await graph.upsert(cluster())  # the same again: nothing new
        await graph.upsert(
            [
                # Re-pointed: USES a new ConfigMap instead of the ServiceAccount and the old ConfigMap.
                entity(
                    "Deployment/shop/web", rels=[("USES", "ConfigMap/shop/other"), ("HAS", "Container/shop/web/app")]
                ),
                entity("ConfigMap/shop/other"),
                entity("Deployment/shop/api", rels=[("USES", "ServiceAccount/shop/runner")]),
                entity(
                    "Service/shop/api", rels=[("SELECTS", "Deployment/shop/api"), ("SELECTS", "Deployment/shop/web")]
                ),
            ]
        )
        kept = await graph.info()
    counts = {t.name: t.count for t in kept.entity_types}
    assert (counts["Deployment"], counts["ConfigMap"], counts["Service"]) == (2, 2, 2)
    uses = {(r.from_type, r.to_type): r.count for r in kept.relations if r.type == "USES"}
    assert uses == {("Deployment", "ConfigMap"): 1, ("Deployment", "ServiceAccount"): 1}
    async with start_graph(tmp_path) as graph:
        assert await graph.info() == kept
