"""The `ragmesh` command: start the mesh, serve services, ingest files, search, chat."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Annotated, Any, cast

import typer
from ragmesh_common.config import ConfigError, default_addr
from ragmesh_common.errors import RagmeshError
from rich.padding import Padding
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from .console import err as console
from .console import out

app = typer.Typer(
    help="ragmesh: a RAG platform as a gRPC microservices mesh.", no_args_is_help=True, pretty_exceptions_enable=False
)

_GRAPH_OPTION = typer.Option("--graph-addr", envvar="RAGMESH_GRAPH_ADDR", help="Graph address.")

# Documents per IngestDocuments call, and the most bytes one call may carry.
_BATCH_DOCS = 16
_BATCH_BYTES = 16 * 1024 * 1024
# How long `ragmesh ingest` keeps re-sending documents the mesh refused as busy (RESOURCE_EXHAUSTED).
_BUSY_RETRY_SECONDS = 300.0


def _setup_logging(service: str, *, stderr: bool = False) -> None:
    from ragmesh_common.logs import setup_logging

    setup_logging(service, os.environ.get("RAGMESH_LOG_LEVEL", "INFO").upper(), sys.stderr if stderr else None)


def _run(coro: Coroutine[Any, Any, object], *, serving: bool = False) -> None:
    """Run a command's coroutine; `serving` (up, serve): on the event loop RAGMESH_EVENT_LOOP names."""
    try:
        if serving:
            from ragmesh_common.loop import run

            run(coro)
        else:
            asyncio.run(coro)
    except ConfigError as exc:
        # Not wrapped at the terminal's width: one line per problem, whole, for people and for grep.
        console.print(f"ragmesh: {exc.code}", style="red", soft_wrap=True)
        raise typer.Exit(2) from None
    except RagmeshError as exc:
        console.print(f"ragmesh: {exc.code.name} {exc.reason}: {exc.message}", style="red", soft_wrap=True)
        raise typer.Exit(1) from None


def _run_code(coro: Coroutine[Any, Any, int]) -> int:
    """Run a command's coroutine; its int is the exit code (errors print and exit as in `_run`)."""
    code = 0

    async def wrapped() -> None:
        nonlocal code
        code = await coro

    _run(wrapped())
    return code


@app.command()
def up() -> None:
    """Start the whole mesh in this process: the five gRPC services (and the graph service when
    RAGMESH_GRAPH_ENABLED=true), each on its own loopback port, and the gateway on RAGMESH_HTTP_PORT (default
    8000), with the embedded store under RAGMESH_DATA_DIR."""
    from . import mesh

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    # `ragmesh index` works on the folder `up` was started in (and below it) unless told otherwise.
    os.environ.setdefault("RAGMESH_INDEXER_ROOTS", os.getcwd())
    _setup_logging("ragmesh")
    _run(mesh.run(mesh.up_services(), local=True), serving=True)


@app.command()
def serve(
    services: Annotated[
        list[str], typer.Argument(help="converter, embedder, indexer, search, answer, graph and/or gateway")
    ],
) -> None:
    """Serve one or more services in this process (one per pod on Kubernetes)."""
    from . import mesh

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        names = mesh.validate_names(services)
    except ConfigError as exc:
        console.print(f"ragmesh: {exc.code}", style="red", soft_wrap=True)
        raise typer.Exit(2) from None
    _setup_logging("+".join(names))
    _run(mesh.run(names, local=False), serving=True)


@app.command()
def mcp(
    remote: Annotated[
        str | None,
        typer.Option(
            envvar="RAGMESH_REMOTE_URL",
            help=(
                "A remote gateway (https://host): bridge to it instead of a local mesh. Local files under "
                "RAGMESH_MCP_ROOTS are read here and uploaded; the gateway's own tools are proxied."
            ),
        ),
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(
            envvar="RAGMESH_REMOTE_API_KEY", help=("The remote gateway's API key (sent as Authorization: Bearer).")
        ),
    ] = None,
) -> None:
    """Serve the MCP tools over stdio (for Claude Desktop and IDEs) against a running mesh (RAGMESH_*_ADDR;
    RAGMESH_MCP_READ_ONLY, RAGMESH_MCP_ROOTS), or with --remote as a bridge to a remote gateway. Logs go to
    stderr; stdout carries only the protocol."""
    if remote:
        from ragmesh_common.paths import parse_roots

        try:
            from . import bridge
        except ModuleNotFoundError as exc:
            console.print(f"ragmesh: the bridge needs {exc.name}: pip install 'ragmesh-cli[bridge]'", style="red")
            raise typer.Exit(2) from None

        _setup_logging("ragmesh-bridge", stderr=True)
        _run(bridge.serve(remote, api_key, parse_roots(os.environ.get("RAGMESH_MCP_ROOTS", ""))))
        return
    from ragmesh_common.config import load
    from ragmesh_gateway.config import GatewaySettings
    from ragmesh_gateway.mcp_server import serve_stdio

    _setup_logging("ragmesh-mcp", stderr=True)
    _run(serve_stdio(load(GatewaySettings)))


