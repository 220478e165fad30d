"""The terminal side of `ragmesh eval`: progress bar, results table and JSON (metrics in `evaluation`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from pathlib import Path

import typer
from ragmesh_common.clients import ServiceClient
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import evaluation, golden_cli
from .console import err as console
from .console import out, print_table


async def run(
    datasets: Path | Sequence[Path],
    modes: list[str],
    collection: str,
    reuse: bool,
    limit_queries: int,
    json_path: Path | None,
    indexer_addr: str,
    search_addr: str,
    *,
    save_golden: bool = False,
) -> None:
    """Measure every dataset (tables on stderr), then the summary line; JSON of all of it on stdout or in
    `json_path`. With `save_golden`, each dataset's judged queries (those measured) become its collection's
    golden set, so `ragmesh eval --collection C` can score the collection again later without the dataset."""
    from ragmesh.indexer.v1 import indexer_service_pb2_grpc as indexer_grpc
    from ragmesh.search.v1 import search_service_pb2 as search_pb
    from ragmesh.search.v1 import search_service_pb2_grpc as search_grpc

    dataset_dirs = [datasets] if isinstance(datasets, Path) else list(datasets)
    try:
        specs = [evaluation.SearchSpec.parse(m) for m in (modes or evaluation.DEFAULT_SPECS)]
        loaded = [evaluation.load_dataset(d) for d in dataset_dirs]
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None
    indexer = ServiceClient("indexer", indexer_addr, indexer_grpc.IndexerServiceStub, timeout=3600)
    search = ServiceClient("search", search_addr, search_grpc.SearchServiceStub, timeout=60)
    results, comparisons = [], []
    try:
        for dataset_dir, dataset in zip(dataset_dirs, loaded, strict=True):
            name = collection or "eval-" + "".join(c if c.isalnum() else "-" for c in dataset_dir.name.lower())[:58]
            scores = await _evaluate(dataset_dir, dataset, specs, name, reuse, limit_queries, indexer, search)
            if save_golden:
                golden = golden_cli.capped(
                    golden_cli.golden_queries(dataset.queries, dataset.qrels, limit_queries), limit_queries
                )
                request = search_pb.SetGoldenSetRequest(collection=name, queries=golden)
                console.print(golden_cli.stored(await search.call("SetGoldenSet", request)))
            results.append(evaluation.results_json(dataset_dir, name, scores))
            comparisons.append(evaluation.compare(scores))
    finally:
        await indexer.close()
        await search.close()
    if len(dataset_dirs) > 1:
        console.print(evaluation.summary_line(comparisons))
    document = json.dumps(results[0] if len(results) == 1 else evaluation.summary_json(results), indent=2)
    if json_path:
        await asyncio.to_thread(json_path.write_text, document + "\n", encoding="utf-8")
    else:
        out.print_json(document)


async def _evaluate(
    dataset_dir: Path,
    dataset: evaluation.Dataset,
    specs: list[evaluation.SearchSpec],
    collection: str,
    reuse: bool,
    limit_queries: int,
    indexer: ServiceClient,
    search: ServiceClient,
) -> list[evaluation.ModeScores]:
    """Ingest (unless reused) and run every mode on one dataset; print its table and the default's per-query
    comparison with the better single mode."""
    query_ids = dataset.judged_queries(limit_queries or None)
    console.print(
        f"{dataset_dir}: {len(dataset.corpus)} documents, {len(query_ids)} judged queries "
        f"(of {len(dataset.queries)}) → collection {collection!r}"
    )
    held = await evaluation.collection_documents(search, collection)
    if reuse and held == len(dataset.corpus):
        console.print(f"reusing {collection!r} ({held} documents)")
    else:
        columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("ingesting", total=len(dataset.corpus))
            failed = await evaluation.ingest_corpus(dataset, collection, indexer, lambda n: progress.advance(task, n))
        if failed:
            console.print(f"{failed} documents failed to ingest", style="yellow")
    scores = [await evaluation.run_queries(dataset, query_ids, spec, collection, search) for spec in specs]

    table = Table(title=f"{dataset_dir.name}: {len(query_ids)} queries")
    table.add_column("mode", no_wrap=True, min_width=max(len(s.name) for s in specs))
    for column in ("nDCG@10", "recall@10", "recall@100", "MRR@10", "nDCG@10 (retrieved)", "p50 ms", "p95 ms"):
        table.add_column(column, justify="right")
    for s in scores:
        table.add_row(
            s.mode,
            f"{s.ndcg_at_10:.3f}",
            f"{s.recall_at_10:.3f}",
            f"{s.recall_at_100:.3f}",
            f"{s.mrr_at_10:.3f}",
            f"{s.ndcg_at_10_retrieved:.3f}",
            f"{s.latency_p50_ms:.1f}",
            f"{s.latency_p95_ms:.1f}",
        )
    print_table(console, table)
    if (comparison := evaluation.compare(scores)) is not None:
        console.print(comparison.line())
    return scores
