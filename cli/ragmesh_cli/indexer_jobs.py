"""The indexer's jobs as the CLI follows and tells them: the client, the state names, live progress bars
(`follow`) and a re-index job's decision (`describe`). Shared by `ragmesh index`/`jobs`/`sync` (jobs_cli.py) and
`ragmesh reindex`/`rollback` (versions_cli.py). Everything is printed without console markup (see console.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from ragmesh.indexer.v1 import indexer_service_pb2 as pb
from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc
from ragmesh_common.clients import ServiceClient
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from .console import err
from .conversions import METRICS, STATE_NAMES

FINAL = (pb.JOB_STATE_DONE, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED, pb.JOB_STATE_REJECTED)
POLL_SECONDS = 0.5

DECISIONS = {
    "switched": "switched: the new version is not worse on the golden set",
    "rejected": "rejected: the new version is worse on the golden set by more than the tolerance; the collection "
    "keeps the current version",
    "forced": "forced: switched past the gate",
    "no_golden_set": "switched without a gate: the collection has no golden set",
}


def indexer_client(target: str) -> ServiceClient:
    return ServiceClient(
        "indexer",
        target,
        pb_grpc.IndexerServiceStub,
        timeout=600,
    )


def handled(job: pb.Job) -> int:
    return job.indexed + job.unchanged + job.failed


async def follow(client: ServiceClient, jobs: Sequence[pb.Job], *, watch: bool = True) -> list[pb.Job]:
    """Live progress bars (stderr) until every job is finished; returns the finished jobs."""
    current = {job.job_id: job for job in jobs}
    if not watch:
        return list(current.values())
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[state]}"),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=False) as progress:
        tasks = {
            job_id: progress.add_task(
                f"{job.kind} {job.source}"[:60], total=max(job.total, 1), state=STATE_NAMES.get(job.state, "?")
            )
            for job_id, job in current.items()
        }
        while True:
            for job_id, job in current.items():
                progress.update(
                    tasks[job_id],
                    completed=handled(job) if job.total else 1 if job.state in FINAL else 0,
                    state=f"{STATE_NAMES.get(job.state, '?')} · {job.failed} failed",
                )
            pending = [job_id for job_id, job in current.items() if job.state not in FINAL]
            if not pending:
                return list(current.values())
            await asyncio.sleep(POLL_SECONDS)
            for job_id in pending:
                current[job_id] = (await client.call("GetJob", pb.GetJobRequest(job_id=job_id))).job


def describe(job: pb.Job) -> None:
    """The gate's decision and both versions' scores, on stderr."""
    r = job.reindex
    state = STATE_NAMES.get(job.state, "?")
    style = "red" if job.state in (pb.JOB_STATE_REJECTED, pb.JOB_STATE_FAILED) else None
    if job.state == pb.JOB_STATE_FAILED:
        err.print(
            f"re-index of {job.collection!r} into version {r.to_version} failed: {job.error}",
            style=style,
            soft_wrap=True,
        )
    elif job.state == pb.JOB_STATE_CANCELLED:
        err.print(
            f"re-index of {job.collection!r} into version {r.to_version} was cancelled; the collection keeps "
            f"version {r.from_version}",
            soft_wrap=True,
        )
    else:
        now = r.from_version if job.state == pb.JOB_STATE_REJECTED else r.to_version
        err.print(
            f"{job.collection}: {DECISIONS.get(r.decision, r.decision or state)} (version {r.from_version} -> "
            f"{r.to_version}, tolerance {r.tolerance:g}); searches use version {now}",
            style=style,
            soft_wrap=True,
        )
    for label, e, version in (("current", r.current, r.from_version), ("candidate", r.candidate, r.to_version)):
        if r.HasField(label):
            scores = ", ".join(f"{name} {getattr(e, key):.3f}" for key, name in METRICS)
            err.print(f"  {label} (version {e.version or version}): {scores} over {e.queries} queries", soft_wrap=True)
