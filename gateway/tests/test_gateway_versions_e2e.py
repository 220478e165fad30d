"""Re-index and rollback end to end over REST and MCP: the real gateway in front of the in-process mesh (hash
embedder, embedded store; the search service scores golden sets in dense mode) with the collection of
tests/support/chunking_golden.py, whose golden set 16-token chunks make worse and 32-token chunks do not. So a re-index
to 32 tokens switches and rollback goes back and forth; a re-index to 16 tokens is rejected by the gate with
both scores while search answers as before, and `force` switches anyway; the indexer's refusals reach the user
with their reasons.

They need the indexer's ReindexCollection/RollbackCollection and a search service that searches the active
version and scores a version by number (EvaluateCollectionRequest.version); without the latter the gate
compares version 1 with itself."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from ragmesh_gateway.app import run_gateway

from tests.support.chunking_golden import BETTER, DOCUMENTS, GOLDEN, MESH, WORDS, WORSE
from tests.support.gateway import assert_error, settings_for

ADMIN = "ve-admin"
FINAL = ("done", "failed", "cancelled", "rejected")


@pytest.fixture(scope="module")
async def mesh(mesh_factory):
    return await mesh_factory(**MESH)


@pytest.fixture(scope="module")
async def url(mesh):
    async with run_gateway(settings_for(mesh, api_keys=f"{ADMIN}:admin")) as url:
        yield url


@pytest.fixture(scope="module")
async def idle_url(mesh_factory):
    """A mesh whose indexer runs no job workers: a re-index stays building for as long as a test needs."""
    idle = await mesh_factory(indexer={"job_workers": 0})
    async with run_gateway(settings_for(idle, api_keys=f"{ADMIN}:admin")) as url:
        yield url


@contextlib.asynccontextmanager
async def rest(url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=url, headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120) as client:
        yield client


async def fill(api: httpx.AsyncClient, collection: str, *, golden: bool = True) -> None:
    response = await api.post("/api/v1/ingest/batch", json={"collection": collection, "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    if golden:
        response = await api.put(f"/api/v1/collections/{collection}/golden", json=GOLDEN)
        assert response.status_code == 200, response.text


async def finished(api: httpx.AsyncClient, job_id: str, timeout: float = 120) -> dict:
    async with asyncio.timeout(timeout):
        while True:
            job = (await api.get(f"/api/v1/jobs/{job_id}")).json()
            if job["state"] in FINAL:
                return job
            await asyncio.sleep(0.1)


async def top_documents(api: httpx.AsyncClient, collection: str) -> list[list[str]]:
    results = []
    for query in GOLDEN["queries"]:
        response = await api.post(
            "/api/v1/search", json={"query": query["text"], "collection": collection, "group_by_document": True}
        )
        assert response.status_code == 200, response.text
        results.append([hit["doc_id"] for hit in response.json()["results"]])
    return results


async def test_e2e_reindex_to_smaller_chunks_switches_and_rollback_goes_back_and_forth(url):
    async with rest(url) as api:
        await fill(api, "kb")
        queued = await api.post("/api/v1/collections/kb/reindex", json=BETTER)
        assert queued.status_code == 202, queued.text
        accepted = queued.json()
        job = accepted["job"]
        assert accepted["job_id"] == job["job_id"]
        assert (job["kind"], job["collection"], job["state"] in ("queued", "running")) == ("reindex", "kb", True)
        info = job["reindex"]
        assert (info["from_version"], info["to_version"], info["decision"]) == (1, 2, None)
        assert (info["settings"]["chunk_tokens"], info["settings"]["chunk_overlap_tokens"]) == (32, 0)

        done = await finished(api, job["job_id"])
        assert done["state"] == "done", done
        gate = done["reindex"]
        assert gate["decision"] == "switched"
        assert (gate["current"]["version"], gate["candidate"]["version"]) == (1, 2)
        assert gate["candidate"]["ndcg_at_10"] >= gate["current"]["ndcg_at_10"] - gate["tolerance"]
        assert gate["current"]["mode"] == gate["candidate"]["mode"] == "dense"
        listed = {j["job_id"]: j for j in (await api.get("/api/v1/jobs")).json()["jobs"]}
        assert listed[job["job_id"]]["reindex"]["decision"] == "switched"
        assert all(hits for hits in await top_documents(api, "kb"))

        back = await api.post("/api/v1/collections/kb/rollback")
        assert back.status_code == 200, back.text
        assert back.json() == {"collection": "kb", "version": 1, "replaced_version": 2}
        again = await api.post("/api/v1/collections/kb/rollback")
        assert again.json() == {"collection": "kb", "version": 2, "replaced_version": 1}


async def test_e2e_worse_chunks_are_rejected_with_both_scores_and_search_unchanged_then_forced(url):
    async with rest(url) as api:
        await fill(api, "kb-worse")
        before = await top_documents(api, "kb-worse")
        queued = await api.post("/api/v1/collections/kb-worse/reindex", json=WORSE)
        assert queued.status_code == 202, queued.text
        rejected = await finished(api, queued.json()["job_id"])
        assert rejected["state"] == "rejected", rejected
        gate = rejected["reindex"]
        assert (gate["decision"], gate["tolerance"], gate["settings"]["chunk_tokens"]) == ("rejected", 0, 16)
        assert (gate["current"]["version"], gate["candidate"]["version"]) == (1, 2)
        assert gate["candidate"]["ndcg_at_10"] < gate["current"]["ndcg_at_10"]
        for evaluation in (gate["current"], gate["candidate"]):
            assert evaluation["mode"] == "dense" and evaluation["queries"] == len(WORDS)
            assert {"ndcg_at_10", "recall_at_10", "mrr_at_10"} <= set(evaluation)
        assert await top_documents(api, "kb-worse") == before
        assert_error(await api.post("/api/v1/collections/kb-worse/rollback"), 409, "NO_PREVIOUS_VERSION")

        forced = await api.post("/api/v1/collections/kb-worse/reindex", json={**WORSE, "force": True})
        assert forced.status_code == 202, forced.text
        switched = await finished(api, forced.json()["job_id"])
        assert (switched["state"], switched["reindex"]["decision"]) == ("done", "forced")
        assert await top_documents(api, "kb-worse") != before  # the worse version answers now
        back = (await api.post("/api/v1/collections/kb-worse/rollback")).json()
        assert (back["version"], back["replaced_version"]) == (1, switched["reindex"]["to_version"])
        assert await top_documents(api, "kb-worse") == before


async def test_e2e_a_third_version_replaces_the_one_kept_for_rollback(url):
    # Version 1 is the collection under its own name: replacing it as the kept version clears it.
    async with rest(url) as api:
        await fill(api, "kb-third")
        for tokens, version in ((32, 2), (48, 3)):
            queued = await api.post(
                "/api/v1/collections/kb-third/reindex", json={"chunk_tokens": tokens, "tolerance": 1}
            )
            assert queued.status_code == 202, queued.text
            job = await finished(api, queued.json()["job_id"], timeout=60)
            assert (job["state"], job["reindex"]["to_version"]) == ("done", version), job
        back = await api.post("/api/v1/collections/kb-third/rollback")
        assert back.json() == {"collection": "kb-third", "version": 2, "replaced_version": 3}
        assert all(hits for hits in await top_documents(api, "kb-third"))


async def test_e2e_without_a_golden_set_the_switch_has_no_gate(url):
    async with rest(url) as api:
        await fill(api, "kb-plain", golden=False)
        queued = await api.post("/api/v1/collections/kb-plain/reindex", json=WORSE)
        assert queued.status_code == 202, queued.text
        job = await finished(api, queued.json()["job_id"])
        assert (job["state"], job["reindex"]["decision"]) == ("done", "no_golden_set")
        assert job["reindex"]["current"] is None and job["reindex"]["candidate"] is None


async def test_e2e_the_indexers_refusals_reach_the_user_with_their_reasons(url):
    async with rest(url) as api:
        await fill(api, "kb-refusals", golden=False)
        assert_error(await api.post("/api/v1/collections/nowhere/reindex"), 404, "COLLECTION_NOT_FOUND")
        assert_error(await api.post("/api/v1/collections/nowhere/rollback"), 404, "COLLECTION_NOT_FOUND")
        assert_error(await api.post("/api/v1/collections/kb-refusals/rollback"), 409, "NO_PREVIOUS_VERSION")
        # A lone overlap is checked against the chunk size in force (256 tokens).
        assert_error(
            await api.post("/api/v1/collections/kb-refusals/reindex", json={"chunk_overlap_tokens": 128}),
            400,
            "CHUNK_OVERLAP_OUT_OF_RANGE",
        )
        unknown = await api.post("/api/v1/collections/kb-refusals/reindex", json={"model": "no-such-model"})
        assert unknown.status_code in (400, 404), unknown.text
        assert "MODEL" in unknown.json()["error"]["reason"]


async def test_e2e_a_second_reindex_while_one_runs_is_a_conflict(idle_url):
    async with rest(idle_url) as api:
        await fill(api, "busy", golden=False)
        first = await api.post("/api/v1/collections/busy/reindex", json={"chunk_tokens": 32})
        assert first.status_code == 202, first.text
        job_id = first.json()["job_id"]
        error = assert_error(await api.post("/api/v1/collections/busy/reindex"), 409, "REINDEX_IN_PROGRESS")
        assert error["details"]["job_id"] == job_id
        cancelled = await api.post(f"/api/v1/jobs/{job_id}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "cancelled"


async def test_e2e_mcp_reindex_waits_with_progress_and_rollback_switches_back(url):
    async with rest(url) as api:
        await fill(api, "kb-mcp")
        await fill(api, "kb-mcp-worse")
    progress: list[str] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append(message or "")

    async with (
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {ADMIN}"}, timeout=120) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        queued = await client.call_tool("reindex_collection", {"collection": "kb-mcp", **BETTER})
        assert not queued.is_error, queued.content
        assert queued.structured_content["kind"] == "reindex" and queued.structured_content["job_id"]
        followed = await client.call_tool("get_job", {"job_id": queued.structured_content["job_id"]})
        assert not followed.is_error and followed.structured_content["reindex"]["to_version"] == 2

        async with asyncio.timeout(120):
            while followed.structured_content["state"] not in FINAL:
                await asyncio.sleep(0.1)
                followed = await client.call_tool("get_job", {"job_id": queued.structured_content["job_id"]})
        assert followed.structured_content["reindex"]["decision"] == "switched"

        waited = await client.call_tool(
            "reindex_collection", {"collection": "kb-mcp-worse", **WORSE, "wait": True}, progress_callback=on_progress
        )
        assert not waited.is_error, waited.content
        assert (waited.structured_content["state"], waited.structured_content["reindex"]["decision"]) == (
            "rejected",
            "rejected",
        )
        assert progress, "no progress notification while waiting"

        back = await client.call_tool("rollback_collection", {"collection": "kb-mcp"})
        assert not back.is_error, back.content
        assert back.structured_content == {"collection": "kb-mcp", "version": 1, "replaced_version": 2}
