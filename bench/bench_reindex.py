"""Search latency while a collection is re-indexed vs at rest, on `ragmesh up` with the real model, via REST.

    .venv/bin/python -m bench.bench_reindex [--passages 2000] [--clients 4] [--seconds 20] [--chunk-tokens 64]

Ingests msmarco passages, then runs the same search load (`--clients` clients, each searching queries in turn,
default mode) twice: for `--seconds` at rest, then for as long as a re-index to another chunking takes (the
new version built from the stored text, writes to both, the gate on a golden set of the dataset's judged
queries, the switch). Prints p50/p95/p99 in ms, throughput and errors of each phase, and the ratio
during / at rest; writes them as JSON next to the other results when `--out` is given.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

import httpx

from tests.e2e.mesh_process import Mesh, Proc, wait_ready

SHARED = Path(__file__).resolve().parents[2] / "shared"
COLLECTION = "bench"


def _lines(path: Path) -> list[str]:
    """A JSON-lines file's lines (split on newlines only: passages hold other Unicode line separators)."""
    return [line for line in path.read_text(encoding="utf-8").split("\n") if line.strip()]


def _load(passages: int) -> tuple[list[dict], list[dict], list[str]]:
    data = SHARED / "datasets/msmarco-5k"
    qrels: dict[str, dict[str, int]] = {}
    for line in (data / "qrels" / "test.tsv").read_text().splitlines()[1:]:
        qid, doc, grade = line.split("\t")
        qrels.setdefault(qid, {})[doc] = int(grade)
    texts = {q["_id"]: q["text"] for q in map(json.loads, _lines(data / "queries.jsonl"))}
    corpus = [json.loads(line) for line in (data / "corpus.jsonl").open()][:passages]
    ids = {c["_id"] for c in corpus}
    golden = [
        {"query_id": q, "text": texts[q], "relevant": {d: g for d, g in r.items() if d in ids}}
        for q, r in qrels.items()
        if q in texts and any(d in ids and g > 0 for d, g in r.items())
    ]
    docs = [{"doc_id": c["_id"], "text": c["text"]} for c in corpus]
    return docs, golden[:100], list(texts.values())


async def _load_phase(http: httpx.AsyncClient, queries: list[str], clients: int, until) -> dict:
    latencies: list[float] = []
    errors = 0
    started = time.perf_counter()

    async def client(n: int) -> None:
        nonlocal errors
        k = n
        while not until():
            t0 = time.perf_counter()
            r = await http.post("/api/v1/search", json={"query": queries[k % len(queries)], "collection": COLLECTION})
            latencies.append((time.perf_counter() - t0) * 1000)
            errors += r.status_code != 200
            k += clients

    await asyncio.gather(*(client(n) for n in range(clients)))
    seconds = time.perf_counter() - started
    latencies.sort()

    def pct(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p * len(latencies)))]

    return {
        "searches": len(latencies),
        "errors": errors,
        "seconds": round(seconds, 1),
        "qps": round(len(latencies) / seconds, 1),
        "p50_ms": round(statistics.median(latencies), 1),
        "p95_ms": round(pct(0.95), 1),
        "p99_ms": round(pct(0.99), 1),
    }


async def run(args: argparse.Namespace) -> dict:
    docs, golden, queries = _load(args.passages)
    with tempfile.TemporaryDirectory() as tmp:
        mesh = Mesh(Path(tmp) / "data")
        proc = Proc(["up"], mesh.env(), Path(tmp) / "up.log").start()
        try:
            wait_ready(mesh.url, [proc])
            async with httpx.AsyncClient(base_url=mesh.url, timeout=600) as http:
                for i in range(0, len(docs), 100):
                    (
                        await http.post(
                            "/api/v1/ingest/batch", json={"collection": COLLECTION, "documents": docs[i : i + 100]}
                        )
                    ).raise_for_status()
                golden_set = await http.put(f"/api/v1/collections/{COLLECTION}/golden", json={"queries": golden})
                golden_set.raise_for_status()
                for q in queries[:50]:  # warm-up
                    await http.post("/api/v1/search", json={"query": q, "collection": COLLECTION})
                deadline = time.monotonic() + args.seconds
                rest = await _load_phase(http, queries, args.clients, lambda: time.monotonic() > deadline)
                r = await http.post(
                    f"/api/v1/collections/{COLLECTION}/reindex", json={"chunk_tokens": args.chunk_tokens}
                )
                r.raise_for_status()
                job_id = r.json()["job_id"]
                state = {"job": r.json()["job"]}

                async def watch() -> None:
                    while state["job"]["state"] not in ("done", "failed", "cancelled", "rejected"):
                        await asyncio.sleep(0.5)
                        state["job"] = (await http.get(f"/api/v1/jobs/{job_id}")).json()

                watcher = asyncio.create_task(watch())
                during = await _load_phase(http, queries, args.clients, watcher.done)
                job = state["job"]
        finally:
            proc.stop()
    return {
        "passages": len(docs),
        "clients": args.clients,
        "at_rest": rest,
        "during_reindex": during,
        "reindex": {
            "state": job["state"],
            "decision": job.get("reindex", {}).get("decision"),
            "documents_per_second": round(job.get("documents_per_second", 0), 1),
        },
        "p99_ratio": round(during["p99_ms"] / rest["p99_ms"], 2),
        "p50_ratio": round(during["p50_ms"] / rest["p50_ms"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--passages", type=int, default=2000)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--chunk-tokens", type=int, default=64)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = asyncio.run(run(args))
    print(json.dumps(result, indent=2))
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
