"""Shared helpers for the deploy tests: render kustomizations offline with `kubectl kustomize`, and read what a
container in the rendered manifests is configured with (env from ConfigMaps, Secrets and literals).

Nothing here talks to a cluster or a registry: kustomize renders from the files, kubernetes-validate ships the
schemas, hadolint lints the Dockerfiles as text.
"""

from __future__ import annotations

import functools
import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
K8S = REPO / "deploy" / "k8s"
COMPONENTS = ("observability", "network-policies", "embedder-queue-autoscaling", "gpu-embedder", "graph")
GRPC_SERVICES = ("converter", "embedder", "indexer", "search", "answer")
SERVICES = (*GRPC_SERVICES, "gateway")
# Services that run only where a component adds them (components/<name>); each has an image all the same.
OPTIONAL_SERVICES = ("graph",)
IMAGES = (*SERVICES, *OPTIONAL_SERVICES)
# The one Dockerfile of every image, a target per service (the build context is the repository root).
DOCKERFILE = REPO / "Dockerfile"


def _kubectl() -> str:
    path = shutil.which("kubectl")
    if path is None:
        pytest.fail("kubectl is needed to render the kustomizations (kubectl kustomize)")
    return path


@functools.cache
def render_dir(path: Path) -> tuple[dict[str, Any], ...]:
    """`kubectl kustomize <path>`, parsed into manifests (offline: only local files are read)."""
    proc = subprocess.run([_kubectl(), "kustomize", str(path)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"kubectl kustomize {path} failed:\n{proc.stderr}"
    return tuple(doc for doc in yaml.safe_load_all(proc.stdout) if doc)


@functools.cache
def render_combo(components: tuple[str, ...]) -> tuple[dict[str, Any], ...]:
    """The base with the given components, through a throw-away kustomization (paths must be relative)."""
    with tempfile.TemporaryDirectory() as tmp:
        rel = Path(os.path.relpath(K8S, tmp))
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "resources": [str(rel / "base")],
            "components": [str(rel / "components" / c) for c in components],
        }
        Path(tmp, "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return render_dir(Path(tmp))


@functools.cache
def render_overlay_with(overlay: str, components: tuple[str, ...], namespace: str) -> tuple[dict[str, Any], ...]:
    """An overlay with more components, as a kustomization of one's own would add them (in its namespace)."""
    with tempfile.TemporaryDirectory() as tmp:
        rel = Path(os.path.relpath(K8S, tmp))
        kustomization = {
            "apiVersion": "kustomize.config.k8s.io/v1beta1",
            "kind": "Kustomization",
            "namespace": namespace,
            "resources": [str(rel / "overlays" / overlay)],
            "components": [str(rel / "components" / c) for c in components],
        }
        Path(tmp, "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
        return render_dir(Path(tmp))


def all_renders() -> dict[str, tuple[dict[str, Any], ...]]:
    """Every kustomization in deploy/k8s, plus the base with every combination of the components, plus the dev
    overlay with the graph."""
    renders = {
        "default": render_dir(K8S),
        "base": render_dir(K8S / "base"),
        "dev": render_dir(K8S / "overlays" / "dev"),
        "prod": render_dir(K8S / "overlays" / "prod"),
        "dev+graph": render_overlay_with("dev", ("graph",), "ragmesh-dev"),
    }
    for n in range(1, len(COMPONENTS) + 1):
        for combo in itertools.combinations(COMPONENTS, n):
            renders["base+" + "+".join(combo)] = render_combo(combo)
    return renders


RENDER_NAMES = ("default", "base", "dev", "prod", "dev+graph") + tuple(
    "base+" + "+".join(combo) for n in range(1, len(COMPONENTS) + 1) for combo in itertools.combinations(COMPONENTS, n)
)


def services_in(name: str) -> set[str]:
    """The ragmesh services a render runs: every one, and the optional ones whose component it has."""
    return {*SERVICES, *(s for s in OPTIONAL_SERVICES if s in name.split("+"))}


def of_kind(docs, kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def by_name(docs, kind: str, name: str) -> dict[str, Any]:
    found = [d for d in of_kind(docs, kind) if d["metadata"]["name"] == name]
    assert len(found) == 1, f"expected one {kind} named {name!r}, found {len(found)}"
    return found[0]


def workloads(docs) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet")]


def ragmesh_service_of(container: dict[str, Any]) -> str | None:
    """Which ragmesh service a container runs, from its image (ragmesh/<service>[:tag])."""
    image = container["image"].rsplit("/", 1)
    if len(image) == 2 and image[0].endswith("ragmesh"):
        name = image[1].split(":")[0].split("@")[0]
        return name if name in IMAGES else None
    return None


def ragmesh_containers(docs):
    """(workload, container, service) for every container that runs a ragmesh image."""
    for workload in workloads(docs):
        for container in workload["spec"]["template"]["spec"]["containers"]:
            service = ragmesh_service_of(container)
            if service is not None:
                yield workload, container, service


def container_env(docs, container: dict[str, Any], secret_placeholder: str = "rendered-elsewhere") -> dict[str, str]:
    """The environment a container starts with: envFrom ConfigMaps/Secrets, then `env` (which wins).

    secretKeyRef values come from the rendered Secret; when the Secret is created out of band (prod) they get
    `secret_placeholder`. A reference to a ConfigMap that is not rendered must be optional.
    """
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            ref = source["configMapRef"]
            maps = [d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"] == ref["name"]]
            assert maps or ref.get("optional"), f"envFrom ConfigMap {ref['name']!r} is not rendered"
            for cm in maps:
                env.update(cm.get("data", {}))
        else:
            pytest.fail(f"unexpected envFrom source {source}")
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["secretKeyRef"]
            secrets = [d for d in of_kind(docs, "Secret") if d["metadata"]["name"] == ref["name"]]
            if secrets:
                data = secrets[0].get("stringData", {})
                assert ref["key"] in data, f"Secret {ref['name']} has no key {ref['key']}"
                env[var["name"]] = data[ref["key"]]
            else:
                env[var["name"]] = secret_placeholder
        else:
            env[var["name"]] = "from-the-downward-api"
    return env


def named_port(container: dict[str, Any], name: str) -> int:
    ports = [p["containerPort"] for p in container.get("ports", []) if p.get("name") == name]
    assert len(ports) == 1, f"container {container['name']} has no single port named {name!r}"
    return ports[0]


def selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def pods_selected_by(docs, selector: dict[str, str]) -> list[dict[str, Any]]:
    """Workloads whose pod template labels match a Service's selector."""
    return [w for w in workloads(docs) if selects(selector, w["spec"]["template"]["metadata"]["labels"])]


def resolve_service_port(docs, host: str, port: int) -> tuple[dict[str, Any], dict[str, Any], int]:
    """For host:port as a client in the namespace would dial it: the one workload behind the Service `host`
    and the container port the traffic lands on. Fails if any link in that chain is missing."""
    service = by_name(docs, "Service", host)
    matches = [p for p in service["spec"]["ports"] if p["port"] == port]
    assert matches, f"Service {host} has no port {port} (has {[p['port'] for p in service['spec']['ports']]})"
    target = matches[0].get("targetPort", port)
    backends = pods_selected_by(docs, service["spec"]["selector"])
    assert len(backends) == 1, f"Service {host} selects {len(backends)} workloads"
    workload = backends[0]
    for container in workload["spec"]["template"]["spec"]["containers"]:
        for p in container.get("ports", []):
            if p["containerPort"] == target or p.get("name") == target:
                return workload, container, p["containerPort"]
    pytest.fail(f"Service {host}:{port} targets {target!r}, which no container of {workload['metadata']['name']} has")
