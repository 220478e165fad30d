"""Soak: `ragmesh up` as a real process under 32 mixed clients (searches, with ingests of new documents mixed in)
for 10 minutes: per minute the request count, errors, search and ingest p50/p99, and the mesh's resident memory
(RSS) -- what a leak, a slow creep in latency or errors under sustained load would show.

Run: .venv/bin/python -m bench.bench_soak [--minutes 10] [--clients 32] [--embedder local|hash] [--json PATH]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.e2e.mesh_process import Mesh, Proc, wait_ready  # noqa: E402

WORDS = (
    "glacier moraine basalt estuary lagoon tundra delta fjord canyon plateau savanna reef aquifer dune marsh "
    "volcano geyser atoll steppe taiga meadow ridge valley cirque crevasse"
).split()
INGEST_SHARE = 0.2  # one request in five ingests a new document


def _rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words)) + "."


def _q(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


class Minute:
    def __init__(self) -> None:
        self.search: list[float] = []
        self.ingest: list[float] = []
        self.errors: dict[str, int] = {}


async def client(http: httpx.AsyncClient, seed: int, stop: float, minutes: list[Minute], started: float) -> None:
    rng = random.Random(seed)
    n = 0
    while (now := time.monotonic()) < stop:
        minute = minutes[min(len(minutes) - 1, int((now - started) // 60))]
        ingest = rng.random() < INGEST_SHARE
        t = time.perf_counter()
        try:
            if ingest:
                n += 1
                response = await http.post(
                    "/api/v1/ingest",
                    json={"text": _text(rng, rng.randint(40, 400)), "collection": "soak", "doc_id": f"c{seed}-{n}"},
                )
            else:
                response = await http.post(
                    "/api/v1/search", json={"query": _text(rng, 4), "collection": "soak", "top_k": 5}
                )
            status = str(response.status_code)
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        elapsed = time.perf_counter() - t
        if status == "200":
            (minute.ingest if ingest else minute.search).append(elapsed)
        else:
            minute.errors[status] = minute.errors.get(status, 0) + 1


async def soak(minutes: int, clients: int, embedder: str) -> dict:
    data = Path(tempfile.mkdtemp(prefix="ragmesh-soak-"))
    mesh = Mesh(data / "store", extra_env={"RAGMESH_EMBEDDER_BACKEND": embedder, "RAGMESH_LOG_LEVEL": "WARNING"})
    proc = Proc(["up"], mesh.env(), data / "up.log").start()
    try:
        wait_ready(mesh.url, [proc], timeout=300)
        limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
        async with httpx.AsyncClient(base_url=mesh.url, timeout=120, limits=limits) as http:
            seed_rng = random.Random(0)
            for i in range(50):  # something to search from the first second
                await http.post(
                    "/api/v1/ingest", json={"text": _text(seed_rng, 200), "collection": "soak", "doc_id": f"seed-{i}"}
                )
            rss = [(0.0, _rss_kib(proc.popen.pid))]
            per_minute = [Minute() for _ in range(minutes)]
            started = time.monotonic()
            stop = started + minutes * 60

            async def sample_rss() -> None:
                while time.monotonic() < stop:
                    await asyncio.sleep(min(60, max(0.1, stop - time.monotonic())))
                    rss.append((time.monotonic() - started, _rss_kib(proc.popen.pid)))

            await asyncio.gather(sample_rss(), *(client(http, i, stop, per_minute, started) for i in range(clients)))
            collections = (await http.get("/api/v1/collections")).json()["collections"]
    finally:
        code = proc.stop()
    documents = next((c["documents"] for c in collections if c["name"] == "soak"), 0)
    rows = []
    for i, m in enumerate(per_minute):
        rows.append(
            {
                "minute": i + 1,
                "searches": len(m.search),
                "ingests": len(m.ingest),
                "errors": sum(m.errors.values()),
                "error_kinds": m.errors,
                "search_p50_ms": round(_q(m.search, 0.5), 1),
                "search_p99_ms": round(_q(m.search, 0.99), 1),
                "ingest_p50_ms": round(_q(m.ingest, 0.5), 1),
                "ingest_p99_ms": round(_q(m.ingest, 0.99), 1),
                "rss_mib": round(rss[min(i + 1, len(rss) - 1)][1] / 1024, 1),
            }
        )
    return {
        "minutes": minutes,
        "clients": clients,
        "embedder": embedder,
        "exit_code": code,
        "rows": rows,
        "rss_start_mib": round(rss[0][1] / 1024, 1),
        "rss_end_mib": round(rss[-1][1] / 1024, 1),
        "documents_at_end": documents,
        "errors": sum(r["errors"] for r in rows),
        "requests": sum(r["searches"] + r["ingests"] for r in rows),
    }


def markdown(result: dict) -> str:
    lines = [
        f"Soak: `ragmesh up` ({result['embedder']} embedder), {result['clients']} clients, {result['minutes']} min, "
        f"{int(INGEST_SHARE * 100)} % ingests of new documents: {result['requests']} requests, "
        f"{result['errors']} errors; RSS {result['rss_start_mib']} MiB after start-up and 50 documents -> "
        f"{result['rss_end_mib']} MiB at the end ({result['documents_at_end']} documents); clean exit "
        f"{result['exit_code'] == 0}.",
        "",
        "| minute | searches | ingests | errors | search p50 ms | search p99 ms | ingest p50 ms | ingest p99 ms "
        "| RSS MiB |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['minute']} | {r['searches']} | {r['ingests']} | {r['errors']} | {r['search_p50_ms']} | "
        f"{r['search_p99_ms']} | {r['ingest_p50_ms']} | {r['ingest_p99_ms']} | {r['rss_mib']} |"
        for r in result["rows"]
    ]
    rss_after_first = result["rows"][0]["rss_mib"] if result["rows"] else result["rss_start_mib"]
    growth = result["rss_end_mib"] - rss_after_first
    lines += [
        "",
        f"RSS growth after the first minute: {growth:+.1f} MiB "
        f"({growth / max(1, result['minutes'] - 1):+.1f} MiB/minute while the store grew).",
    ]
    if result["rows"]:
        first, last = result["rows"][0], result["rows"][-1]
        lines.append(
            f"Search p99, last minute / first minute: "
            f"{last['search_p99_ms'] / first['search_p99_ms']:.2f}; searches per minute, last / first: "
            f"{last['searches'] / max(1, first['searches']):.2f}."
        )
    median = statistics.median(r["search_p50_ms"] for r in result["rows"]) if result["rows"] else 0
    lines.append(f"Median of the per-minute search p50: {median:.1f} ms.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--embedder", choices=("local", "hash"), default="local")
    parser.add_argument("--json", type=Path, help="Also write {name, markdown, data} here.")
    args = parser.parse_args()
    result = asyncio.run(soak(args.minutes, args.clients, args.embedder))
    text = markdown(result)
    print(text)
    if args.json:
        args.json.write_text(json.dumps({"name": "soak", "markdown": text, "data": result}, indent=2))


if __name__ == "__main__":
    main()
