"""The replicated topology of the prod overlay as real processes on loopback (`make up-ha`).

    python -m deploy.local.topology [--embedders 2] [--backend hash] [--port 8080]   # from the repository root

    haproxy :8080 --round robin, /ready checks--> gateway-1, gateway-2      (ragmesh serve gateway)
    gateways --> answer-1, answer-2 (sessions in Redis) --> search
    gateways, answer, indexer, search --> embedder-1, embedder-2            (ragmesh serve embedder)
    gateways --> converter; gateways --> indexer+search (one process: the embedded store's single owner)
    indexer jobs on a Redis Stream (RAGMESH_REDIS_URL)

A replicated tier's address is given to its callers as `ipv4:127.0.0.1:A,127.0.0.1:B` (gRPC's round_robin over
both). The tests (tests/e2e/test_e2e_ha.py) and the bench (bench/bench_ha.py) start the same `Topology`.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from deploy.local.haproxy import HAProxy

RAGMESH = str(Path(sys.executable).parent / "ragmesh")
REDIS_URL = "redis://127.0.0.1:6379/0"
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A loopback port free now, below the kernel's ephemeral range, not handed out before by this process. The
    processes started next bind it a moment later; a port from the ephemeral range (what binding port 0 gives) can
    be taken meanwhile by any process's own port-0 bind or outgoing connection (seen once: a `serve embedder` held
    the port picked for the indexer started next to it)."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(1000):
        port = random.randint(10_000, max(10_001, low - 1))
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port between 10000 and {low}")


@dataclass
class Replica:
    """One `ragmesh serve ...` process: its gRPC ports (by service), metrics ports, or the gateway's HTTP port."""

    name: str  # "embedder-1", "indexer+search", "gateway-2", ...
    services: list[str]
    ports: dict[str, int]  # service -> gRPC port ("gateway" -> HTTP port)
    metrics_ports: dict[str, int]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def port(self) -> int:
        return self.ports[self.services[0]]

    @property
    def metrics_url(self) -> str:
        """Prometheus /metrics of the (first) service in this process."""
        if "gateway" in self.ports:
            return f"http://127.0.0.1:{self.ports['gateway']}/metrics"
        return f"http://127.0.0.1:{self.metrics_ports[self.services[0]]}/metrics"

    def start(self, env: dict[str, str]) -> None:
        own = dict(env)
        for service, port in self.ports.items():
            if service == "gateway":
                own["RAGMESH_HTTP_PORT"] = str(port)
            else:
                own[f"RAGMESH_{service.upper()}_PORT"] = str(port)
        for service, port in self.metrics_ports.items():
            own[f"RAGMESH_{service.upper()}_METRICS_PORT"] = str(port)
        with self.log_path.open("ab") as log:
            self.popen = subprocess.Popen(
                [RAGMESH, "serve", *self.services],
                env=own,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        """SIGKILL: no drain, no goodbye."""
        assert self.popen is not None
        self.popen.kill()
        self.popen.wait(10)

    def stop(self, timeout: float = 30) -> int | None:
        """SIGTERM, wait for the graceful exit (SIGKILL if it does not come); the exit code."""
        if self.popen is None:
            return None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        return self.popen.returncode

    def ready(self) -> bool:
        """The gateway's /ready is 200; a gRPC service reports SERVING on grpc.health.v1."""
        if "gateway" in self.ports:
            try:
                return httpx.get(f"http://127.0.0.1:{self.port}/ready", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        with grpc.insecure_channel(f"127.0.0.1:{self.port}") as channel:
            try:
                reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=2)
            except grpc.RpcError:
                return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)