# The largest file `ragmesh ingest` sends (the indexer's default RAGMESH_INDEXER_MAX_DOCUMENT_BYTES).
_MAX_FILE_BYTES = 100 * 1024 * 1024


@app.command()
def ingest(
    paths: Annotated[list[Path], typer.Argument(help="Files and folders to ingest (folders recursively).")],
    collection: Annotated[str, typer.Option("--collection", "-c", help="Target collection.")] = "default",
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
) -> None:
    """Ingest files and folders through the indexer, with a progress bar. Folders are walked with the rules of
    `ragmesh index` (.gitignore, default skips, secrets never read, binaries skipped); each file's document id is
    its path relative to the argument it came from. Exits 1 if any file failed."""
    from .jobs_cli import walk_for_ingest

    for path in paths:
        if not path.exists():
            raise typer.BadParameter(f"{path} is not a file or folder", param_hint="PATH")
    found = walk_for_ingest(paths, _MAX_FILE_BYTES)
    if not found:
        console.print("nothing to ingest")
        raise typer.Exit(0)
    rels = {f.path: rel for f, rel in found}
    failed = asyncio.run(_ingest([f.path for f, _ in found], collection, indexer, rels))
    raise typer.Exit(1 if failed else 0)


async def _ingest(files: list[Path], collection: str, target: str, rels: dict[Path, str]) -> int:
    from ragmesh.indexer.v1 import indexer_service_pb2 as pb
    from ragmesh.indexer.v1 import indexer_service_pb2_grpc as pb_grpc
    from ragmesh_common.clients import ServiceClient

    client = ServiceClient("indexer", target, pb_grpc.IndexerServiceStub, timeout=3600)
    failed = indexed = unchanged = 0
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console) as progress:
            task = progress.add_task("ingesting", total=len(files))
            for batch in _batches(files):
                # Documents the mesh refused for being busy (RESOURCE_EXHAUSTED: the embedder's queue is full)
                # are sent again after the Retry-After it asked for, for up to _BUSY_RETRY_SECONDS.
                pending, deadline = batch, time.monotonic() + _BUSY_RETRY_SECONDS
                while pending:
                    docs = [
                        pb.DocumentInput(
                            collection=collection,
                            file=pb.FileInput(data=f.read_bytes(), filename=f.name, path=rels[f]),
                        )
                        for f in pending
                    ]
                    busy: dict[int, float] = {}
                    done: set[int] = set()
                    try:
                        async for event in client.stream("IngestDocuments", pb.IngestDocumentsRequest(documents=docs)):
                            name = pending[event.index]
                            done.add(event.index)
                            if event.result.status == pb.INGEST_STATUS_FAILED:
                                if event.error.code == "RESOURCE_EXHAUSTED" and time.monotonic() < deadline:
                                    busy[event.index] = _retry_after(event.error.metadata.get("retry_after_seconds"))
                                    continue
                                failed += 1
                                progress.console.print(
                                    f"✗ {name}: {event.error.reason}: {event.error.message}", style="red"
                                )
                            elif event.result.status == pb.INGEST_STATUS_UNCHANGED:
                                unchanged += 1
                            else:
                                indexed += 1
                            progress.advance(task)
                    except RagmeshError as exc:
                        if exc.code.name != "RESOURCE_EXHAUSTED" or time.monotonic() >= deadline:
                            console.print(f"ragmesh: {exc.code.name} {exc.reason}: {exc.message}", style="red")
                            return len(files)
                        wait = _retry_after(exc.retry_after or exc.metadata.get("retry_after_seconds"))
                        busy |= {i: wait for i in range(len(pending)) if i not in done}
                    if busy:
                        wait = max(busy.values())
                        progress.console.print(
                            f"the mesh is busy (RESOURCE_EXHAUSTED): retrying {len(busy)} document(s) in {wait:g} s"
                        )
                        await asyncio.sleep(wait)
                    pending = [pending[i] for i in sorted(busy)]
    finally:
        await client.close()
    console.print(f"{indexed} indexed, {unchanged} unchanged, {failed} failed → collection {collection!r}")
    return failed


