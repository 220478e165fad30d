"""What `ragmesh search` and `ragmesh ingest` print, against a real in-process mesh (hash embedder): results
and names are printed as they are, never read as console markup."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_cli.app import app
from typer.testing import CliRunner

pytestmark = pytest.mark.asyncio(loop_scope="session")
ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = ROOT.parent / "shared" / "documents"

TRICKY = "Call [bold]f[/bold] with xs[0] and [link=http://x]here[/link]; never [/] nor [red]"


async def test_search_prints_brackets_in_results_verbatim(mesh_factory):
    mesh = await mesh_factory()
    reply = await mesh.stub("indexer").IngestDocument(
        pb.IngestDocumentRequest(
            document=pb.DocumentInput(collection="markup", doc_id="m1", title="[b]t[/b]", text=TRICKY)
        )
    )
    assert reply.result.chunks == 1
    runner = CliRunner()
    result = await _invoke(runner, ["search", "bold link here", "-c", "markup", "--search", mesh.addrs["search"]])
    assert result.exit_code == 0, result.output
    assert TRICKY in result.stdout
    assert "[b]t[/b]" in result.stdout


async def test_ingest_prints_a_failed_files_name_and_reason_verbatim(mesh_factory, tmp_path):
    mesh = await mesh_factory()
    bad = tmp_path / "[bold]weird[i].pdf"
    pdf = (DOCUMENTS / "test.pdf").read_bytes()
    bad.write_bytes(pdf[: len(pdf) // 2])  # truncated
    binary = tmp_path / "[red]blob[x].dat"
    binary.write_bytes(bytes(range(256)) * 64)
    result = await _invoke(CliRunner(), ["ingest", str(tmp_path), "-c", "markup", "--indexer", mesh.addrs["indexer"]])
    assert result.exit_code == 1
    assert "[bold]weird[i].pdf" in result.stderr
    assert "DOCUMENT_CONVERSION_FAILED" in result.stderr
    assert "skipped [red]blob[x].dat: BINARY" in result.stderr  # never sent: skipped, not failed
    assert "0 indexed, 0 unchanged, 1 failed" in result.stderr


async def _invoke(runner: CliRunner, args: list[str], columns: int = 250):
    """Run the command in a thread: it starts its own event loop (asyncio.run), and the mesh runs on this one."""
    import asyncio

    return await asyncio.to_thread(runner.invoke, app, args, env={"COLUMNS": str(columns)})


async def test_search_names_the_lines_of_a_code_hit_and_fits_80_columns(mesh_factory):
    mesh = await mesh_factory()
    path = "libs/common/ragmesh_common/walk.py"
    source = ROOT / path
    await mesh.stub("indexer").IngestDocument(
        pb.IngestDocumentRequest(
            document=pb.DocumentInput(
                collection="code", file=pb.FileInput(data=source.read_bytes(), filename=source.name, path=path)
            )
        )
    )
    result = await _invoke(
        CliRunner(), ["search", "skip secret files", "-c", "code", "--search", mesh.addrs["search"]], columns=80
    )
    assert result.exit_code == 0, result.output
    assert re.search(re.escape(path) + r":\d+-\d+", result.stdout), result.stdout
    assert max(len(line) for line in result.stdout.splitlines()) <= 80
    assert "…" not in result.stdout.split("\n", 1)[0]  # the head line is whole, not squeezed
