"""`ragmesh reindex --wait` and `ragmesh rollback` end to end against a real in-process mesh (hash embedder,
golden sets scored in dense mode) with the collection of tests/support/chunking_golden.py: a re-index to 32-token chunks
switches (exit 0, the decision and both scores on stderr, the job as JSON on stdout), one to 16-token chunks is
rejected by the gate (exit 1, both scores), `ragmesh jobs show` tells the decision too, and rollback switches
back.

They need the indexer's ReindexCollection/RollbackCollection and a search service that searches the active
version and scores a version by number (EvaluateCollectionRequest.version); without the latter the gate
compares version 1 with itself."""

from __future__ import annotations

import asyncio
import json

import pytest
import pytest_asyncio
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2 as search_pb
from ragmesh_cli.app import app
from typer.testing import CliRunner

from tests.support.chunking_golden import DOCUMENTS, GOLDEN, MESH

pytestmark = pytest.mark.asyncio(loop_scope="session")


async def invoke(args: list[str]):
    return await asyncio.to_thread(CliRunner().invoke, app, args, env={"COLUMNS": "250"})


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    return await mesh_factory(**MESH)


async def fill(mesh, collection: str) -> None:
    await mesh.stub("indexer").IngestDocument(
        pb.IngestDocumentRequest(
            document=pb.DocumentInput(collection=collection, doc_id=DOCUMENTS[0]["doc_id"], text=DOCUMENTS[0]["text"])
        )
    )
    async for _ in mesh.stub("indexer").IngestDocuments(
        pb.IngestDocumentsRequest(
            documents=[
                pb.DocumentInput(collection=collection, doc_id=d["doc_id"], text=d["text"]) for d in DOCUMENTS[1:]
            ]
        )
    ):
        pass
    await mesh.stub("search").SetGoldenSet(
        search_pb.SetGoldenSetRequest(
            collection=collection,
            queries=[
                search_pb.GoldenQuery(query_id=q["query_id"], text=q["text"], relevant=q["relevant"])
                for q in GOLDEN["queries"]
            ],
        )
    )


async def test_e2e_reindex_wait_switches_then_rollback_switches_back(mesh):
    await fill(mesh, "cli-better")
    indexer = ["--indexer", mesh.addrs["indexer"]]
    result = await invoke(
        ["reindex", "cli-better", "--chunk-tokens", "32", "--chunk-overlap-tokens", "0", "--wait", *indexer]
    )
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert (job["state"], job["decision"], job["from_version"], job["to_version"]) == ("done", "switched", 1, 2)
    assert job["settings"]["chunk_tokens"] == 32
    assert (job["current"]["version"], job["candidate"]["version"]) == (1, 2)
    assert "cli-better: switched: the new version is not worse on the golden set" in result.stderr
    assert "searches use version 2" in result.stderr
    assert "current (version 1): nDCG@10 " in result.stderr and "candidate (version 2): nDCG@10 " in result.stderr

    shown = await invoke(["jobs", *indexer, "show", job["job_id"]])
    assert shown.exit_code == 0 and "switched" in shown.stderr

    back = await invoke(["rollback", "cli-better", *indexer])
    assert back.exit_code == 0, back.output
    assert json.loads(back.stdout) == {"collection": "cli-better", "version": 1, "replaced_version": 2}
    assert "searches use version 1 again" in back.stderr


async def test_e2e_reindex_wait_exits_1_when_the_gate_rejects_with_both_scores(mesh):
    await fill(mesh, "cli-worse")
    result = await invoke(
        [
            "reindex",
            "cli-worse",
            "--chunk-tokens",
            "16",
            "--chunk-overlap-tokens",
            "0",
            "--tolerance",
            "0",
            "--wait",
            "--indexer",
            mesh.addrs["indexer"],
        ]
    )
    assert result.exit_code == 1, result.output
    job = json.loads(result.stdout)
    assert (job["state"], job["decision"]) == ("rejected", "rejected")
    assert job["candidate"]["ndcg_at_10"] < job["current"]["ndcg_at_10"]
    assert "cli-worse: rejected: the new version is worse on the golden set" in result.stderr
    assert "searches use version 1" in result.stderr
    current = f"current (version 1): nDCG@10 {job['current']['ndcg_at_10']:.3f}"
    candidate = f"candidate (version 2): nDCG@10 {job['candidate']['ndcg_at_10']:.3f}"
    assert current in result.stderr and candidate in result.stderr


async def test_e2e_reindex_without_wait_names_the_job_to_follow(mesh):
    await fill(mesh, "cli-queued")
    result = await invoke(["reindex", "cli-queued", "--chunk-tokens", "32", "--indexer", mesh.addrs["indexer"]])
    assert result.exit_code == 0, result.output
    job = json.loads(result.stdout)
    assert job["state"] in ("queued", "running", "done") and job["decision"] in (None, "switched")
    assert f"ragmesh jobs show {job['job_id']} --watch" in result.stderr