def _retry_after(value: str | float | None) -> float:
    """Seconds to wait before sending again: what the mesh asked for (Retry-After), else 1 s; at most 30 s."""
    try:
        seconds = float(value) if value not in (None, "") else 1.0
    except (TypeError, ValueError):
        seconds = 1.0
    return min(max(seconds, 0.1), 30.0)


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
def index(
    path: Annotated[Path, typer.Argument(help="The folder (a codebase, a document share) or file to index.")],
    collection: Annotated[str, typer.Option("--collection", "-c", help="Target collection.")] = "default",
    prune: Annotated[bool, typer.Option(help="Delete documents whose files are gone from the folder.")] = False,
    fresh_for: Annotated[
        int,
        typer.Option(
            min=0,
            help=("Seconds the documents stay fresh; `ragmesh sync` re-runs the folder after that (0: no limit)."),
        ),
    ] = 0,
    upload: Annotated[
        bool | None,
        typer.Option(
            help=(
                "Read the folder here and send only its new and changed files (a manifest of SHA-256 hashes goes "
                "first), instead of letting the indexer read it: for an indexer on another machine. Default: "
                "only when the indexer may not read the folder. Prune and `ragmesh sync` work as for a folder."
            )
        ),
    ] = None,
    wait: Annotated[bool, typer.Option(help="Follow the job with a progress bar until it finishes.")] = True,
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
) -> None:
    """Index a folder as a job on the indexer, which reads it (it must lie under RAGMESH_INDEXER_ROOTS; `ragmesh
    up` allows the folder it was started in), or, when it may not, from here: only new and changed files are
    sent. .gitignore/.ragmeshignore and default skips apply, secrets are never read, source code is stored
    verbatim with line ranges, unchanged files are skipped by content hash. The job survives restarts; the folder
    is remembered for `ragmesh sync`. Exits 1 if any file failed."""
    from . import jobs_cli

    if not path.exists():
        raise typer.BadParameter(f"{path} is not a file or folder", param_hint="PATH")
    code = _run_code(
        jobs_cli.index(path.resolve(), collection, indexer, prune=prune, fresh_for=fresh_for, upload=upload, watch=wait)
    )
    raise typer.Exit(code)


jobs_app = typer.Typer(help="Bulk ingestion jobs: list, show (live), cancel.", no_args_is_help=False)
app.add_typer(jobs_app, name="jobs")


@jobs_app.callback(invoke_without_command=True)
def jobs(
    ctx: typer.Context,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="How many recent jobs to list.")] = 20,
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
) -> None:
    """List recent jobs (newest first) in a table."""
    ctx.obj = indexer
    if ctx.invoked_subcommand is None:
        from . import jobs_cli

        raise typer.Exit(_run_code(jobs_cli.jobs_list(indexer, limit)))


@jobs_app.command("show")
def jobs_show(
    ctx: typer.Context,
    job_id: Annotated[str, typer.Argument(help="The job id.")],
    watch: Annotated[bool, typer.Option(help="Follow it with a progress bar until it finishes.")] = False,
) -> None:
    """Show one job: counts, errors and skipped files (live with --watch)."""
    from . import jobs_cli

    raise typer.Exit(_run_code(jobs_cli.jobs_show(ctx.obj, job_id, watch=watch, cancel=False)))


@jobs_app.command("cancel")
def jobs_cancel(ctx: typer.Context, job_id: Annotated[str, typer.Argument(help="The job id.")]) -> None:
    """Cancel a job: documents not started yet are not ingested."""
    from . import jobs_cli

    raise typer.Exit(_run_code(jobs_cli.jobs_show(ctx.obj, job_id, watch=False, cancel=True)))


