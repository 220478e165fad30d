"""The replicated topology (deploy/local/topology.py): search with one and with two embedder replicas behind the
same two gateways and HAProxy, side by side in one run, and the failed requests of each fault.

    .venv/bin/python -m bench.bench_ha [--backend local|hash] [--searches 400] [--clients 8] [--out bench/results]

For each embedder count (1, then 2): a fresh topology, a few documents, `--clients` REST clients running
`--searches` hybrid searches through HAProxy: q/s and p50/p99 in ms, and the Embed calls each embedder replica
served (from its own /metrics). Then, on the two-embedder topology, the faults of tests/e2e/test_e2e_ha.py
(deploy/local/faults.py): every search and turn counted. Writes `<date>-ha.json` ({"name", "markdown", "data"})
into `--out`. On a 2-core machine a second embedder adds no CPU, so expect no gain in throughput: the figure
says whether the spread works and what a replica costs, not how it scales.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import os
import re
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from deploy.local import faults
from deploy.local.topology import Topology

RESULTS = Path(__file__).resolve().parent / "results"
MODEL_CACHE = Path(__file__).resolve().parents[1] / ".ragmesh" / "models"
_EMBED_CALLS = re.compile(r"^ragmesh_grpc_server_handling_seconds_count\{([^}]*)\}\s+([0-9.e+]+)$", re.M)


def embed_calls(metrics: str) -> int:
    """Embed calls served, from one embedder's /metrics (every status code)."""
    return int(sum(float(v) for labels, v in _EMBED_CALLS.findall(metrics) if 'Embed"' in labels))


def calls_per_replica(topology: Topology) -> dict[str, int]:
    return {r.name: embed_calls(httpx.get(r.metrics_url).text) for r in topology.tier("embedder")}


def p99(samples: list[float]) -> float:
    return statistics.quantiles(samples, n=100)[98] if len(samples) >= 2 else samples[0]


async def measure(topology: Topology, searches: int, clients: int) -> dict[str, Any]:
    before = await asyncio.to_thread(calls_per_replica, topology)
    async with faults.searching(topology.url, clients=clients) as load:
        start_ok, started = load.ok, time.perf_counter()
        first = len(load.latencies_ms)
        await load.until(start_ok + searches)
        elapsed = time.perf_counter() - started
        latencies = load.latencies_ms[first:]
    after = await asyncio.to_thread(calls_per_replica, topology)
    return {
        "searches": load.ok - start_ok,
        "failed": load.failed,
        "qps": round((load.ok - start_ok) / elapsed, 1),
        "p50_ms": round(statistics.median(latencies), 1),
        "p99_ms": round(p99(latencies), 1),
        "embed_calls_per_replica": {name: after[name] - before[name] for name in after},
    }


def markdown(data: dict[str, Any]) -> str:
    one, two = data["embedders"]["1"], data["embedders"]["2"]
    lines = [
        f"## Replicated topology ({data['cpus']} CPUs, backend {data['backend']}, {data['clients']} clients, hybrid)",
        "",
        "| embedders | q/s | p50 ms | p99 ms | Embed calls per replica | failed |",
        "|---|---|---|---|---|---|",
    ]
    for n, row in data["embedders"].items():
        calls = ", ".join(str(c) for c in row["embed_calls_per_replica"].values())
        lines.append(f"| {n} | {row['qps']} | {row['p50_ms']} | {row['p99_ms']} | {calls} | {row['failed']} |")
    lines += [
        "",
        f"two / one embedders: throughput x{two['qps'] / one['qps']:.2f}, p99 x{two['p99_ms'] / one['p99_ms']:.2f}",
        "",
        "| fault | requests ok | failed |",
        "|---|---|---|",
    ]
    for name, result in data["faults"].items():
        if "searches" in result:
            lines.append(f"| {name} | {result['searches']['ok']} | {result['searches']['failed']} |")
        if "bridge_searches" in result:
            bridged = result["bridge_searches"]
            lines.append(f"| {name} (MCP bridge client) | {bridged['ok']} | {bridged['failed']} |")
        if "statuses" in result:
            ok = sum(s == 200 for s in result["statuses"])
            lines.append(f"| {name} (turns) | {ok} | {len(result['statuses']) - ok} |")
    return "\n".join(lines) + "\n"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    extra = {"RAGMESH_EMBEDDER_MODEL_CACHE_DIR": str(MODEL_CACHE), **faults.ANSWER_ENV}
    data: dict[str, Any] = {
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "cpus": len(os.sched_getaffinity(0)),
        "backend": args.backend,
        "clients": args.clients,
        "searches": args.searches,
        "embedders": {},
        "faults": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-ha-") as tmp:
        for n in (1, 2):
            topology = Topology(Path(tmp) / f"e{n}", embedders=n, backend=args.backend, extra_env=extra)
            try:
                await asyncio.to_thread(topology.start)
                await asyncio.to_thread(faults.seed, topology)
                data["embedders"][str(n)] = await measure(topology, args.searches, args.clients)
                print(json.dumps({n: data["embedders"][str(n)]}), flush=True)
                if n == 2 and not args.no_faults:
                    data["faults"]["sigkill_embedder"] = await faults.kill_embedder(topology)
                    data["faults"]["sigkill_gateway"] = await faults.kill_gateway(topology)
                    data["faults"]["sigkill_answer_mid_conversation"] = await faults.kill_answer_mid_conversation(
                        topology
                    )
                    data["faults"]["rolling_restart"] = await faults.rolling_restart(topology)
                    print(json.dumps(data["faults"], default=str)[:2000], flush=True)
            finally:
                await asyncio.to_thread(topology.stop)
                await asyncio.to_thread(topology.forget_redis)
    return data


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="local", help="RAGMESH_EMBEDDER_BACKEND (default local: the model)")
    parser.add_argument("--searches", type=int, default=400, help="searches measured per embedder count")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--no-faults", action="store_true", help="skip the faults")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    data = asyncio.run(run(args))
    text = markdown(data) if data["embedders"] else ""
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"{data['date'][:10]}-ha.json"
    path.write_text(json.dumps({"name": "ha", "markdown": text, "data": data}, indent=1) + "\n")
    print(f"wrote {path}")
    return data


if __name__ == "__main__":
    main()
