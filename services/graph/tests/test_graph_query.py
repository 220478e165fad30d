"""Raw Cypher queries: one read-only statement on a collection's data graph or its ontology, bounded by a row
limit and a timeout. Every write, every statement that touches the server's files or settings, and more than
one statement is refused, and leaves the graph and the file system as they were."""

from __future__ import annotations

import grpc
import pytest
from google.protobuf.json_format import MessageToDict
from ragmesh.graph.v1 import graph_service_pb2 as pb

from tests.support.graph import cluster, entity


@pytest.fixture
async def k8s(graph):
    await graph.upsert(cluster())
    return graph


def _rows(reply: pb.QueryResponse) -> list[list[object]]:
    return [MessageToDict(row) for row in reply.rows]


async def test_a_read_query_returns_its_columns_and_rows_with_nodes_and_relations_as_objects(k8s):
    reply = await k8s.query(
        "MATCH (s:Service)-[r:SELECTS]->(d:Deployment) WHERE d.`spec.replicas` >= $least "
        "RETURN s.id AS service, r, d ORDER BY service",
        parameters={"least": 2},
    )
    assert list(reply.columns) == ["service", "r", "d"] and not reply.truncated
    [[service, relation, deployment]] = _rows(reply)
    assert service == "Service/shop/web"
    assert relation == {"_label": "SELECTS"}  # no engine-internal ids
    assert deployment["_label"] == "Deployment" and deployment["id"] == "Deployment/shop/web"
    assert deployment["spec.replicas"] == 3 and deployment["metadata.labels"] == ["app=web", "tier=front"]
    assert not any(key in deployment for key in ("_ID", "_id", "offset"))
    # The catalog may be read.
    tables = _rows(await k8s.query("CALL show_tables() RETURN name ORDER BY name"))
    assert ["Deployment"] in tables and ["SELECTS"] in tables


async def test_rows_past_the_limit_are_left_out_and_flagged(k8s):
    two = await k8s.query("MATCH (n) RETURN n.id ORDER BY n.id", row_limit=2)
    assert _rows(two) == [["ConfigMap/shop/settings"], ["Container/shop/web/app"]] and two.truncated
    seven = await k8s.query("MATCH (n) RETURN n.id ORDER BY n.id", row_limit=7)
    assert len(seven.rows) == 7 and not seven.truncated


async def test_the_default_row_limit_is_the_services(start_graph, tmp_path):
    async with start_graph(tmp_path, row_limit=3) as graph:
        await graph.upsert(cluster())
        reply = await graph.query("UNWIND range(1, 10) AS x RETURN x")
        assert _rows(reply) == [[1], [2], [3]] and reply.truncated


async def test_an_ontology_query_reads_the_ontology_alone(k8s, rpc_error):
    reply = await k8s.query(
        "MATCH (t:EntityType) WHERE t.name = 'Deployment' RETURN t.count, t.primary_key",
        target=pb.QUERY_TARGET_ONTOLOGY,
    )
    assert _rows(reply) == [[1, ["namespace", "name"]]]
    data = pb.QueryRequest(collection="k8s", query="MATCH (d:Deployment) RETURN d", target=pb.QUERY_TARGET_ONTOLOGY)
    error = await rpc_error(k8s.Query(data))
    assert (error.code, error.reason) == (grpc.StatusCode.INVALID_ARGUMENT, "QUERY_INVALID")
    assert "Deployment" in error.message  # the engine's own words


async def test_a_query_sees_the_latest_write(k8s):
    assert _rows(await k8s.query("MATCH (n:Service) RETURN count(n)")) == [[1]]
    await k8s.upsert([entity("Service/shop/api")])
    assert _rows(await k8s.query("MATCH (n:Service) RETURN count(n)")) == [[2]]


@pytest.mark.parametrize(
    ("fields", "code", "reason"),
    [
        ({"query": ""}, grpc.StatusCode.INVALID_ARGUMENT, "QUERY_EMPTY"),
        ({"query": "  \n "}, grpc.StatusCode.INVALID_ARGUMENT, "QUERY_EMPTY"),
        ({"query": "RETURN 1 " + " " * 10_000}, grpc.StatusCode.INVALID_ARGUMENT, "QUERY_TOO_LONG"),
        ({"query": "MATCH (n RETURN n"}, grpc.StatusCode.INVALID_ARGUMENT, "QUERY_INVALID"),
        ({"query": "MATCH (n:Nope) RETURN n"}, grpc.StatusCode.INVALID_ARGUMENT, "QUERY_INVALID"),
        ({"query": "RETURN 1", "row_limit": 10_001}, grpc.StatusCode.INVALID_ARGUMENT, "LIMIT_OUT_OF_RANGE"),
        ({"query": "RETURN 1", "row_limit": -1}, grpc.StatusCode.INVALID_ARGUMENT, "LIMIT_OUT_OF_RANGE"),
        ({"query": "RETURN 1", "collection": "Bad!"}, grpc.StatusCode.INVALID_ARGUMENT, "COLLECTION_NAME_INVALID"),
    ],
)
async def test_a_query_empty_too_long_malformed_or_over_the_limits_is_refused(k8s, rpc_error, fields, code, reason):
    error = await rpc_error(k8s.Query(pb.QueryRequest(**{"collection": "k8s", **fields})))
    assert (error.code, error.reason) == (code, reason)


