"""`ragmesh golden` (a collection's golden set: judged queries) and `ragmesh eval --collection C` without a
dataset (score the live collection on its golden set through the search service, with the change since the
previous evaluation). Everything is printed without console markup (see console.py)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, cast

from google.protobuf.message import Message
from ragmesh.search.v1 import search_service_pb2 as pb
from ragmesh.search.v1 import search_service_pb2_grpc as pb_grpc
from ragmesh_common import validation
from ragmesh_common.clients import ServiceClient
from rich.table import Table

from . import evaluation
from .console import err, out, print_table
from .conversions import METRICS, MODE_NAMES, MODES, evaluation_json


def search_client(target: str, timeout: float = 60) -> ServiceClient:
    return ServiceClient(
        "search",
        target,
        pb_grpc.SearchServiceStub,
        timeout=timeout,
    )


def golden_queries(
    queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], limit: int = 0
) -> list[pb.GoldenQuery]:
    """The judged queries of a BEIR dataset as golden queries: those with a relevant document (grade > 0), by
    sorted id, at most `limit` (0: all), each with its relevant documents only (a grade of 0 or below counts
    nothing in nDCG, recall or MRR)."""
    ids = sorted(q for q in queries if any(g > 0 for g in qrels.get(q, {}).values()))
    ids = ids[:limit] if limit else ids
    return [
        pb.GoldenQuery(query_id=q, text=queries[q], relevant={d: g for d, g in qrels[q].items() if g > 0}) for q in ids
    ]


def capped(golden: list[pb.GoldenQuery], limit: int) -> list[pb.GoldenQuery]:
    """At most the service's limit of queries; says so on stderr when the dataset has more (and no limit)."""
    if not limit and len(golden) > validation.GOLDEN_MAX_QUERIES:
        err.print(
            f"the dataset has {len(golden)} judged queries; a golden set holds at most "
            f"{validation.GOLDEN_MAX_QUERIES}: keeping the first {validation.GOLDEN_MAX_QUERIES} by id "
            "(--limit-queries to choose fewer)",
            style="yellow",
            soft_wrap=True,
        )
        return golden[: validation.GOLDEN_MAX_QUERIES]
    return golden


def stored(reply: pb.SetGoldenSetResponse) -> str:
    return (
        f"golden set of {reply.collection!r}: {reply.queries} queries, {reply.judgments} judgments "
        f"(id {reply.golden_set_id})"
    )


async def call(search_addr: str, method: str, request: Message, *, timeout: float = 60) -> Any:
    """One call to the search service on a client of its own."""
    client = search_client(search_addr, timeout)
    try:
        return await client.call(method, request)
    finally:
        await client.close()


async def upload(collection: str, dataset_dir: Path, split: str, limit: int, search_addr: str) -> int:
    """`ragmesh golden upload`: a BEIR dataset's queries and qrels as the collection's golden set (its qrels
    name corpus ids, which are the doc_ids `ragmesh eval` ingests the corpus under)."""
    queries, qrels = evaluation.load_judgments(dataset_dir, split)
    golden = capped(golden_queries(queries, qrels, limit), limit)
    if not golden:
        err.print(f"{dataset_dir}: no query has a relevant judgment in qrels/{split}.tsv", style="red", soft_wrap=True)
        return 1
    reply = await call(search_addr, "SetGoldenSet", pb.SetGoldenSetRequest(collection=collection, queries=golden))
    err.print(stored(reply))
    out.print_json(
        json.dumps(
            {
                "collection": reply.collection,
                "queries": reply.queries,
                "judgments": reply.judgments,
                "golden_set_id": reply.golden_set_id,
                "updated_at": reply.updated_at,
            }
        )
    )
    return 0


async def show(collection: str, search_addr: str) -> int:
    """`ragmesh golden show`: the set as JSON on stdout, a summary on stderr."""
    reply = await call(search_addr, "GetGoldenSet", pb.GetGoldenSetRequest(collection=collection))
    err.print(
        f"golden set of {reply.collection!r}: {len(reply.queries)} queries, stored {reply.updated_at} "
        f"(id {reply.golden_set_id})"
    )
    out.print_json(
        json.dumps(
            {
                "collection": reply.collection,
                "updated_at": reply.updated_at,
                "golden_set_id": reply.golden_set_id,
                "queries": [
                    {"query_id": q.query_id, "text": q.text, "relevant": dict(q.relevant)} for q in reply.queries
                ],
            }
        )
    )
    return 0


