"""Tables for people fit the terminal: as a table when it fits, else one record per row, never `col…`."""

from __future__ import annotations

import io

from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh_cli import jobs_cli
from ragmesh_cli.console import print_table
from rich.console import Console
from rich.table import Table


def console(width: int) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=width, markup=False, color_system=None), buffer


def jobs() -> list[pb.Job]:
    return [
        pb.Job(
            job_id="0c9f3a51e2d84b7c",
            collection="python-click",
            state=pb.JOB_STATE_DONE,
            total=158,
            indexed=150,
            unchanged=6,
            failed=2,
            skipped=11,
            deleted=3,
            bytes=1_234_567,
            documents_per_second=41.3,
            bytes_per_second=321_000,
        )
    ]


def test_the_job_summary_at_80_columns_is_a_record_with_every_value_whole(monkeypatch):
    narrow, buffer = console(80)
    monkeypatch.setattr(jobs_cli, "out", narrow)
    jobs_cli.summary(jobs(), details=False)
    text = buffer.getvalue()
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "…" not in text
    for pair in ("collection: python-click", "state: done", "total: 158", "indexed: 150", "unchanged: 6"):
        assert pair in text, (pair, text)
    assert "job 0c9f3a51e2d84b7c" in text


def test_a_table_that_fits_stays_a_table():
    wide, buffer = console(200)
    table = Table("job", "state", "total", title="jobs")
    table.add_row("j1", "running", "3")
    print_table(wide, table)
    lines = buffer.getvalue().splitlines()
    assert any("job" in line and "state" in line and "total" in line for line in lines)  # one header row
    assert any("j1" in line and "running" in line for line in lines)
