"""Start ragmesh commands as real processes for end-to-end tests, and stop them gracefully."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

# One way of picking ports for these meshes and the replicated topology (re-exported for the tests).
from deploy.local.topology import free_port as free_port

RAGMESH = str(Path(sys.executable).parent / "ragmesh")
SERVICES = ("converter", "embedder", "indexer", "search", "answer")
# Started only when asked for (`serve graph`, or `up` with RAGMESH_GRAPH_ENABLED=true); it gets a port all the same.
OPTIONAL_SERVICES = ("graph",)
# Where the embedder caches its ONNX export: the default of a mesh started from the repository root.
MODEL_CACHE = Path(__file__).resolve().parents[2] / ".ragmesh" / "models"


@dataclass
class Proc:
    args: list[str]
    env: dict[str, str]
    log_path: Path
    popen: subprocess.Popen | None = None

    def start(self) -> Proc:
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            [RAGMESH, *self.args], env=self.env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )
        return self

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, wait for a graceful exit; SIGKILL if it does not come. Returns the exit code."""
        assert self.popen is not None
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGTERM)
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)
        self._log.close()
        return self.popen.returncode


@dataclass
class Mesh:
    """Ports and environment for one mesh under test."""

    data_dir: Path
    http_port: int = field(default_factory=free_port)
    ports: dict[str, int] = field(default_factory=lambda: {s: free_port() for s in (*SERVICES, *OPTIONAL_SERVICES)})
    extra_env: dict[str, str] = field(default_factory=dict)

    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMESH_", "QDRANT_", "OTEL_"))}
        env.update(
            RAGMESH_DATA_DIR=str(self.data_dir),
            RAGMESH_HTTP_PORT=str(self.http_port),
            HF_HUB_OFFLINE="1",
            RAGMESH_LOG_LEVEL="INFO",
            # One ONNX export of the model for every mesh under test (the repository's default cache).
            RAGMESH_EMBEDDER_MODEL_CACHE_DIR=str(MODEL_CACHE),
        )
        for name, port in self.ports.items():
            env[f"RAGMESH_{name.upper()}_PORT"] = str(port)
            env[f"RAGMESH_{name.upper()}_ADDR"] = f"127.0.0.1:{port}"
        env.update(self.extra_env)
        return env

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}"


def wait_ready(url: str, procs: list[Proc], timeout: float = 180) -> None:
    """Wait until GET /ready answers 200; fail early with the logs if a process died."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in procs:
            if proc.popen.poll() is not None:
                raise AssertionError(f"{proc.args} exited with {proc.popen.returncode}:\n{proc.log()[-4000:]}")
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    logs = "\n".join(p.log()[-3000:] for p in procs)
    raise AssertionError(f"mesh not ready after {timeout}s:\n{logs}")


def wait_serving(target: str, procs: list[Proc], timeout: float = 120) -> None:
    """Wait until the gRPC server at `target` reports SERVING on grpc.health.v1."""
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    deadline = time.monotonic() + timeout
    with grpc.insecure_channel(target) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while time.monotonic() < deadline:
            for proc in procs:
                if proc.popen.poll() is not None:
                    raise AssertionError(f"{proc.args} exited with {proc.popen.returncode}:\n{proc.log()[-4000:]}")
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=2)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.3)
    raise AssertionError(f"{target} not serving after {timeout}s")