@app.command()
def sync(
    collection: Annotated[str, typer.Option("--collection", "-c", help="Only this collection (default: all).")] = "",
    all_: Annotated[bool, typer.Option("--all", help="Re-run every datasource, not only those due.")] = False,
    expired: Annotated[bool, typer.Option(help="List the collection's expired documents instead.")] = False,
    prune_expired: Annotated[bool, typer.Option(help="Delete the collection's expired documents instead.")] = False,
    wait: Annotated[bool, typer.Option(help="Follow the jobs with progress bars until they finish.")] = True,
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
) -> None:
    """Re-run every datasource (indexed folder, URL list) that is due: unchanged files are skipped by content
    hash, changed ones replaced, and with the folder's --prune deleted ones removed. A folder sent from a client
    (`ragmesh index` of a folder the indexer cannot read) is sent again from here when it is on this host, else
    its host is named. Exits 1 if any failed."""
    from . import jobs_cli

    raise typer.Exit(
        _run_code(
            jobs_cli.sync(
                indexer, collection, everything=all_, watch=wait, expired=expired, prune_expired=prune_expired
            )
        )
    )


@app.command()
def reindex(
    name: Annotated[str, typer.Argument(help="The collection.")],
    chunk_tokens: Annotated[
        int | None,
        typer.Option(
            min=16,
            max=8192,
            help=("Largest chunk of the new version, in model tokens (default: the current version's)."),
        ),
    ] = None,
    chunk_overlap_tokens: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=4095,
            help=(
                "Tokens shared by consecutive chunks, less than half of --chunk-tokens (default: the current "
                "version's)."
            ),
        ),
    ] = None,
    model: Annotated[
        str,
        typer.Option(
            help=("The embedding model of the new version, by the embedder's name (default: the current version's).")
        ),
    ] = "",
    tolerance: Annotated[
        float | None,
        typer.Option(
            min=0.0,
            max=1.0,
            help=("How much lower the new version's nDCG@10 on the golden set may be, 0..1 (default: the indexer's)."),
        ),
    ] = None,
    force: Annotated[bool, typer.Option(help="Switch even when the gate finds the new version worse.")] = False,
    retention: Annotated[
        int | None,
        typer.Option(
            min=0,
            max=365 * 24 * 3600,
            help=("Seconds to keep the replaced version for `ragmesh rollback` (default: the indexer's)."),
        ),
    ] = None,
    wait: Annotated[
        bool, typer.Option(help=("Follow the job until it ends and print the gate's decision with both scores."))
    ] = False,
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
) -> None:
    """Re-index a collection into a new version (another chunking and/or embedding model) from the text it
    stores, as a job: searches keep using the current version meanwhile. When it is built, both versions are
    scored on the collection's golden set, and the collection switches only if the new one is not worse by more
    than the tolerance (or with --force). With --wait, exits 1 when the re-index is rejected, fails or is
    cancelled. Prints the job as JSON on stdout."""
    from . import versions_cli

    if chunk_tokens is not None and chunk_overlap_tokens is not None and chunk_overlap_tokens >= chunk_tokens // 2:
        raise typer.BadParameter(
            f"must be less than half of --chunk-tokens ({chunk_tokens})", param_hint="--chunk-overlap-tokens"
        )
    raise typer.Exit(
        _run_code(
            versions_cli.reindex(
                indexer,
                name,
                chunk_tokens=chunk_tokens,
                chunk_overlap_tokens=chunk_overlap_tokens,
                model=model,
                tolerance=tolerance,
                force=force,
                retention=retention,
                wait=wait,
            )
        )
    )


@app.command()
def rollback(
    name: Annotated[str, typer.Argument(help="The collection.")],
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
) -> None:
    """Switch a collection back to the version it used before its last re-index (while that version is kept);
    the version it replaces is kept in turn, so a second rollback undoes the first."""
    from . import versions_cli

    raise typer.Exit(_run_code(versions_cli.rollback(indexer, name)))


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
    from ragmesh_common.clients import ServiceClient

    modes = {name.removeprefix("SEARCH_MODE_").lower(): value for name, value in pb.SearchMode.items() if value}
    if mode not in modes:
        raise typer.BadParameter(f"mode must be one of {', '.join(modes)}", param_hint="--mode")
    client = ServiceClient("search", target, pb_grpc.SearchServiceStub, timeout=30)
    try:
        reply = await client.call(
            # protoc's .pyi types an enum field as its enum class; EnumTypeWrapper.items() (types-protobuf) gives ints.
            "Search",
            pb.SearchRequest(
                query=query, collections=collections, top_k=top_k, mode=cast("pb.SearchMode", modes[mode])
            ),
        )
    except RagmeshError as exc:
        console.print(f"ragmesh: {exc.code.name} {exc.reason}: {exc.message}", style="red")
        raise typer.Exit(1) from None
    finally:
        await client.close()
    # One block per hit (its head on one line, its text indented below), so any terminal width reads it; a hit in
    # a file names its lines as path:first-last, which editors and terminals open.
    for n, r in enumerate(reply.results, 1):
        where = f"{r.location.path}:{r.location.start_line}-{r.location.end_line}" if r.location.path else ""
        head = [f"{n}.", f"{r.score:.3f}", r.title or r.doc_id, where or f"chunk {r.chunk_index}"]
        out.print(Text("  ".join(x for x in head if x), style="bold"))
        out.print(Padding(Text(r.text[:300]), (0, 0, 1, 4)))


