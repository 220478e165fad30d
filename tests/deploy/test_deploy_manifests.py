"""Every kustomization renders offline and is valid Kubernetes; every workload is production-shaped (probes,
resources, restricted security context, labels, graceful shutdown); the overlays and components do what
deploy/README.md says they do."""

from __future__ import annotations

import functools
import json
import re

import kubernetes_validate
import pytest
import yaml
from deploy_support import (
    COMPONENTS,
    GRPC_SERVICES,
    K8S,
    RENDER_NAMES,
    SERVICES,
    by_name,
    container_env,
    named_port,
    of_kind,
    ragmesh_containers,
    resolve_service_port,
    services_in,
    workloads,
)

# The oldest Kubernetes we support (native `sleep` preStop hooks are on by default from 1.30) and the newest
# kubernetes-validate ships schemas for.
K8S_VERSIONS = ("1.30.0", "1.37.0")


def test_every_kustomization_in_the_tree_is_rendered_by_these_tests():
    rendered = {K8S, K8S / "base", K8S / "overlays" / "dev", K8S / "overlays" / "prod", K8S / "namespace"}
    found = set()
    for path in K8S.rglob("kustomization.yaml"):
        kind = yaml.safe_load(path.read_text())["kind"]
        if kind == "Component":
            assert path.parent.name in COMPONENTS, f"component {path.parent} is not in the render matrix"
        else:
            found.add(path.parent)
    assert found == rendered


@functools.cache
def _schema_error(doc_json: str, version: str) -> str | None:
    """kubernetes-validate's complaint about one document (as JSON), or None. The renders share most documents
    (817 in all, 175 different): each different one is validated once per version."""
    doc = json.loads(doc_json)
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as exc:
        return f"{doc['kind']}/{doc['metadata']['name']}: {exc.message} at {list(exc.path)}"
    return None


@pytest.mark.parametrize("name", RENDER_NAMES)
@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_renders_validate_against_the_kubernetes_schemas(renders, name, version):
    docs = renders[name]
    assert docs
    for doc in docs:
        error = _schema_error(json.dumps(doc, sort_keys=True), version)
        if error is not None:
            pytest.fail(f"{name}: {error}")


@pytest.mark.parametrize("name", RENDER_NAMES)
def test_every_workload_has_probes_resources_and_a_restricted_security_context(renders, name):
    for workload in workloads(renders[name]):
        where = f"{name}: {workload['kind']}/{workload['metadata']['name']}"
        pod = workload["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, where
        assert pod["enableServiceLinks"] is False, where
        assert pod["serviceAccountName"] == workload["metadata"]["name"], where
        by_name(renders[name], "ServiceAccount", pod["serviceAccountName"])
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True and psc["runAsUser"] > 0, where
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}, where
        for container in pod["containers"]:
            assert "readinessProbe" in container and "livenessProbe" in container, where
            for key in ("requests", "limits"):
                assert set(container["resources"][key]) >= {"cpu", "memory"}, f"{where}: {key}"
            csc = container["securityContext"]
            assert csc["allowPrivilegeEscalation"] is False, where
            assert csc["readOnlyRootFilesystem"] is True, where
            assert csc["capabilities"] == {"drop": ["ALL"]}, where
            assert ":" in container["image"] and not container["image"].endswith(":latest"), where


@pytest.mark.parametrize("name", RENDER_NAMES)
def test_grpc_services_use_native_grpc_probes_on_their_grpc_port(renders, name):
    seen = set()
    for _, container, service in ragmesh_containers(renders[name]):
        if service == "gateway":
            assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
            assert container["livenessProbe"]["httpGet"]["path"] == "/health"
            continue
        seen.add(service)
        port = named_port(container, "grpc")
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["grpc"]["port"] == port, f"{name}: {service} {probe}"
    assert seen == services_in(name) - {"gateway"}


@pytest.mark.parametrize("name", RENDER_NAMES)
def test_every_resource_carries_the_recommended_labels(renders, name):
    for doc in renders[name]:
        labels = doc["metadata"].get("labels", {})
        assert labels.get("app.kubernetes.io/part-of") == "ragmesh", f"{doc['kind']}/{doc['metadata']['name']}"
        if doc["kind"] in ("Deployment", "StatefulSet", "Service", "ServiceAccount"):
            assert labels.get("app.kubernetes.io/name"), f"{doc['kind']}/{doc['metadata']['name']}"
            assert labels.get("app.kubernetes.io/component"), f"{doc['kind']}/{doc['metadata']['name']}"
    for workload in workloads(renders[name]):
        pod_labels = workload["spec"]["template"]["metadata"]["labels"]
        assert pod_labels["app.kubernetes.io/name"] == workload["metadata"]["name"]
        assert pod_labels["app.kubernetes.io/part-of"] == "ragmesh"