async def delete(collection: str, search_addr: str) -> int:
    """`ragmesh golden delete`: remove the set (the evaluation history stays)."""
    reply = await call(search_addr, "DeleteGoldenSet", pb.DeleteGoldenSetRequest(collection=collection))
    err.print(f"deleted the golden set of {reply.collection!r} ({reply.deleted_queries} queries)")
    return 0


def parse_modes(names: Sequence[str]) -> list[int]:
    """Mode names -> SearchMode values; ValueError for an unknown one (fusion variants are `ragmesh eval
    DATASET`'s: a collection is scored with its own fusion)."""
    unknown = [n for n in names if n not in MODES]
    if unknown:
        raise ValueError(
            f"unknown mode {unknown[0]!r}: use one of {', '.join(MODES)} (a collection is scored with "
            "its own fusion; hybrid:<fusion> is for `ragmesh eval DATASET`)"
        )
    return [MODES[n] for n in dict.fromkeys(names)]


async def evaluate(collection: str, modes: Sequence[str], json_path: Path | None, search_addr: str) -> int:
    """`ragmesh eval --collection C`: score the collection on its golden set (each mode; default: the service's
    default mode), print a table with the change since each mode's previous evaluation (stderr) and JSON
    (stdout, or `json_path`)."""
    values = parse_modes(modes)
    client = search_client(search_addr, timeout=3600)
    try:
        reply = await client.call(
            # protoc's .pyi types an enum field as its enum class; EnumTypeWrapper.items() (types-protobuf) gives ints.
            "EvaluateCollection",
            pb.EvaluateCollectionRequest(collection=collection, modes=cast("list[pb.SearchMode]", values)),
        )
        previous: dict[int, pb.Evaluation | None] = {}
        for e in reply.evaluations:
            history = await client.call(
                "ListEvaluations", pb.ListEvaluationsRequest(collection=collection, mode=e.mode, limit=2)
            )
            earlier = history.evaluations[:-1]
            previous[e.mode] = earlier[-1] if earlier else None
    finally:
        await client.close()

    table = Table(
        title=f"{collection or 'default'}: golden set, {reply.evaluations[0].queries} queries"
        if reply.evaluations
        else collection
    )
    table.add_column("mode", no_wrap=True)
    for _, label in METRICS:
        table.add_column(label, justify="right")
    for column in ("documents", "took ms"):
        table.add_column(column, justify="right")
    results = []
    for e in reply.evaluations:
        before = previous[e.mode]
        cells = []
        for name, _ in METRICS:
            value = getattr(e, name)
            cells.append(f"{value:.3f}" + (f" ({value - getattr(before, name):+.3f})" if before else ""))
        table.add_row(MODE_NAMES.get(e.mode, "?"), *cells, str(e.documents), f"{e.took_ms:.0f}")
        entry = evaluation_json(e)
        entry["previous"] = evaluation_json(before) if before else None
        results.append(entry)
    print_table(err, table)
    for e, entry in zip(reply.evaluations, results, strict=True):
        before = previous[e.mode]
        if before is None:
            err.print(f"{entry['mode']}: first evaluation, nothing to compare with yet")
            continue
        changes = ", ".join(
            f"{label} {getattr(e, name):.3f} ({getattr(e, name) - getattr(before, name):+.3f})"
            for name, label in METRICS
        )
        err.print(f"{entry['mode']}: {changes} since {before.evaluated_at}", soft_wrap=True)
        if before.golden_set_id != e.golden_set_id:
            err.print(
                f"{entry['mode']}: the golden set changed since the previous evaluation "
                f"({before.golden_set_id} -> {e.golden_set_id}): the change is not like for like",
                style="yellow",
                soft_wrap=True,
            )
    document = json.dumps({"collection": collection or "default", "evaluations": results}, indent=2)
    if json_path:
        await asyncio.to_thread(json_path.write_text, document + "\n", encoding="utf-8")
    else:
        out.print_json(document)
    return 0
