"""The terminal side of `ragmesh eval`: progress bar, results table and JSON (metrics in `evaluation`)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import evaluation
from .clients import ServiceClient

console = Console(stderr=True)
out = Console()


async def run(dataset_dir: Path, modes: list[str], collection: str, reuse: bool, limit_queries: int,
              json_path: Path | None, indexer_addr: str, search_addr: str) -> None:
    from ragmesh.indexer.v1 import indexer_service_pb2_grpc as indexer_grpc
    from ragmesh.search.v1 import search_service_pb2_grpc as search_grpc

    try:
        specs = [evaluation.SearchSpec.parse(m) for m in (modes or evaluation.DEFAULT_SPECS)]
        dataset = evaluation.load_dataset(dataset_dir)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    collection = collection or "eval-" + "".join(c if c.isalnum() else "-" for c in dataset_dir.name.lower())[:58]
    query_ids = dataset.judged_queries(limit_queries or None)
    console.print(f"{dataset_dir}: {len(dataset.corpus)} documents, {len(query_ids)} judged queries "
                  f"(of {len(dataset.queries)}) → collection {collection!r}")
    indexer = ServiceClient("indexer", indexer_addr, indexer_grpc.IndexerServiceStub, timeout=3600)
    search = ServiceClient("search", search_addr, search_grpc.SearchServiceStub, timeout=60,
                           idempotent=("Search", "ListCollections"))
    try:
        held = await evaluation.collection_documents(search, collection)
        if reuse and held == len(dataset.corpus):
            console.print(f"reusing {collection!r} ({held} documents)")
        else:
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            with Progress(*columns, console=console) as progress:
                task = progress.add_task("ingesting", total=len(dataset.corpus))
                failed = await evaluation.ingest_corpus(dataset, collection, indexer,
                                                        lambda n: progress.advance(task, n))
            if failed:
                console.print(f"[yellow]{failed} documents failed to ingest[/yellow]")
        scores = [await evaluation.run_queries(dataset, query_ids, spec, collection, search) for spec in specs]
    finally:
        await indexer.close()
        await search.close()

    table = Table(title=f"{dataset_dir.name}: {len(query_ids)} queries")
    table.add_column("mode", no_wrap=True, min_width=max(len(s.name) for s in specs))
    for column in ("nDCG@10", "recall@10", "recall@100", "MRR@10", "p50 ms", "p95 ms"):
        table.add_column(column, justify="right")
    for s in scores:
        table.add_row(s.mode, f"{s.ndcg_at_10:.3f}", f"{s.recall_at_10:.3f}", f"{s.recall_at_100:.3f}",
                      f"{s.mrr_at_10:.3f}", f"{s.latency_p50_ms:.1f}", f"{s.latency_p95_ms:.1f}")
    console.print(table)
    document = json.dumps(evaluation.results_json(dataset_dir, collection, scores), indent=2)
    if json_path:
        await asyncio.to_thread(json_path.write_text, document + "\n", encoding="utf-8")
    else:
        out.print_json(document)