def _store_dir(data_dir: Path | None) -> Path:
    """The embedded store's directory (--data-dir, else RAGMESH_DATA_DIR); server mode has its own snapshots."""
    from ragmesh_common.config import load
    from ragmesh_store import StoreSettings

    settings = load(StoreSettings)
    if settings.qdrant_url and data_dir is None:
        raise ConfigError(
            "QDRANT_URL is set: snapshots of a Qdrant server are taken by the server itself (its snapshot API, "
            "POST /collections/<name>/snapshots; see deploy/README.md). `ragmesh snapshot` backs up the "
            "embedded store under RAGMESH_DATA_DIR (or --data-dir)"
        )
    return data_dir or settings.data_dir


def _backup(action: Callable[[], object]) -> None:
    from ragmesh_store import StoreError

    try:
        action()
    except ConfigError as exc:
        console.print(f"ragmesh: {exc.code}", style="red", soft_wrap=True)
        raise typer.Exit(2) from None
    except (StoreError, OSError) as exc:
        console.print(f"ragmesh: {exc}", style="red", soft_wrap=True)
        raise typer.Exit(1) from None


DataDir = Annotated[Path | None, typer.Option("--data-dir", help="The embedded store (default: RAGMESH_DATA_DIR).")]


@app.command()
def snapshot(
    output: Annotated[Path, typer.Argument(help="The snapshot file to write (.tar.gz).")],
    data_dir: DataDir = None,
) -> None:
    """Back up the embedded store into one .tar.gz with a manifest (format version, collections with their
    document and chunk counts, a checksum per file). The mesh must be stopped: it holds the store."""
    from ragmesh_store.backup import snapshot as take

    def run() -> None:
        manifest = take(_store_dir(data_dir), output)
        counts = (
            ", ".join(
                f"{name} ({c['documents']} documents, {c['chunks']} chunks)"
                for name, c in manifest["collections"].items()
            )
            or "no collections"
        )
        console.print(f"snapshot {output}: {counts}", soft_wrap=True)

    _backup(run)


@app.command()
def restore(
    archive: Annotated[Path, typer.Argument(help="A snapshot written by `ragmesh snapshot`.")],
    data_dir: DataDir = None,
    force: Annotated[bool, typer.Option(help="Replace what a non-empty data directory holds.")] = False,
) -> None:
    """Restore a snapshot into an empty data directory, checking every file's checksum and every collection's
    counts against the manifest."""
    from ragmesh_store.backup import restore as put_back

    def run() -> None:
        target = _store_dir(data_dir)
        manifest = put_back(archive, target, force=force)
        console.print(f"restored {len(manifest['collections'])} collection(s) into {target.resolve()}", soft_wrap=True)

    _backup(run)


