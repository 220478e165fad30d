"""`ragmesh index`, `ragmesh jobs` and `ragmesh sync` against a real in-process mesh (hash embedder): jobs
run to the end with a summary table, skipped and failed files are named verbatim (no console markup), and a
re-sync of an unchanged folder writes nothing."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
import pytest_asyncio
from ragmesh_cli.app import app
from typer.testing import CliRunner

pytestmark = pytest.mark.asyncio(loop_scope="session")
PDF = Path(__file__).resolve().parents[3] / "shared" / "documents" / "test.pdf"


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def roots(tmp_path_factory):
    return tmp_path_factory.mktemp("cli-roots")


@pytest_asyncio.fixture(scope="module", loop_scope="session")
async def mesh(mesh_factory, roots):
    return await mesh_factory(indexer={"roots": (roots,)})


async def invoke(args: list[str]):
    return await asyncio.to_thread(CliRunner().invoke, app, args, env={"COLUMNS": "250"})


def row(stdout: str, job_prefix: str = "") -> list[str]:
    """The cells of the summary table's (first) job row."""
    for line in stdout.splitlines():
        cells = [c.strip() for c in re.split(r"[│┃|]", line) if c.strip()]
        if cells and re.fullmatch(r"[0-9a-f]{32}", cells[0]) and cells[0].startswith(job_prefix):
            return cells
    raise AssertionError(f"no job row in:\n{stdout}")


async def test_index_then_resync_then_jobs(mesh, roots):
    folder = roots / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("def main():\n    return 42\n")
    (folder / "README.md").write_text("# Project\n\nHello.\n")
    (folder / ".env").write_text("TOKEN=1\n")
    pdf = PDF.read_bytes()
    (folder / "[bold]broken[i].pdf").write_bytes(pdf[: len(pdf) // 2])
    indexer = ["--indexer", mesh.addrs["indexer"]]

    first = await invoke(["index", str(folder), "-c", "cli-jobs", "--prune", *indexer])
    assert first.exit_code == 1, first.output  # one file failed
    cells = row(first.stdout)
    # job, collection, state, total, indexed, unchanged, failed, skipped, deleted, ...
    assert cells[1:9] == ["cli-jobs", "done", "3", "2", "0", "1", "1", "0"]
    assert "✗ [bold]broken[i].pdf: DOCUMENT_CONVERSION_FAILED" in first.stderr
    assert "skipped .env: SECRET" in first.stderr

    (folder / "[bold]broken[i].pdf").unlink()
    again = await invoke(["index", str(folder), "-c", "cli-jobs", "--prune", *indexer])
    assert again.exit_code == 0, again.output
    assert row(again.stdout)[1:9] == ["cli-jobs", "done", "2", "0", "2", "0", "1", "0"]

    listed = await invoke(["jobs", *indexer])
    assert listed.exit_code == 0 and row(listed.stdout)[0] == row(again.stdout)[0]
    shown = await invoke(["jobs", *indexer, "show", row(first.stdout)[0]])
    assert shown.exit_code == 0 and row(shown.stdout)[1:3] == ["cli-jobs", "done"]
    assert "✗ [bold]broken[i].pdf: DOCUMENT_CONVERSION_FAILED" in shown.stderr

    synced = await invoke(["sync", "-c", "cli-jobs", *indexer])
    assert synced.exit_code == 0, synced.output
    assert row(synced.stdout)[1:7] == ["cli-jobs", "done", "2", "0", "2", "0"]

    expired = await invoke(["sync", "-c", "cli-jobs", "--expired", *indexer])
    assert expired.exit_code == 0 and "expired in cli-jobs" in expired.stdout


async def test_jobs_show_and_cancel_unknown_job_fail_with_the_reason(mesh):
    result = await invoke(["jobs", "--indexer", mesh.addrs["indexer"], "show", "nope"])
    assert result.exit_code == 1 and "JOB_NOT_FOUND" in result.stderr
