"""The images' entrypoints are real: `ragmesh serve <service>` (what each image's ENTRYPOINT runs) starts with
the environment its pod gets from the manifests, answers the probe Kubernetes sends (gRPC health for the
services, /health for the gateway), and on SIGTERM exits cleanly within terminationGracePeriodSeconds.

Only the binding changes: loopback and free ports instead of 0.0.0.0 and the fixed ports, and no OTLP
endpoint (there is no collector here). The indexer and search need a Qdrant server, which this machine does
not have; for them the test checks that the entrypoint resolves to their settings and server factory."""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
from deploy_support import IMAGES, OPTIONAL_SERVICES, REPO, container_env, ragmesh_containers
from grpc_health.v1 import health_pb2, health_pb2_grpc
from ragmesh_cli import mesh

from tests.e2e.mesh_process import free_port

RAGMESH = str(Path(sys.executable).parent / "ragmesh")
STARTUP_ATTEMPTS = 600  # x 0.2 s: generous, the embedder loads its model on 2 shared cores


def pod_env(renders, service: str) -> tuple[dict[str, str], dict]:
    docs = renders["dev+graph" if service in OPTIONAL_SERVICES else "dev"]
    for workload, container, svc in ragmesh_containers(docs):
        if svc == service:
            env = {k: v for k, v in container_env(docs, container).items() if not k.startswith("OTEL_EXPORTER")}
            return env, workload
    raise AssertionError(service)


def entrypoint_args(service: str) -> list[str]:
    import json

    from test_deploy_images import final_stage

    args = json.loads(next(value for kind, value in final_stage(service) if kind == "ENTRYPOINT"))
    assert args[0] == "ragmesh"
    return [RAGMESH, *args[1:]]


def start(service: str, env: dict[str, str], tmp_path: Path) -> subprocess.Popen:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RAGMESH_", "QDRANT_", "OTEL_"))}
    log = open(tmp_path / f"{service}.log", "wb")  # noqa: SIM115 - closed with the process below
    return subprocess.Popen(
        entrypoint_args(service), env=base | env, stdout=log, stderr=subprocess.STDOUT, cwd=tmp_path
    )


def stop_cleanly(proc: subprocess.Popen, workload: dict, tmp_path: Path, service: str) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        code = proc.wait(timeout=workload["spec"]["template"]["spec"]["terminationGracePeriodSeconds"])
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        pytest.fail(f"{service} did not exit within terminationGracePeriodSeconds after SIGTERM")
    assert code == 0, (tmp_path / f"{service}.log").read_text()[-3000:]


def wait_until(check, proc: subprocess.Popen, tmp_path: Path, service: str) -> None:
    for _ in range(STARTUP_ATTEMPTS):
        if proc.poll() is not None:
            pytest.fail(
                f"{service} exited with {proc.returncode}:\n" + (tmp_path / f"{service}.log").read_text()[-3000:]
            )
        if check():
            return
        time.sleep(0.2)
    proc.kill()
    pytest.fail(f"{service} never answered its probe")


def grpc_serving(port: int) -> bool:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(service=""), timeout=1)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


@pytest.mark.parametrize("service", ["converter", "embedder", "answer", "graph"])
def test_grpc_service_entrypoint_serves_its_probe_and_drains_on_sigterm(renders, service, tmp_path):
    env, workload = pod_env(renders, service)
    port = free_port()
    env |= {
        f"RAGMESH_{service.upper()}_HOST": "127.0.0.1",
        f"RAGMESH_{service.upper()}_PORT": str(port),
        "RAGMESH_DATA_DIR": str(tmp_path / "data"),
    }  # the answer's sessions and the graph's databases: not the manifests' shared /tmp nor the pod's volume
    if service == "embedder":
        # The image carries the model's ONNX export (its Dockerfile sets this); the repository's cache stands in.
        env.setdefault("RAGMESH_EMBEDDER_MODEL_CACHE_DIR", str(REPO / ".ragmesh" / "models"))
    proc = start(service, env, tmp_path)
    try:
        wait_until(lambda: grpc_serving(port), proc, tmp_path, service)
        stop_cleanly(proc, workload, tmp_path, service)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_gateway_entrypoint_serves_health_with_the_manifests_keys_and_stops_on_sigterm(renders, tmp_path):
    env, workload = pod_env(renders, "gateway")
    assert env["RAGMESH_HTTP_HOST"] == "0.0.0.0" and env["RAGMESH_API_KEYS"]
    port = free_port()
    env |= {"RAGMESH_HTTP_HOST": "127.0.0.1", "RAGMESH_HTTP_PORT": str(port)}
    proc = start("gateway", env, tmp_path)

    def healthy() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    try:
        wait_until(healthy, proc, tmp_path, "gateway")
        # The key from the Secret is what guards the API (the probe path stays open).
        assert httpx.get(f"http://127.0.0.1:{port}/api/v1/collections", timeout=5).status_code == 401
        stop_cleanly(proc, workload, tmp_path, "gateway")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("service", IMAGES)
def test_every_image_entrypoint_names_an_installed_service(service):
    args = entrypoint_args(service)
    assert args[1:] == ["serve", service]
    assert mesh.validate_names([service]) == [service]
    mesh.settings_class(service)  # raises ConfigError when the service's package is missing
    if service == "gateway":
        assert callable(importlib.import_module("ragmesh_gateway.app").create_app)
    else:
        assert callable(importlib.import_module(f"ragmesh_{service}.server").create_server)
    proc = subprocess.run([*args, "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "Serve one or more services" in proc.stdout


def test_an_image_for_a_service_that_does_not_exist_fails_fast():
    proc = subprocess.run([RAGMESH, "serve", "indexr"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "unknown service" in proc.stderr