@app.command()
def chat(
    collection: Annotated[str, typer.Option("--collection", "-c", help="The collection to talk about.")] = "default",
    model: Annotated[
        str,
        typer.Option(
            "--model",
            "-m",
            envvar="RAGMESH_ANSWER_MODEL",
            help=("The chat model (it must support tool calling); default RAGMESH_ANSWER_MODEL."),
        ),
    ] = "",
    base_url: Annotated[
        str,
        typer.Option(
            "--base-url",
            envvar="RAGMESH_ANSWER_BASE_URL",
            help=(
                "An OpenAI-compatible API, e.g. http://localhost:11434/v1 for Ollama; default OpenAI's. "
                "The key is read from RAGMESH_ANSWER_API_KEY."
            ),
        ),
    ] = "",
    max_rounds: Annotated[int, typer.Option(min=1, max=10, help="Tool-calling rounds per question at most.")] = 4,
    top_k: Annotated[int, typer.Option("--top-k", "-k", min=1, max=20, help="Passages per search.")] = 5,
    search_addr: Annotated[str, typer.Option("--search", envvar="RAGMESH_SEARCH_ADDR", help="Search address.")] = (
        default_addr("search")
    ),
    graph: Annotated[
        bool,
        typer.Option(
            "--graph/--no-graph",
            envvar="RAGMESH_GRAPH_ENABLED",
            help="Also give the model the graph tools (explore entities, paths, read-only Cypher).",
        ),
    ] = False,
    graph_addr: Annotated[str, _GRAPH_OPTION] = default_addr("graph"),
) -> None:
    """Chat in the terminal about a collection of a running mesh: the model searches it and reads documents
    through tools (`search`, `fetch_document`; with --graph also the collection's entity graph), answers citing
    them, and the sources it used are listed."""
    import readline  # noqa: F401 - line editing and history for input()

    from ragmesh_common.validation import collection_name

    from .mesh import settings_class

    try:
        collection_name(collection)
        settings_class("answer")  # the model client is the answer service's: is it installed?
    except (ConfigError, RagmeshError) as exc:
        console.print(f"ragmesh: {exc.code if isinstance(exc, ConfigError) else exc.message}")
        raise typer.Exit(2) from None
    if not model:
        console.print(
            "ragmesh chat needs a chat model with tool calling: set RAGMESH_ANSWER_MODEL (and "
            "RAGMESH_ANSWER_BASE_URL for a local server such as Ollama or vLLM), or pass --model"
        )
        raise typer.Exit(2)
    from .chat import repl

    code = asyncio.run(
        repl(
            model_name=model,
            base_url=base_url,
            api_key=os.environ.get("RAGMESH_ANSWER_API_KEY"),
            search_addr=search_addr,
            collection=collection,
            top_k=top_k,
            max_rounds=max_rounds,
            graph_addr=graph_addr if graph else None,
        )
    )
    raise typer.Exit(code)


@app.command("eval")
def eval_(
    dataset: Annotated[
        list[Path] | None,
        typer.Argument(
            help=(
                "BEIR dataset folder(s): corpus.jsonl, queries.jsonl, qrels/test.tsv. Several are measured one after "
                "the other, with a summary line. None: score --collection on its golden set."
            )
        ),
    ] = None,
    mode: Annotated[
        list[str],
        typer.Option(
            "--mode",
            "-m",
            help=(
                "Mode(s) to evaluate: dense, sparse, hybrid, semantic, keyword, optionally with a fusion "
                "(hybrid:adaptive, hybrid:relative_score, hybrid:rrf, hybrid:dbsf). Default: all of them; without a "
                "dataset, the search service's default mode (and no fusion variants)."
            ),
        ),
    ] = [],  # noqa: B006
    collection: Annotated[
        str,
        typer.Option(
            "--collection",
            "-c",
            help=(
                "The collection to ingest into and search (default: eval-<dataset folder name>); with several "
                "datasets, all of them use it (for query sets over one corpus). Without a dataset: the collection "
                "to score on its "
                "golden set."
            ),
        ),
    ] = "",
    reuse: Annotated[bool, typer.Option(help="Skip ingestion when the collection already holds the corpus.")] = True,
    limit_queries: Annotated[int, typer.Option(min=0, help="Evaluate only the first N judged queries (0: all).")] = 0,
    save_golden: Annotated[
        bool,
        typer.Option(help=("Also store the judged queries measured as the collection's golden set (at most 1000).")),
    ] = False,
    json_path: Annotated[Path | None, typer.Option("--json", help="Also write the results as JSON here.")] = None,
    answers: Annotated[
        bool,
        typer.Option(
            "--answers",
            help=(
                "Also ask every judged query through the answer service and score its citations: how often they "
                "include a judged-relevant document, and the share of citations that are relevant."
            ),
        ),
    ] = False,
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
    search_addr: Annotated[str, typer.Option("--search", envvar="RAGMESH_SEARCH_ADDR", help="Search address.")] = (
        default_addr("search")
    ),
    answer_addr: Annotated[str, typer.Option("--answer", envvar="RAGMESH_ANSWER_ADDR", help="Answer address.")] = (
        default_addr("answer")
    ),
) -> None:
    """Measure retrieval quality on BEIR datasets through the running mesh: nDCG@10, recall@10/100, MRR@10,
    leaderboard-style nDCG@10 and latency per mode, the default's per-query wins/losses against the better single
    mode, as tables (and JSON on stdout, or in --json); with several datasets, a summary line.

    Without a dataset, `--collection C` scores the live collection on its golden set (`ragmesh golden upload`,
    or --save-golden): nDCG@10, recall@10, MRR@10 and the change since the previous evaluation, which the search
    service keeps in the collection's history."""
    if not dataset:
        if not collection:
            raise typer.BadParameter(
                "give a BEIR dataset folder, or --collection to score a collection on its golden set",
                param_hint="DATASET",
            )
        from . import golden_cli

        try:
            golden_cli.parse_modes(mode)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--mode") from None
        raise typer.Exit(_run_code(golden_cli.evaluate(collection, mode, json_path, search_addr)))
    from . import eval_cli

    _run(
        eval_cli.run(
            dataset,
            mode,
            collection,
            reuse,
            limit_queries,
            json_path,
            indexer,
            search_addr,
            save_golden=save_golden,
            answer_addr=answer_addr if answers else "",
        )
    )


