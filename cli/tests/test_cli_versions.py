"""`ragmesh reindex` and `ragmesh rollback`: what the CLI refuses itself (out-of-range options, an overlap of half
the chunk or more) without calling anything, and the indexer's refusals printed with their reason, against a real
in-process mesh. The runs themselves (switched, rejected with both scores, rollback) are in
test_cli_versions_e2e.py."""

from __future__ import annotations

import asyncio

import pytest
import pytest_asyncio
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_cli.app import app
from typer.testing import CliRunner

pytestmark = pytest.mark.asyncio(loop_scope="session")
# Nothing listens here: a command refused before it calls the indexer never notices.
NOWHERE = "127.0.0.1:1"


async def invoke(args: list[str]):
    return await asyncio.to_thread(CliRunner().invoke, app, args, env={"COLUMNS": "250"})


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory):
    mesh = await mesh_factory()
    await mesh.stub("indexer").IngestDocument(
        pb.IngestDocumentRequest(
            document=pb.DocumentInput(collection="cli-kb", doc_id="tides", text="The tide follows the moon.")
        )
    )
    return mesh


@pytest.mark.parametrize(
    ("options", "complaint"),
    [
        (["--chunk-tokens", "15"], "--chunk-tokens"),
        (["--chunk-tokens", "8193"], "--chunk-tokens"),
        (["--chunk-overlap-tokens", "-1"], "--chunk-overlap-tokens"),
        (["--chunk-tokens", "64", "--chunk-overlap-tokens", "32"], "less than half of --chunk-tokens (64)"),
        (["--chunk-tokens", "17", "--chunk-overlap-tokens", "8"], "less than half of --chunk-tokens (17)"),
        (["--tolerance", "1.5"], "--tolerance"),
        (["--tolerance", "-0.1"], "--tolerance"),
        (["--retention", "-1"], "--retention"),
        (["--retention", str(365 * 24 * 3600 + 1)], "--retention"),
        (["--chunk-tokens", "many"], "--chunk-tokens"),
    ],
    ids=[
        "tokens-15",
        "tokens-8193",
        "overlap-negative",
        "overlap-half",
        "overlap-half-odd",
        "tolerance-above-1",
        "tolerance-negative",
        "retention-negative",
        "retention-over-a-year",
        "tokens-text",
    ],
)
async def test_reindex_refuses_out_of_range_options_before_calling_the_indexer(options, complaint):
    result = await invoke(["reindex", "kb", *options, "--indexer", NOWHERE])
    assert result.exit_code == 2, result.output
    assert complaint in result.output and "UNAVAILABLE" not in result.output


async def test_the_indexers_refusals_are_printed_with_their_reason(mesh):
    indexer = ["--indexer", mesh.addrs["indexer"]]
    for args, reason in (
        (["reindex", "nowhere"], "NOT_FOUND COLLECTION_NOT_FOUND"),
        (["reindex", "Bad Name"], "INVALID_ARGUMENT COLLECTION_NAME_INVALID"),
        (["rollback", "nowhere"], "NOT_FOUND COLLECTION_NOT_FOUND"),
        (["rollback", "cli-kb"], "FAILED_PRECONDITION NO_PREVIOUS_VERSION"),
        (["reindex", "cli-kb", "--chunk-overlap-tokens", "4000"], "INVALID_ARGUMENT CHUNK_OVERLAP_OUT_OF_RANGE"),
    ):
        result = await invoke([*args, *indexer])
        assert result.exit_code == 1, result.output
        assert f"ragmesh: {reason}" in result.stderr, result.stderr
        assert result.stdout == ""


async def test_an_unreachable_indexer_is_one_line_and_exit_1():
    result = await invoke(["rollback", "kb", "--indexer", NOWHERE])
    assert result.exit_code == 1 and result.stderr.startswith("ragmesh: UNAVAILABLE")
