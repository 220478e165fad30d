"""The `ragmesh` command: start the mesh, serve services, ingest files, search."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .config import ConfigError, default_addr
from .errors import RagmeshError

app = typer.Typer(help="ragmesh: a RAG platform as a gRPC microservices mesh.", no_args_is_help=True,
                  pretty_exceptions_enable=False)
console = Console(stderr=True)
out = Console()

# Documents per IngestDocuments call, and the most bytes one call may carry.
_BATCH_DOCS = 16
_BATCH_BYTES = 16 * 1024 * 1024


def _setup_logging(service: str) -> None:
    from .logs import setup_logging

    setup_logging(service, os.environ.get("RAGMESH_LOG_LEVEL", "INFO").upper())


def _run(coro) -> None:
    try:
        asyncio.run(coro)
    except ConfigError as exc:
        console.print(f"[red]ragmesh: {exc.code}[/red]")
        raise typer.Exit(2) from None
    except RagmeshError as exc:
        console.print(f"[red]ragmesh: {exc.code.name} {exc.reason}: {exc.message}[/red]")
        raise typer.Exit(1) from None


@app.command()
def up() -> None:
    """Start the whole mesh in this process: the four gRPC services, each on its own loopback port, and the
    gateway on RAGMESH_HTTP_PORT (default 8000), with the embedded store under RAGMESH_DATA_DIR."""
    from . import mesh

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    _setup_logging("ragmesh")
    _run(mesh.run(mesh.ALL, local=True))


@app.command()
def serve(
    services: Annotated[list[str], typer.Argument(help="converter, embedder, indexer, search and/or gateway")],
) -> None:
    """Serve one or more services in this process (one per pod on Kubernetes)."""
    from . import mesh

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        names = mesh.validate_names(services)
    except ConfigError as exc:
        console.print(f"[red]ragmesh: {exc.code}[/red]")
        raise typer.Exit(2) from None
    _setup_logging("+".join(names))
    _run(mesh.run(names, local=False))


@app.command()
def mcp() -> None:
    """Serve the MCP tools over stdio (for Claude Desktop and IDEs) against a running mesh (RAGMESH_*_ADDR;
    RAGMESH_MCP_READ_ONLY, RAGMESH_MCP_ROOTS). Logs go to stderr; stdout carries only the protocol."""
    from ragmesh_gateway.config import GatewaySettings
    from ragmesh_gateway.mcp_server import serve_stdio

    from .config import load

    _setup_logging("ragmesh-mcp")
    _run(serve_stdio(load(GatewaySettings)))


def _walk(paths: list[Path]) -> Iterator[Path]:
    for path in paths:
        if path.is_dir():
            for child in sorted(path.rglob("*")):
                if child.is_file() and not any(p.startswith(".") for p in child.relative_to(path).parts):
                    yield child
        elif path.is_file():
            yield path
        else:
            raise typer.BadParameter(f"{path} is not a file or folder", param_hint="PATH")


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files and folders to ingest (folders recursively).")],
    collection: Annotated[str, typer.Option("--collection", "-c", help="Target collection.")] = "default",
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
) -> None:
    """Ingest files and folders through the indexer, with a progress bar. Exits 1 if any file failed."""
    files = list(_walk(paths))
    if not files:
        console.print("nothing to ingest")
        raise typer.Exit(0)
    failed = asyncio.run(_ingest(files, collection, indexer)) if files else 0
    raise typer.Exit(1 if failed else 0)


async def _ingest(files: list[Path], collection: str, target: str) -> int:
    from ragmesh.indexer.v1 import indexer_service_pb2 as pb
    from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc

    from .clients import ServiceClient

    client = ServiceClient("indexer", target, pb_grpc.IndexerServiceStub, timeout=3600)
    failed = indexed = unchanged = 0
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("ingesting", total=len(files))
            for batch in _batches(files):
                docs = [
                    pb.DocumentInput(
                        collection=collection,
                        file=pb.FileInput(data=f.read_bytes(), filename=f.name, path=str(f.resolve())),
                    )
                    for f in batch
                ]
                try:
                    async for event in client.stream("IngestDocuments", pb.IngestDocumentsRequest(documents=docs)):
                        name = batch[event.index]
                        if event.result.status == pb.INGEST_STATUS_FAILED:
                            failed += 1
                            progress.console.print(f"[red]✗ {name}: {event.error.reason}: {event.error.message}")
                        elif event.result.status == pb.INGEST_STATUS_UNCHANGED:
                            unchanged += 1
                        else:
                            indexed += 1
                        progress.advance(task)
                except RagmeshError as exc:
                    console.print(f"[red]ragmesh: {exc.code.name} {exc.reason}: {exc.message}[/red]")
                    return len(files)
    finally:
        await client.close()
    console.print(f"{indexed} indexed, {unchanged} unchanged, {failed} failed → collection {collection!r}")
    return failed


def _batches(files: list[Path]) -> Iterator[list[Path]]:
    batch: list[Path] = []
    size = 0
    for f in files:
        n = f.stat().st_size
        if batch and (len(batch) >= _BATCH_DOCS or size + n > _BATCH_BYTES):
            yield batch
            batch, size = [], 0
        batch.append(f)
        size += n
    if batch:
        yield batch


@app.command()
def search(
    query: Annotated[str, typer.Argument(help="What to look for.")],
    collection: Annotated[list[str], typer.Option("--collection", "-c", help="Collection(s).")] = ["default"],  # noqa: B006
    mode: Annotated[str, typer.Option(help="hybrid, dense, sparse, semantic or keyword.")] = "hybrid",
    top_k: Annotated[int, typer.Option("--top-k", "-k", help="How many results (1..100).")] = 5,
    search_addr: Annotated[str, typer.Option("--search", envvar="RAGMESH_SEARCH_ADDR", help="Search address.")] = (
        default_addr("search")
    ),
) -> None:
    """Search and print the best chunks."""
    asyncio.run(_search(query, collection, mode, top_k, search_addr))


async def _search(query: str, collections: list[str], mode: str, top_k: int, target: str) -> None:
    from ragmesh.search.v1 import search_service_pb2 as pb
    from ragmesh.search.v1 import search_service_pb2_grpc as pb_grpc

    from .clients import ServiceClient

    modes = {name.removeprefix("SEARCH_MODE_").lower(): value for name, value in pb.SearchMode.items() if value}
    if mode not in modes:
        raise typer.BadParameter(f"mode must be one of {', '.join(modes)}", param_hint="--mode")
    client = ServiceClient("search", target, pb_grpc.SearchServiceStub, timeout=30, idempotent=("Search",))
    try:
        reply = await client.call(
            "Search", pb.SearchRequest(query=query, collections=collections, top_k=top_k, mode=modes[mode])
        )
    except RagmeshError as exc:
        console.print(f"[red]ragmesh: {exc.code.name} {exc.reason}: {exc.message}[/red]")
        raise typer.Exit(1) from None
    finally:
        await client.close()
    table = Table("score", "document", "chunk", "text", show_lines=True)
    for r in reply.results:
        table.add_row(f"{r.score:.3f}", r.title or r.doc_id, str(r.chunk_index), r.text[:300])
    out.print(table)


@app.command("eval")
def eval_(
    dataset: Annotated[Path, typer.Argument(help="BEIR dataset folder: corpus.jsonl, queries.jsonl, qrels/test.tsv.")],
    mode: Annotated[list[str], typer.Option("--mode", "-m", help=(
        "Mode(s) to evaluate: dense, sparse, hybrid, semantic, keyword, optionally with a fusion "
        "(hybrid:relative_score, hybrid:rrf, hybrid:dbsf). Default: all of them."))] = [],  # noqa: B006
    collection: Annotated[str, typer.Option("--collection", "-c", help=(
        "The collection to ingest into and search (default: eval-<dataset folder name>)."))] = "",
    reuse: Annotated[bool, typer.Option(help="Skip ingestion when the collection already holds the corpus.")] = True,
    limit_queries: Annotated[int, typer.Option(min=0, help="Evaluate only the first N judged queries (0: all).")] = 0,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON here.")] = None,
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
    search_addr: Annotated[str, typer.Option("--search", envvar="RAGMESH_SEARCH_ADDR", help="Search address.")] = (
        default_addr("search")
    ),
) -> None:
    """Measure retrieval quality on a BEIR dataset through the running mesh: nDCG@10, recall@10/100, MRR@10 and
    latency per mode, as a table (and JSON on stdout, or in --json)."""
    from . import eval_cli

    _run(eval_cli.run(dataset, mode, collection, reuse, limit_queries, json_path, indexer, search_addr))


def main() -> None:
    app()