golden_app = typer.Typer(
    help="A collection's golden set: judged queries its search quality is scored on (`ragmesh eval --collection C`).",
    no_args_is_help=True,
)
app.add_typer(golden_app, name="golden")
_SEARCH_OPTION = typer.Option("--search", envvar="RAGMESH_SEARCH_ADDR", help="Search address.")


@golden_app.command("upload")
def golden_upload(
    collection: Annotated[str, typer.Argument(help="The collection (it must hold the dataset's corpus).")],
    dataset: Annotated[Path, typer.Argument(help="A BEIR dataset folder: queries.jsonl and qrels/<split>.tsv.")],
    split: Annotated[str, typer.Option(help="The qrels split.")] = "test",
    limit_queries: Annotated[
        int, typer.Option(min=0, max=1000, help=("Only the first N judged queries by id (0: all, at most 1000)."))
    ] = 0,
    search_addr: Annotated[str, _SEARCH_OPTION] = default_addr("search"),
) -> None:
    """Store a BEIR dataset's judged queries as the collection's golden set, replacing the one it had. The qrels'
    corpus ids must be doc_ids in the collection (`ragmesh eval DATASET` ingests the corpus under them); queries
    without a relevant judgment are left out, and so are judgments of grade 0."""
    from . import evaluation, golden_cli

    try:
        evaluation.load_judgments(dataset, split)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="DATASET") from None
    raise typer.Exit(_run_code(golden_cli.upload(collection, dataset, split, limit_queries, search_addr)))


@golden_app.command("show")
def golden_show(
    collection: Annotated[str, typer.Argument(help="The collection.")],
    search_addr: Annotated[str, _SEARCH_OPTION] = default_addr("search"),
) -> None:
    """Print the collection's golden set as JSON."""
    from . import golden_cli

    raise typer.Exit(_run_code(golden_cli.show(collection, search_addr)))


@golden_app.command("delete")
def golden_delete(
    collection: Annotated[str, typer.Argument(help="The collection.")],
    search_addr: Annotated[str, _SEARCH_OPTION] = default_addr("search"),
) -> None:
    """Remove the collection's golden set (its evaluation history stays)."""
    from . import golden_cli

    raise typer.Exit(_run_code(golden_cli.delete(collection, search_addr)))


graph_app = typer.Typer(
    help="A collection's entity graph (RAGMESH_GRAPH_ENABLED=true ragmesh up): ingest Kubernetes YAML or entities, "
    "then explore it.",
    no_args_is_help=True,
)
app.add_typer(graph_app, name="graph")
_GRAPH_COLLECTION = typer.Option("--collection", "-c", help="The collection.")
_JSON_OPTION = typer.Option("--json", help="Print the answer as JSON (for scripts) instead of tables.")