async def test_a_query_running_past_the_timeout_is_stopped(start_graph, tmp_path, rpc_error):
    async with start_graph(tmp_path, query_timeout_seconds=0.05) as graph:
        await graph.upsert(cluster())
        slow = "MATCH (a), (b), (c) UNWIND range(1, 100000) AS x UNWIND range(1, 100000) AS y RETURN count(*)"
        error = await rpc_error(graph.Query(pb.QueryRequest(collection="k8s", query=slow)))
        assert (error.code, error.reason) == (grpc.StatusCode.DEADLINE_EXCEEDED, "QUERY_TIMEOUT")
        assert _rows(await graph.query("MATCH (n:Service) RETURN n.id")) == [["Service/shop/web"]]  # still serves


# Every way a statement could write, touch the server's files or settings, or run more than one statement;
# {out} is a folder outside the graph that holds only rows.csv and lib.so.
NOT_READ_ONLY = [
    "CREATE (:Service {id: 'Service/x/y'})",
    "MERGE (s:Service {id: 'Service/x/y'})",
    "MATCH (d:Deployment) SET d.`spec.replicas` = 9",
    "MATCH (c:ConfigMap) DELETE c",
    "MATCH (d:Deployment) DETACH DELETE d",
    "DROP TABLE Container",
    "CREATE NODE TABLE Evil(id STRING PRIMARY KEY)",
    "CREATE REL TABLE EVIL(FROM Service TO Service)",
    "ALTER TABLE Service ADD evil STRING",
    "COPY ConfigMap FROM '{out}/rows.csv'",
    "COPY (MATCH (n) RETURN n.id) TO '{out}/copied.csv'",
    "LOAD FROM '{out}/rows.csv' RETURN *",
    "MATCH (n:Service) RETURN n.id AS id UNION ALL LOAD FROM '{out}/rows.csv' (header=true) RETURN id",
    "CALL threads=1",
    "CALL timeout=100000000",
    "CHECKPOINT",
    "BEGIN TRANSACTION",
    "INSTALL json",
    "UNINSTALL json",
    "LOAD EXTENSION '{out}/lib.so'",
    "ATTACH '{out}/other' AS other (dbtype lbug)",
    "EXPORT DATABASE '{out}/export'",
    "/* a comment first */ EXPORT DATABASE '{out}/export'",
    "IMPORT DATABASE '{out}/export'",
    "CALL storage_info('Service') RETURN *",
    "MATCH (n) RETURN n.id; MATCH (n) DETACH DELETE n",
    "RETURN 1; CHECKPOINT",
]
# The same on the ontology graph.
NOT_READ_ONLY_ONTOLOGY = [
    "MATCH (t:EntityType) SET t.count = 0",
    "MATCH (t:EntityType) DETACH DELETE t",
    "CREATE (:EntityType {name: 'Evil'})",
    "COPY (MATCH (t:EntityType) RETURN t.name) TO '{out}/types.csv'",
    "LOAD FROM '{out}/rows.csv' RETURN *",
    "CHECKPOINT",
    "EXPORT DATABASE '{out}/export'",
    "MATCH (t:EntityType) RETURN t.name; MATCH (t:EntityType) DETACH DELETE t",
]


async def test_every_statement_that_is_not_read_only_is_refused_and_changes_nothing(k8s, rpc_error, tmp_path):
    out = tmp_path / "outside"
    out.mkdir()
    (out / "rows.csv").write_text("id\nConfigMap/x/y\n")
    (out / "lib.so").write_bytes(b"not a library")
    for target, statements in (
        (pb.QUERY_TARGET_DATA, NOT_READ_ONLY),
        (pb.QUERY_TARGET_ONTOLOGY, NOT_READ_ONLY_ONTOLOGY),
    ):
        before = (await k8s.info(), _rows(await k8s.query("MATCH (n) RETURN n ORDER BY n.id")))
        for statement in statements:
            query = statement.replace("{out}", str(out))
            error = await rpc_error(k8s.Query(pb.QueryRequest(collection="k8s", query=query, target=target)))
            assert (error.code, error.reason) == (grpc.StatusCode.PERMISSION_DENIED, "QUERY_NOT_READ_ONLY"), (
                query,
                error,
            )
        after = (await k8s.info(), _rows(await k8s.query("MATCH (n) RETURN n ORDER BY n.id")))
        assert after == before
        assert sorted(p.name for p in out.iterdir()) == ["lib.so", "rows.csv"]  # nothing written outside
    # And the graph still takes writes (a refused CHECKPOINT would have broken its database).
    await k8s.upsert([entity("Service/shop/api")])
    assert _rows(await k8s.query("MATCH (n:Service) RETURN count(n)")) == [[2]]
