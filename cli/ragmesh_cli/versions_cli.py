"""`ragmesh reindex` and `ragmesh rollback`: a collection rebuilt into a new version (another chunking and/or
embedding model) as a job on the indexer, switched to only when the golden-set gate allows; and the switch back
to the version kept before. People read stderr (progress, the gate's decision); stdout carries JSON for
scripts. Everything is printed without console markup (see console.py)."""

from __future__ import annotations

import json

from ragmesh.indexer.v1 import indexer_service_pb2 as pb

from .console import err, out
from .conversions import reindex_json, rollback_json
from .indexer_jobs import describe, follow, indexer_client


def exit_code(job: pb.Job) -> int:
    """0 when the collection now uses the new version (or, not waited for, the job was queued); else 1."""
    return 1 if job.state in (pb.JOB_STATE_REJECTED, pb.JOB_STATE_FAILED, pb.JOB_STATE_CANCELLED) else 0


async def reindex(
    target: str,
    collection: str,
    *,
    chunk_tokens: int | None,
    chunk_overlap_tokens: int | None,
    model: str,
    tolerance: float | None,
    force: bool,
    retention: int | None,
    wait: bool,
) -> int:
    """Queue the re-index; with `wait`, follow it to its end and print the gate's decision with both scores.
    Exits 1 when the job ends rejected, failed or cancelled."""
    client = indexer_client(target)
    try:
        request = pb.ReindexCollectionRequest(
            collection=collection,
            chunk_tokens=chunk_tokens,
            chunk_overlap_tokens=chunk_overlap_tokens,
            model=model,
            tolerance=tolerance,
            force=force,
            retention_seconds=retention,
        )
        job = (await client.call("ReindexCollection", request)).job
        r, s = job.reindex, job.reindex.settings
        err.print(
            f"re-indexing {job.collection!r} from version {r.from_version} into version {r.to_version} "
            f"(model {s.model or s.model_id or 'default'}, {s.chunk_tokens} tokens per chunk, overlap "
            f"{s.chunk_overlap_tokens}) as job {job.job_id}",
            soft_wrap=True,
        )
        if wait:
            (job,) = await follow(client, [job])
    finally:
        await client.close()
    if wait:
        describe(job)
    else:
        err.print(f"follow it with: ragmesh jobs show {job.job_id} --watch", soft_wrap=True)
    out.print_json(json.dumps(reindex_json(job)))
    return exit_code(job) if wait else 0


async def rollback(target: str, collection: str) -> int:
    """Switch the collection back to its previous version."""
    client = indexer_client(target)
    try:
        reply = await client.call("RollbackCollection", pb.RollbackCollectionRequest(collection=collection))
    finally:
        await client.close()
    err.print(
        f"{reply.collection}: searches use version {reply.version} again; version {reply.replaced_version} "
        "is kept for a rollback until its retention passes",
        soft_wrap=True,
    )
    out.print_json(json.dumps(rollback_json(reply)))
    return 0