@graph_app.command("ingest")
def graph_ingest(
    files: Annotated[
        list[Path],
        typer.Argument(
            help="Kubernetes YAML/JSON (e.g. `kubectl kustomize DIR > k8s.yaml`) or JSON Lines of entities."
        ),
    ],
    collection: Annotated[str, _GRAPH_COLLECTION] = "default",
    as_json: Annotated[bool, _JSON_OPTION] = False,
    indexer: Annotated[str, typer.Option(envvar="RAGMESH_INDEXER_ADDR", help="Indexer address.")] = default_addr(
        "indexer"
    ),
) -> None:
    """Store the entities the files hold in the collection's graph and as searchable documents (through the
    indexer), and print how many of each entity and relation type were stored."""
    from . import graph_cli

    for path in files:
        if not path.is_file():
            raise typer.BadParameter(f"{path} is not a file", param_hint="FILES")
    raise typer.Exit(_run_code(graph_cli.ingest(files, collection, indexer, as_json=as_json)))


@graph_app.command("types")
def graph_types(
    collection: Annotated[str, typer.Option("--collection", "-c", help="Only this collection (default: all).")] = "",
    as_json: Annotated[bool, _JSON_OPTION] = False,
    graph: Annotated[str, _GRAPH_OPTION] = default_addr("graph"),
) -> None:
    """List the entity types (with counts and primary keys) and the relation types of each graph."""
    from . import graph_cli

    raise typer.Exit(_run_code(graph_cli.types(collection, graph, as_json=as_json)))


@graph_app.command("explore")
def graph_explore(
    entity_id: Annotated[str, typer.Argument(help="The entity's id, e.g. Deployment/ragmesh/search.")],
    collection: Annotated[str, _GRAPH_COLLECTION] = "default",
    depth: Annotated[int, typer.Option(min=1, max=3, help="Hops out (1..3).")] = 1,
    as_json: Annotated[bool, _JSON_OPTION] = False,
    graph: Annotated[str, _GRAPH_OPTION] = default_addr("graph"),
) -> None:
    """Show an entity's neighbours, nearest first: the relation that reached each, drawn from the entity it
    came from (`<-[SELECTS]-` : the neighbour selects it)."""
    from . import graph_cli

    raise typer.Exit(_run_code(graph_cli.explore(collection, entity_id, depth, graph, as_json=as_json)))


@graph_app.command("entity")
def graph_entity(
    entity_id: Annotated[str, typer.Argument(help="The entity's id, e.g. Deployment/ragmesh/search.")],
    collection: Annotated[str, _GRAPH_COLLECTION] = "default",
    as_json: Annotated[bool, _JSON_OPTION] = False,
    graph: Annotated[str, _GRAPH_OPTION] = default_addr("graph"),
) -> None:
    """Show every property and every relation (both directions) of an entity."""
    from . import graph_cli

    raise typer.Exit(_run_code(graph_cli.entity(collection, entity_id, graph, as_json=as_json)))


@graph_app.command("paths")
def graph_paths(
    from_type: Annotated[str, typer.Argument(help="The entity type paths start from, e.g. Service.")],
    to_type: Annotated[str, typer.Argument(help="The entity type paths end at, e.g. ServiceAccount.")],
    collection: Annotated[str, _GRAPH_COLLECTION] = "default",
    max_depth: Annotated[int, typer.Option(min=1, max=6, help="The longest path, in hops.")] = 4,
    as_json: Annotated[bool, _JSON_OPTION] = False,
    graph: Annotated[str, _GRAPH_OPTION] = default_addr("graph"),
) -> None:
    """Print every shortest path of relation types between two entity types, in Cypher notation. Exits 1 when
    they are not connected."""
    from . import graph_cli

    raise typer.Exit(_run_code(graph_cli.paths(collection, from_type, to_type, max_depth, graph, as_json=as_json)))


@graph_app.command("query")
def graph_query(
    statement: Annotated[str, typer.Argument(help="One read-only Cypher statement.")],
    collection: Annotated[str, _GRAPH_COLLECTION] = "default",
    ontology: Annotated[bool, typer.Option(help="Query the ontology (entity types) instead of the entities.")] = False,
    row_limit: Annotated[int, typer.Option(min=1, max=10_000, help="At most this many rows.")] = 1000,
    as_json: Annotated[bool, _JSON_OPTION] = False,
    graph: Annotated[str, _GRAPH_OPTION] = default_addr("graph"),
) -> None:
    """Run one read-only Cypher statement and print the rows. A statement that writes is refused
    (QUERY_NOT_READ_ONLY) and changes nothing."""
    from . import graph_cli

    raise typer.Exit(
        _run_code(
            graph_cli.query(
                collection,
                statement,
                graph,
                ontology=ontology,
                row_limit=row_limit,
                as_json=as_json,
            )
        )
    )


def main() -> None:
    app()