class Topology:
    """converter, `embedders` embedders, indexer+search, two answer services and two gateways behind HAProxy."""

    def __init__(
        self,
        workdir: Path,
        *,
        embedders: int = 2,
        answers: int = 2,
        gateways: int = 2,
        backend: str | None = None,
        port: int | None = None,
        redis_url: str = REDIS_URL,
        extra_env: dict[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.roots = workdir / "folders"  # where folder jobs may read (RAGMESH_INDEXER_ROOTS)
        self.redis_url = redis_url
        # Keys of this topology only, so that several (tests, a bench) can share one Redis.
        self.redis_prefix = f"ragmesh-ha-{secrets.token_hex(4)}:"
        self.backend = backend
        self.extra_env = extra_env or {}
        logs = workdir / "logs"
        self.replicas: dict[str, Replica] = {}

        def add(name: str, services: list[str]) -> None:
            ports = {s: free_port() for s in services}
            metrics = {s: free_port() for s in services if s != "gateway"}
            self.replicas[name] = Replica(name, services, ports, metrics, logs / f"{name}.log")

        add("converter", ["converter"])
        for i in range(1, embedders + 1):
            add(f"embedder-{i}", ["embedder"])
        add("indexer+search", ["indexer", "search"])
        for i in range(1, answers + 1):
            add(f"answer-{i}", ["answer"])
        for i in range(1, gateways + 1):
            add(f"gateway-{i}", ["gateway"])
        self.haproxy = HAProxy(
            workdir / "haproxy",
            port or free_port(),
            {r.name: r.port for r in self.tier("gateway")},
        )

    def tier(self, service: str) -> list[Replica]:
        """The replicas serving `service`, in order."""
        return [r for r in self.replicas.values() if service in r.services]

    def address(self, service: str) -> str:
        """What callers get as RAGMESH_<SERVICE>_ADDR: host:port, or ipv4:A,B for a replicated tier."""
        ports = [r.ports[service] for r in self.tier(service)]
        if len(ports) == 1:
            return f"127.0.0.1:{ports[0]}"
        return "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)

    @property
    def url(self) -> str:
        """The load balancer: what users and clients call."""
        return self.haproxy.url

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMESH_", "QDRANT_", "OTEL_"))}
        env.update(
            RAGMESH_DATA_DIR=str(self.data_dir),
            RAGMESH_REDIS_URL=self.redis_url,
            RAGMESH_INDEXER_REDIS_PREFIX=self.redis_prefix,
            RAGMESH_ANSWER_REDIS_PREFIX=self.redis_prefix,
            RAGMESH_REDIS_PREFIX=self.redis_prefix,  # the gateways' shared rate limits
            RAGMESH_INDEXER_ROOTS=str(self.roots),
            HF_HUB_OFFLINE="1",
        )
        if self.backend:
            env["RAGMESH_EMBEDDER_BACKEND"] = self.backend
        for service in ("converter", "embedder", "indexer", "search", "answer"):
            env[f"RAGMESH_{service.upper()}_ADDR"] = self.address(service)
        env.update(self.extra_env)
        return env

    def start(self, timeout: float = 240) -> Topology:
        """Start every process at once (each waits for those it calls), then HAProxy; return when the
        balancer's /ready answers 200 through it."""
        for path in (self.data_dir, self.roots, self.workdir / "logs"):
            path.mkdir(parents=True, exist_ok=True)
        env = self.env()
        for replica in self.replicas.values():
            replica.start(env)
        self.wait_ready(self.replicas.values(), timeout)
        self.haproxy.start()
        self._wait(lambda: self._balancer_ready(), "haproxy /ready", self.replicas.values(), timeout)
        return self

    def _balancer_ready(self) -> bool:
        try:
            return httpx.get(f"{self.url}/ready", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, replicas: Iterable[Replica], timeout: float = 240) -> None:
        replicas = list(replicas)
        for replica in replicas:
            self._wait(replica.ready, replica.name, replicas, timeout)

    def _wait(self, check, what: str, replicas: Iterable[Replica], timeout: float) -> None:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for replica in replicas:
                if not replica.alive():
                    code = replica.popen.returncode if replica.popen else None
                    raise RuntimeError(f"{replica.name} exited ({code}):\n{replica.log()[-3000:]}")
            if check():
                return
            time.sleep(0.3)
        raise TimeoutError(f"{what} not ready after {timeout:.0f}s")

    def restart(self, name: str, timeout: float = 120) -> None:
        """Start a replica that was stopped or killed again, and wait until it is ready (a gateway: until the
        balancer has it back in rotation too)."""
        replica = self.replicas[name]
        replica.start(self.env())
        self.wait_ready([replica], timeout)
        if "gateway" in replica.services:
            self._wait(lambda: self._in_rotation(name), f"{name} in haproxy", [replica], timeout)

    def _in_rotation(self, name: str) -> bool:
        # "show servers state": srv_op_state is the 6th field, 2 = running.
        for line in self.haproxy.command("show servers state").splitlines():
            fields = line.split()
            if len(fields) > 5 and fields[3] == name:
                return fields[5] == "2"
        return False

    def rolling_restart(self, service: str, timeout: float = 120, settle_seconds: float = 3.0) -> None:
        """SIGTERM each replica of the tier, wait for it to be ready again and `settle_seconds` more, then the
        next (a gateway is drained from the balancer first, and its in-flight requests finish). The settling is
        Kubernetes' minReadySeconds: callers reconnect to a replica that came back within their reconnect backoff
        (RECONNECT_BACKOFF_MAX_MS, 2 s); stopping the next one before they have would leave them none."""
        for i, replica in enumerate(self.tier(service)):
            if i:
                time.sleep(settle_seconds)
            if service == "gateway":
                self.haproxy.set_state(replica.name, "drain")
            code = replica.stop()
            if code != 0:
                raise RuntimeError(f"{replica.name} exited with {code} on SIGTERM:\n{replica.log()[-3000:]}")
            if service == "gateway":
                self.haproxy.set_state(replica.name, "ready")
            self.restart(replica.name, timeout)

    def stop(self) -> dict[str, int | None]:
        """Stop the balancer, then every process (gateways first); their exit codes."""
        self.haproxy.stop()
        codes = {}
        for replica in reversed(list(self.replicas.values())):
            codes[replica.name] = replica.stop()
        return codes

    def forget_redis(self) -> int:
        """Delete this topology's Redis keys (its jobs stream, its sessions); how many."""
        import redis

        client = redis.Redis.from_url(self.redis_url)
        try:
            keys = list(client.scan_iter(f"{self.redis_prefix}*"))
            return int(client.delete(*keys)) if keys else 0
        finally:
            client.close()

    def describe(self) -> str:
        lines = [f"ragmesh HA topology: {self.url} (HAProxy, round robin over {len(self.tier('gateway'))} gateways)"]
        lines += [f"  {self.url}/api/v1 (REST), {self.url}/mcp (MCP), {self.url}/ (web page)"]
        for replica in self.replicas.values():
            where = ", ".join(f"{s} :{p}" for s, p in replica.ports.items())
            lines.append(f"  {replica.name:<15} {where:<32} metrics {replica.metrics_url}  log {replica.log_path}")
        lines.append(f"  Redis {self.redis_url} (jobs, sessions and rate limits under {self.redis_prefix})")
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--embedders", type=int, default=2, help="embedder replicas (default 2)")
    parser.add_argument("--backend", default=None, help="RAGMESH_EMBEDDER_BACKEND (default: the real model)")
    parser.add_argument("--port", type=int, default=8080, help="HAProxy's port on 127.0.0.1 (default 8080)")
    parser.add_argument("--workdir", type=Path, default=Path(".ragmesh/ha"), help="data, logs, haproxy.cfg")
    parser.add_argument("--redis-url", default=os.environ.get("RAGMESH_REDIS_URL", REDIS_URL))
    args = parser.parse_args(argv)
    topology = Topology(
        args.workdir.resolve(), embedders=args.embedders, backend=args.backend, port=args.port, redis_url=args.redis_url
    )
    stop = False

    def on_signal(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        print(f"starting {len(topology.replicas)} processes and HAProxy (logs in {args.workdir}/logs) ...", flush=True)
        topology.start()
        print(topology.describe(), flush=True)
        print("Ctrl-C stops it.", flush=True)
        while not stop:
            for replica in topology.replicas.values():
                if not replica.alive():
                    print(f"{replica.name} exited; stopping", file=sys.stderr)
                    stop = True
            time.sleep(0.5)
    finally:
        codes = topology.stop()
        print("stopped: " + ", ".join(f"{name} {code}" for name, code in codes.items()), flush=True)
        print(f"deleted {topology.forget_redis()} Redis keys under {topology.redis_prefix}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