@pytest.mark.parametrize("name", RENDER_NAMES)
def test_shutdown_drains_within_the_termination_grace_period(renders, name):
    docs = renders[name]
    for workload, container, service in ragmesh_containers(docs):
        pod = workload["spec"]["template"]["spec"]
        pre_stop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
        grace = float(container_env(docs, container)["RAGMESH_SHUTDOWN_GRACE_SECONDS"])
        # Endpoints are removed during the preStop sleep, then in-flight calls drain; both must end before
        # the kubelet's SIGKILL, with a margin for the process to exit.
        assert pre_stop + grace + 2 <= pod["terminationGracePeriodSeconds"], f"{name}: {service}"


@pytest.mark.parametrize("name", RENDER_NAMES)
def test_every_service_has_a_deployment_service_and_account(renders, name):
    docs = renders[name]
    running = {service for _, _, service in ragmesh_containers(docs)}
    assert running == services_in(name)
    for service in GRPC_SERVICES:
        svc = by_name(docs, "Service", service)
        assert [p["name"] for p in svc["spec"]["ports"]][0] == "grpc"
        # Headless, so gRPC clients see every pod (one HTTP/2 connection per pod, not one per virtual IP).
        assert svc["spec"]["clusterIP"] == "None"
    gateway = by_name(docs, "Service", "gateway")
    assert [p["name"] for p in gateway["spec"]["ports"]] == ["http"]
    qdrant = by_name(docs, "StatefulSet", "qdrant")
    assert qdrant["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "qdrant-storage"
    mounts = {m["name"]: m["mountPath"] for m in qdrant["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    assert mounts["qdrant-storage"] == "/qdrant/storage"


def test_dev_runs_one_replica_of_everything_without_an_autoscaler(renders):
    docs = renders["dev"]
    assert not of_kind(docs, "HorizontalPodAutoscaler")
    assert not of_kind(docs, "NetworkPolicy")
    for workload in workloads(docs):
        assert workload["spec"].get("replicas", 1) == 1, workload["metadata"]["name"]
    assert by_name(docs, "Namespace", "ragmesh-dev")
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"ragmesh-dev"}


def test_prod_is_replicated_with_disruption_budgets_and_a_distributed_qdrant(renders):
    docs = renders["prod"]
    pdbs = {
        p["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]: p["spec"]
        for p in of_kind(docs, "PodDisruptionBudget")
    }
    for service in SERVICES:
        if service != "embedder":
            assert by_name(docs, "Deployment", service)["spec"]["replicas"] >= 2, service
        assert pdbs[service] == {"minAvailable": 1, "selector": pdbs[service]["selector"]}, service
    hpa = by_name(docs, "HorizontalPodAutoscaler", "embedder")
    assert hpa["spec"]["minReplicas"] >= 2 and hpa["spec"]["maxReplicas"] > hpa["spec"]["minReplicas"]

    qdrant = by_name(docs, "StatefulSet", "qdrant")
    assert qdrant["spec"]["replicas"] == 3
    assert pdbs["qdrant"]["maxUnavailable"] == 1
    container = qdrant["spec"]["template"]["spec"]["containers"][0]
    env = container_env(docs, container)
    assert env["QDRANT__CLUSTER__ENABLED"] == "true"
    p2p = int(env["QDRANT__CLUSTER__P2P__PORT"])
    assert named_port(container, "p2p") == p2p
    script = container["args"][0]
    assert f'--bootstrap "http://qdrant-0.{qdrant["spec"]["serviceName"]}:{p2p}"' in script
    headless = by_name(docs, "Service", qdrant["spec"]["serviceName"])
    assert headless["spec"]["clusterIP"] == "None" and headless["spec"]["publishNotReadyAddresses"] is True
    assert p2p in [p["port"] for p in headless["spec"]["ports"]]
    anti = qdrant["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    assert anti["requiredDuringSchedulingIgnoredDuringExecution"][0]["topologyKey"] == "kubernetes.io/hostname"
    # Every shard on two of the three nodes, so the PDB's one unavailable node loses nothing.
    for _, c, service in ragmesh_containers(docs):
        if service in ("indexer", "search"):
            store_env = container_env(docs, c)
            assert int(store_env["QDRANT_REPLICATION_FACTOR"]) == 2
            assert int(store_env["QDRANT_SHARD_NUMBER"]) >= 3
    # The known dev keys are not shipped: the Secret is created out of band.
    assert not of_kind(docs, "Secret")


def test_prod_requests_follow_the_measurements(renders):
    docs = renders["prod"]
    embedder = by_name(docs, "Deployment", "embedder")["spec"]["template"]["spec"]["containers"][0]
    # The model keeps 2 threads busy (~40 passages/s per pod): request the cores it was measured on, and pin
    # its threads to them (OpenMP would otherwise size its pool from the node's cores): 2 runners x 1 thread.
    assert embedder["resources"]["requests"]["cpu"] == embedder["resources"]["limits"]["cpu"] == "2"
    env = container_env(docs, embedder)
    assert env["OMP_NUM_THREADS"] == "2"
    assert int(env["RAGMESH_EMBEDDER_RUNNERS"]) * int(env["RAGMESH_EMBEDDER_THREADS"]) == 2
    # ~600 MB RSS with the model loaded.
    assert _mebibytes(embedder["resources"]["requests"]["memory"]) >= 600
    converter = by_name(docs, "Deployment", "converter")["spec"]["template"]["spec"]["containers"][0]
    assert _mebibytes(converter["resources"]["requests"]["memory"]) >= 300  # markitdown alone


def _mebibytes(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Mi|Gi)", quantity).groups()
    return int(number) * (1024 if unit == "Gi" else 1)


def test_the_embedder_autoscales_on_cpu_by_default(renders):
    docs = renders["base"]
    hpa = by_name(docs, "HorizontalPodAutoscaler", "embedder")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "embedder"}
    assert [m["type"] for m in hpa["spec"]["metrics"]] == ["Resource"]
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    # The HPA owns the replica count: a `replicas` in the Deployment would fight it on every apply.
    assert "replicas" not in by_name(docs, "Deployment", "embedder")["spec"]


def test_the_queue_depth_component_adds_the_adapter_metric_to_the_hpa(renders):
    hpa = by_name(renders["base+embedder-queue-autoscaling"], "HorizontalPodAutoscaler", "embedder")
    by_type = {m["type"]: m for m in hpa["spec"]["metrics"]}
    assert set(by_type) == {"Resource", "Pods"}
    metric = by_type["Pods"]["pods"]["metric"]["name"]
    assert metric == "ragmesh_embedder_queue_depth"
    values = yaml.safe_load(
        (K8S / "components" / "embedder-queue-autoscaling" / "prometheus-adapter-values.yaml").read_text()
    )
    rule = values["rules"]["custom"][0]
    assert rule["name"]["as"] == metric and metric in rule["seriesQuery"]
    assert rule["resources"]["overrides"]["pod"] == {"resource": "pod"}
    # Prometheus finds the gauge on the embedder pods' metrics port.
    pod = by_name(renders["base"], "Deployment", "embedder")["spec"]["template"]
    port = named_port(pod["spec"]["containers"][0], "metrics")
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(port)


@pytest.mark.parametrize("name", [n for n in RENDER_NAMES if "gpu-embedder" in n])
def test_the_gpu_component_puts_the_embedder_on_a_gpu_node_in_cuda(renders, name):
    docs = renders[name]
    pod = by_name(docs, "Deployment", "embedder")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    assert pod["nodeSelector"]
    assert container["image"].endswith("-cuda")
    env = container_env(docs, container)
    assert env["RAGMESH_EMBEDDER_DEVICE"] == "cuda"
    assert env["OMP_NUM_THREADS"] == env["RAGMESH_EMBEDDER_THREADS"] == container["resources"]["limits"]["cpu"]
    assert env["RAGMESH_EMBEDDER_RUNNERS"] == "1"  # one call at a time on the GPU
    # Only the embedder moves to the GPU pool.
    for workload in workloads(docs):
        if workload["metadata"]["name"] != "embedder":
            spec = workload["spec"]["template"]["spec"]
            assert "nodeSelector" not in spec and "nvidia.com/gpu" not in str(spec), workload["metadata"]["name"]
    # The HPA still scales the GPU Deployment, on queue depth too when that component is there.
    hpa = by_name(docs, "HorizontalPodAutoscaler", "embedder")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "embedder"
    metrics = {m["type"]: m for m in hpa["spec"]["metrics"]}
    if "embedder-queue-autoscaling" in name:
        assert metrics["Pods"]["pods"]["metric"]["name"] == "ragmesh_embedder_queue_depth"


@pytest.mark.parametrize(
    "name", [n for n in RENDER_NAMES if "observability" in n or n.split("+")[0] in ("default", "dev", "prod")]
)
def test_observability_points_every_service_at_the_collector_and_the_collector_at_jaeger(renders, name):
    docs = renders[name]
    names = set()
    for _, container, _ in ragmesh_containers(docs):
        env = container_env(docs, container)
        assert env["OTEL_EXPORTER_OTLP_PROTOCOL"] == "grpc"
        host, port = re.fullmatch(r"http://([a-z0-9-]+):(\d+)", env["OTEL_EXPORTER_OTLP_ENDPOINT"]).groups()
        workload, target, target_port = resolve_service_port(docs, host, int(port))
        assert workload["metadata"]["name"] == "otel-collector"
        assert target_port == named_port(target, "otlp-grpc")
        names.add(env["OTEL_SERVICE_NAME"])
    assert names == services_in(name)  # one service name per service: one node per hop in Jaeger

    collector_config = yaml.safe_load(
        next(d for d in of_kind(docs, "ConfigMap") if d["metadata"]["name"].startswith("otel-collector"))["data"][
            "config.yaml"
        ]
    )
    grpc_endpoint = collector_config["receivers"]["otlp"]["protocols"]["grpc"]["endpoint"]
    assert grpc_endpoint.endswith(f":{named_port(target, 'otlp-grpc')}")
    exporters = collector_config["service"]["pipelines"]["traces"]["exporters"]
    host, port = collector_config["exporters"][exporters[0]]["endpoint"].split(":")
    workload, jaeger, jaeger_port = resolve_service_port(docs, host, int(port))
    assert workload["metadata"]["name"] == "jaeger" and jaeger_port == named_port(jaeger, "otlp-grpc")
    ui = [p for p in by_name(docs, "Service", "jaeger")["spec"]["ports"] if p["name"] == "ui"]
    assert ui and ui[0]["port"] == 16686


@pytest.mark.parametrize(
    "name", [n for n in RENDER_NAMES if "observability" not in n and n.split("+")[0] not in ("default", "dev", "prod")]
)
def test_without_the_observability_component_nothing_is_exported(renders, name):
    docs = renders[name]
    for _, container, _ in ragmesh_containers(docs):
        assert "OTEL_EXPORTER_OTLP_ENDPOINT" not in container_env(docs, container)


@pytest.mark.parametrize("name", [n for n in RENDER_NAMES if "graph" in n.split("+")])
def test_the_graph_component_runs_one_graph_pod_on_a_volume_and_points_its_clients_at_it(renders, name):
    docs = renders[name]
    graph = by_name(docs, "StatefulSet", "graph")
    # One process owns the database files: one replica, its own volume, mounted where its data directory is.
    assert graph["spec"]["replicas"] == 1
    (claim,) = graph["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"] and claim["spec"]["resources"]["requests"]["storage"]
    container = graph["spec"]["template"]["spec"]["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts[claim["metadata"]["name"]] == container_env(docs, container)["RAGMESH_DATA_DIR"]
    # The StatefulSet's governing Service is headless; the clients dial the other one.
    assert by_name(docs, "Service", graph["spec"]["serviceName"])["spec"]["clusterIP"] == "None"
    clients = set()
    for _, client, service in ragmesh_containers(docs):
        env = container_env(docs, client)
        if service in ("gateway", "indexer", "answer"):
            assert env["RAGMESH_GRAPH_ENABLED"] == "true", f"{name}: {service}"
            host, port = env["RAGMESH_GRAPH_ADDR"].rsplit(":", 1)
            target, target_container, target_port = resolve_service_port(docs, host, int(port))
            assert target is graph and target_port == named_port(target_container, "grpc")
            clients.add(service)
        else:
            assert "RAGMESH_GRAPH_ADDR" not in env, f"{name}: {service}"
    assert clients == {"gateway", "indexer", "answer"}


@pytest.mark.parametrize("name", [n for n in RENDER_NAMES if "graph" not in n.split("+")])
def test_without_the_graph_component_nothing_runs_or_dials_a_graph(renders, name):
    docs = renders[name]
    assert not [d for d in docs if d["metadata"]["name"].startswith("graph") and d["kind"] != "NetworkPolicy"]
    for _, container, _ in ragmesh_containers(docs):
        env = container_env(docs, container)
        assert "RAGMESH_GRAPH_ENABLED" not in env and "RAGMESH_GRAPH_ADDR" not in env
