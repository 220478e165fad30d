"""Re-index and rollback over REST and MCP: what the gateway itself decides, against the real gateway over the
in-process mesh (hash embedder, embedded store). Malformed settings are refused with the field named before the
indexer is asked, only admin keys may manage a collection's versions (a key limited to some collections only
theirs), read and write sessions do not even see the MCP tools, and the job JSON carries a re-index's versions,
settings and gate. The runs themselves (switch, reject, rollback) are in test_gateway_versions_e2e.py."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from ragmesh.indexer.v1 import indexer_service_pb2 as idx_pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_gateway.app import run_gateway
from ragmesh_gateway.conversions import job_model

from tests.support.gateway import assert_error, settings_for

READ, WRITE, ADMIN, NOTES = "v-read", "v-write", "v-admin", "v-notes"
KEYS = f"{READ}:read, {WRITE}:write, {ADMIN}:admin, {NOTES}:admin:notes"
ENDPOINTS = ("reindex", "rollback")


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory()


@pytest.fixture(scope="module")
async def url(mesh):
    async with run_gateway(settings_for(mesh, api_keys=KEYS)) as url:
        async with rest(url, ADMIN) as admin:
            response = await admin.post(
                "/api/v1/ingest", json={"text": "Tides follow the moon.", "collection": "kb", "doc_id": "tides"}
            )
            assert response.status_code == 200, response.text
        yield url


@contextlib.asynccontextmanager
async def rest(url: str, key: str) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
        yield client


@contextlib.asynccontextmanager
async def mcp(url: str, key: str) -> AsyncIterator[Client]:
    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        yield client


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"chunk_tokens": 15}, "chunk_tokens"),
        ({"chunk_tokens": 8193}, "chunk_tokens"),
        ({"chunk_tokens": "64"}, "chunk_tokens"),
        ({"chunk_tokens": 64.5}, "chunk_tokens"),
        ({"chunk_overlap_tokens": -1}, "chunk_overlap_tokens"),
        ({"chunk_overlap_tokens": 4096}, "chunk_overlap_tokens"),
        ({"model": ""}, "model"),
        ({"model": "Not A Model"}, "model"),
        ({"tolerance": 1.5}, "tolerance"),
        ({"tolerance": -0.01}, "tolerance"),
        ({"tolerance": "0.1"}, "tolerance"),
        ({"force": "yes"}, "force"),
        ({"retention_seconds": -1}, "retention_seconds"),
        ({"retention_seconds": 365 * 24 * 3600 + 1}, "retention_seconds"),
        ({"chunk_size": 64}, "chunk_size"),
    ],
    ids=[
        "tokens-15",
        "tokens-8193",
        "tokens-text",
        "tokens-fraction",
        "overlap-negative",
        "overlap-huge",
        "model-empty",
        "model-pattern",
        "tolerance-above-1",
        "tolerance-negative",
        "tolerance-text",
        "force-text",
        "retention-negative",
        "retention-over-a-year",
        "unknown-field",
    ],
)
async def test_malformed_reindex_settings_are_refused_with_the_field_named(url, body, field):
    async with rest(url, ADMIN) as api:
        error = assert_error(await api.post("/api/v1/collections/kb/reindex", json=body), 400, "REQUEST_INVALID")
    assert [v["field"] for v in error["details"]["field_violations"]] == [field]


async def test_an_overlap_of_half_the_chunk_or_more_is_refused_by_the_indexers_rule(url):
    async with rest(url, ADMIN) as api:
        for tokens, overlap in ((64, 32), (64, 40), (17, 8)):  # half of 17 is 8, as the indexer counts
            response = await api.post(
                "/api/v1/collections/kb/reindex", json={"chunk_tokens": tokens, "chunk_overlap_tokens": overlap}
            )
            error = assert_error(response, 400, "CHUNK_OVERLAP_OUT_OF_RANGE")
            assert error["details"]["field_violations"][0]["field"] == "chunk_overlap_tokens"
            assert f"less than half of chunk_tokens ({tokens})" in error["message"]


async def test_malformed_collection_names_are_refused(url):
    async with rest(url, ADMIN) as api:
        for endpoint in ENDPOINTS:
            for name in ("Bad%20Name", "x" * 64, "-dash"):
                assert_error(await api.post(f"/api/v1/collections/{name}/{endpoint}"), 400, "COLLECTION_NAME_INVALID")


async def test_only_admin_keys_manage_versions_and_a_limited_key_only_its_collections(url):
    for key in (READ, WRITE):
        async with rest(url, key) as api:
            for endpoint in ENDPOINTS:
                error = assert_error(await api.post(f"/api/v1/collections/kb/{endpoint}"), 403, "SCOPE_INSUFFICIENT")
                assert (error["details"]["scope"], error["details"]["required_scope"]) == (key[2:], "admin")
    async with rest(url, NOTES) as api:
        for endpoint in ENDPOINTS:
            error = assert_error(
                await api.post(f"/api/v1/collections/kb/{endpoint}", json={"force": True}), 403, "COLLECTION_FORBIDDEN"
            )
            assert error["details"]["allowed_collections"] == "notes"
    async with rest(url, "") as api:
        for endpoint in ENDPOINTS:
            assert_error(await api.post(f"/api/v1/collections/kb/{endpoint}"), 401, "API_KEY_MISSING")


async def test_the_contract_documents_both_endpoints_and_the_rejected_state(url):
    async with rest(url, ADMIN) as api:
        spec = (await api.get("/openapi.json")).json()
    reindex = spec["paths"]["/api/v1/collections/{name}/reindex"]["post"]
    rollback = spec["paths"]["/api/v1/collections/{name}/rollback"]["post"]
    assert {"202", "400", "403", "404", "409"} <= set(reindex["responses"])
    assert {"200", "403", "404", "409"} <= set(rollback["responses"])
    schemas = spec["components"]["schemas"]
    assert "rejected" in schemas["Job"]["properties"]["state"]["enum"]
    assert set(schemas["ReindexInfo"]["properties"]) >= {
        "from_version",
        "to_version",
        "settings",
        "tolerance",
        "force",
        "retention_seconds",
        "decision",
        "current",
        "candidate",
    }
    assert schemas["RollbackResponse"]["required"] == ["collection", "version", "replaced_version"]


def test_a_rejected_reindex_job_reads_as_json_with_both_scores():
    def evaluation(version: int, ndcg: float) -> search_pb.Evaluation:
        return search_pb.Evaluation(
            collection="kb",
            mode=search_pb.SEARCH_MODE_DENSE,
            queries=4,
            ndcg_at_10=ndcg,
            recall_at_10=ndcg,
            mrr_at_10=ndcg,
            golden_set_id="g1",
            version=version,
        )

    job = idx_pb.Job(
        job_id="a" * 32,
        collection="kb",
        state=idx_pb.JOB_STATE_REJECTED,
        kind="reindex",
        total=6,
        indexed=6,
        reindex=idx_pb.ReindexInfo(
            from_version=1,
            to_version=2,
            tolerance=0.01,
            retention_seconds=3600,
            decision="rejected",
            settings=search_pb.IndexSettings(
                model="tiny",
                model_id="hash-8",
                dimension=8,
                sparse_model_id="bm25",
                chunk_tokens=32,
                chunk_overlap_tokens=0,
                chunker_fingerprint="f",
            ),
            current=evaluation(1, 0.9),
            candidate=evaluation(2, 0.5),
        ),
    )
    body = job_model(job).model_dump(mode="json")
    assert body["state"] == "rejected" and body["kind"] == "reindex"
    reindex = body["reindex"]
    assert {
        k: reindex[k] for k in ("from_version", "to_version", "tolerance", "force", "retention_seconds", "decision")
    } == {
        "from_version": 1,
        "to_version": 2,
        "tolerance": 0.01,
        "force": False,
        "retention_seconds": 3600,
        "decision": "rejected",
    }
    assert reindex["settings"] == {
        "model": "tiny",
        "model_id": "hash-8",
        "dimension": 8,
        "sparse_model_id": "bm25",
        "chunk_tokens": 32,
        "chunk_overlap_tokens": 0,
        "chunker_fingerprint": "f",
    }
    current, candidate = reindex["current"], reindex["candidate"]
    assert (current["version"], current["ndcg_at_10"], current["mode"]) == (1, 0.9, "dense")
    assert (candidate["version"], candidate["ndcg_at_10"], candidate["recall_at_10"], candidate["mrr_at_10"]) == (
        2,
        0.5,
        0.5,
        0.5,
    )
    # An ingestion job has no re-index fields; one not yet gated has no decision and no scores.
    assert job_model(idx_pb.Job(job_id="b" * 32, collection="kb", kind="folder")).reindex is None
    building = job_model(
        idx_pb.Job(
            job_id="c" * 32,
            collection="kb",
            kind="reindex",
            state=idx_pb.JOB_STATE_RUNNING,
            reindex=idx_pb.ReindexInfo(from_version=1, to_version=2),
        )
    ).reindex
    assert building is not None and (building.decision, building.current, building.candidate) == (None, None, None)


async def test_mcp_version_tools_are_for_admin_sessions_only(url):
    for key in (READ, WRITE):
        async with mcp(url, key) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert not names & {"reindex_collection", "rollback_collection"}, key
            refused = await client.call_tool("rollback_collection", {"collection": "kb"})
            assert refused.is_error and refused.structured_content["error"]["reason"] == "TOOL_NOT_FOUND"
    async with mcp(url, ADMIN) as client:
        tools = {tool.name: tool for tool in (await client.list_tools()).tools}
        schema = tools["reindex_collection"].input_schema
        assert schema["required"] == ["collection"]
        assert set(schema["properties"]) == {
            "collection",
            "chunk_tokens",
            "chunk_overlap_tokens",
            "model",
            "tolerance",
            "force",
            "retention_seconds",
            "wait",
        }
        assert tools["rollback_collection"].input_schema["required"] == ["collection"]
        assert tools["reindex_collection"].annotations.read_only_hint is False


async def test_mcp_reindex_refuses_what_the_gateway_decides(url):
    async with mcp(url, ADMIN) as client:
        for arguments, reason, field in (
            ({"collection": "kb", "chunk_tokens": 8}, "REQUEST_INVALID", "chunk_tokens"),
            ({"collection": "kb", "tolerance": 2}, "REQUEST_INVALID", "tolerance"),
            (
                {"collection": "kb", "chunk_tokens": 64, "chunk_overlap_tokens": 32},
                "CHUNK_OVERLAP_OUT_OF_RANGE",
                "chunk_overlap_tokens",
            ),
            ({"collection": "Bad Name"}, "COLLECTION_NAME_INVALID", "name"),
        ):
            refused = await client.call_tool("reindex_collection", arguments)
            assert refused.is_error, arguments
            error = refused.structured_content["error"]
            assert error["reason"] == reason, error
            assert [v["field"] for v in error["details"]["field_violations"]] == [field], error
    async with mcp(url, NOTES) as client:
        for tool in ("reindex_collection", "rollback_collection"):
            refused = await client.call_tool(tool, {"collection": "kb"})
            assert refused.is_error and refused.structured_content["error"]["reason"] == "COLLECTION_FORBIDDEN"
