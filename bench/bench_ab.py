"""Two settings of `ragmesh up` against each other in alternating rounds: REST ingest (and optionally search).

    .venv/bin/python -m bench.bench_ab --a RAGMESH_EMBEDDER_RUNNERS=1 --a RAGMESH_EMBEDDER_THREADS=2 \
        [--b NAME=VALUE ...] [--a-src WORKTREE] [--b-src WORKTREE] [--rounds 3] [--passes 3] [--passages 1000] \
        [--search dense [--search-clients 32]] [--backend hash] [--existing a|b]

On a shared or noisy machine two separate runs differ by more than most changes do; alternating A, B, A, B, ...
(a fresh mesh per round, the same passages) puts the drift on both sides. Each round starts the mesh with the
settings added to the environment (B defaults to none: the code's defaults) and, with `--a-src` or `--b-src`,
that side's code from another checkout (a worktree of the commit before a change), warms it up with a few batches,
then ingests the passages `--passes` times (4 clients x 32 through /api/v1/ingest/batch, a new collection
each pass) and reports passages/s, the mesh process's CPU ms per passage, the embedder's padding (padded
tokens over real ones, from its metrics) and how much of its model threads' time the model ran and was starved
(waited for an accepted micro-batch) per pass; with `--search`, also REST search p50 at one client over the
last collection, and with `--search-clients N` the rate, p50/p99 and CPU ms per query of the mesh process and of
this benchmark's client (`bench.report.rest_searches`: one keep-alive connection at one client, aiohttp at more)
at N clients. With `--existing a` (or `b`), that side's passes go into collections made beforehand (one small
document, then a second's pause) instead of new ones: with the same settings on both sides, what creating a
collection costs an ingest. Prints one line per round and a JSON summary.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from bench.report import (
    CpuClock,
    MeshRun,
    baseline_pythonpath,
    embedder_totals,
    in_threads,
    load_data,
    mesh_env,
    model_share,
    padding_share,
    rest_searches,
)
from tests.e2e.mesh_process import free_port


def settings(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"expected NAME=VALUE, got {pair!r}")
        out[name] = value
    return out


def one_round(
    env: dict[str, str],
    corpus: list[dict],
    queries: list[str],
    passes: int,
    search: str | None,
    pythonpath: str | None,
    search_clients: int = 0,
    existing: bool = False,
) -> dict:
    docs = [{"text": c["text"], "doc_id": c["_id"], "title": c.get("title") or None} for c in corpus]
    batches = [docs[i : i + 32] for i in range(0, len(docs), 32)]
    out: dict = {"ingest": [], "cpu_ms": [], "padding_pct": [], "model_busy_pct": [], "model_starved_pct": []}
    metrics_port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        run = MeshRun({**env, "RAGMESH_EMBEDDER_METRICS_PORT": str(metrics_port)}, Path(tmp), pythonpath)
        try:

            def client() -> httpx.Client:
                return httpx.Client(base_url=run.mesh.url, timeout=600)

            def post(collection: str):
                def call(http: httpx.Client, batch: list[dict]) -> None:
                    http.post(
                        "/api/v1/ingest/batch", json={"collection": collection, "documents": batch}
                    ).raise_for_status()

                return call

            in_threads(4, batches[:8], post("warm-up"), client, lambda c: c.close())
            for p in range(passes):
                if existing:  # the collection exists before the timed pass (its creation is not timed)
                    with client() as http:
                        http.post(
                            "/api/v1/ingest",
                            json={"collection": f"pass-{p}", "doc_id": "made-before", "text": "made before the pass"},
                        ).raise_for_status()
                    time.sleep(1.0)
                before = embedder_totals(metrics_port)
                clock = CpuClock(run.proc.popen.pid)
                _, seconds = in_threads(4, batches, post(f"pass-{p}"), client, lambda c: c.close())
                rates = clock.rates(len(docs), "x")
                after = embedder_totals(metrics_port)
                out["ingest"].append(round(len(docs) / seconds, 1))
                out["cpu_ms"].append(rates["x_cpu_ms_per_passage"])
                out["padding_pct"].append(padding_share(before, after))
                out["model_busy_pct"].append(model_share(before, after, "busy", seconds))
                out["model_starved_pct"].append(model_share(before, after, "starved", seconds))
            with client() as http:  # what the last pass's collection holds (one more with --existing)
                listed = http.get("/api/v1/collections").raise_for_status().json()["collections"]
                out["documents"] = next(c["documents"] for c in listed if c["name"] == f"pass-{passes - 1}")
            if search:
                bodies = [
                    {"collection": f"pass-{passes - 1}", "query": q, "mode": search, "top_k": 10} for q in queries
                ]
                rest_searches(run.mesh.url, 1, bodies[:50], run.proc.popen.pid)  # warm-up
                out["search_p50_ms"] = rest_searches(run.mesh.url, 1, bodies * 2, run.proc.popen.pid)["p50_ms"]
                if search_clients:
                    out[f"search_{search_clients}"] = rest_searches(
                        run.mesh.url, search_clients, bodies * max(2, search_clients // 8), run.proc.popen.pid
                    )
        finally:
            run.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", action="append", default=[], metavar="NAME=VALUE", help="settings of side A")
    parser.add_argument("--b", action="append", default=[], metavar="NAME=VALUE", help="settings of side B")
    parser.add_argument("--a-src", type=Path, help="run side A from this checkout (e.g. a git worktree)")
    parser.add_argument("--b-src", type=Path, help="run side B from this checkout (default: this one)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per side")
    parser.add_argument("--passes", type=int, default=3, help="ingest passes per round")
    parser.add_argument("--passages", type=int, default=1000)
    parser.add_argument("--search", choices=["dense", "hybrid", "sparse"], help="also REST search p50, 1 client")
    parser.add_argument(
        "--search-clients",
        type=int,
        default=0,
        help="with --search, also q/s, p50/p99 and CPU ms per query (mesh and client) at N clients",
    )
    parser.add_argument("--backend", default="local", choices=["local", "hash"])
    parser.add_argument(
        "--existing",
        choices=["a", "b"],
        help="this side ingests into collections made beforehand, the other into new ones",
    )
    args = parser.parse_args()
    corpus, queries = load_data(args.passages, 200)
    sides = {"A": settings(args.a), "B": settings(args.b)}
    results: dict[str, list[dict]] = {"A": [], "B": []}
    started = time.perf_counter()
    for r in range(args.rounds):
        for side, extra in sides.items():
            env = {**mesh_env(args.backend, "onnx"), **extra}
            src = args.a_src if side == "A" else args.b_src
            source = baseline_pythonpath(src) if src else None
            result = one_round(
                env,
                corpus,
                queries,
                args.passes,
                args.search,
                source,
                args.search_clients,
                existing=args.existing == side.lower(),
            )
            results[side].append(result)
            print(
                f"round {r + 1} {side}: ingest {result['ingest']} passages/s, CPU ms/passage {result['cpu_ms']}, "
                f"padding % {result['padding_pct']}, model busy % {result['model_busy_pct']}, starved % "
                f"{result['model_starved_pct']}"
                + (f", search p50 {result['search_p50_ms']} ms" if "search_p50_ms" in result else "")
                + (
                    f", {args.search_clients} clients {result[key]}"
                    if (key := f"search_{args.search_clients}") in result
                    else ""
                ),
                flush=True,
            )
    summary = {
        "settings": sides,
        "existing": args.existing,
        "a_src": str(args.a_src) if args.a_src else None,
        "b_src": str(args.b_src) if args.b_src else None,
        "passages": args.passages,
        "seconds": round(time.perf_counter() - started),
        "results": results,
    }
    for side in sides:
        rates = [x for result in results[side] for x in result["ingest"]]
        summary[f"{side}_ingest_mean"] = round(statistics.mean(rates), 1)
        summary[f"{side}_ingest_range"] = [min(rates), max(rates)]
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
