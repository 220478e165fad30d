"""Kubernetes manifests as graph entities: keys, containers, the derived relations, Secrets without their values,
and refusals naming the file, the document and the field. Small manifests written here; the repository's own
render is test_indexer_kube_render.py."""

from __future__ import annotations

import json
import textwrap

import grpc
import pytest
from ragmesh_common.errors import RagmeshError
from ragmesh_common.reasons import Reason
from ragmesh_indexer.entity_files import EntityFile, read
from ragmesh_indexer.kube import selector_matches, service_references

SHOP = textwrap.dedent(
    """\
    apiVersion: v1
    kind: Namespace
    metadata: {name: shop}
    ---
    apiVersion: apps/v1
    kind: Deployment
    metadata: {name: frontend, namespace: shop, labels: {app: frontend}}
    spec:
      replicas: 2
      template:
        metadata: {labels: {app: frontend, tier: web}}
        spec:
          serviceAccountName: web
          initContainers:
            - name: migrate
              image: migrate:1
              envFrom: [{secretRef: {name: db-creds}}]
          containers:
            - name: app
              image: frontend:1
              env:
                - {name: CART_URL, value: "http://cart:8080/api"}
                - {name: PAY_ADDR, value: "payments.billing.svc.cluster.local:443"}
                - {name: MODE, value: "cart-less"}
                - {name: OTEL_SERVICE_NAME, value: frontend}
                - {name: TOKEN, valueFrom: {secretKeyRef: {name: api-token, key: token}}}
                - {name: LEVEL, valueFrom: {configMapKeyRef: {name: settings, key: catalog}}}
              envFrom: [{configMapRef: {name: frontend-env}}]
              volumeMounts: [{name: certs, mountPath: /certs}]
            - name: sidecar
              image: proxy:1
              env: [{name: HEALTH, value: "http://frontend/healthz"}]
          volumes:
            - {name: certs, projected: {sources: [{secret: {name: tls}}, {configMap: {name: ca}}]}}
            - {name: unused, configMap: {name: never-mounted}}
    ---
    apiVersion: v1
    kind: Service
    metadata: {name: frontend, namespace: shop}
    spec: {selector: {app: frontend}, ports: [{name: http, port: 80}]}
    ---
    apiVersion: v1
    kind: Service
    metadata: {name: cart, namespace: shop}
    spec: {selector: {app: cart}}
    ---
    apiVersion: v1
    kind: Service
    metadata: {name: catalog, namespace: shop}
    spec: {selector: {app: frontend, tier: api}}
    ---
    apiVersion: v1
    kind: Service
    metadata: {name: payments, namespace: billing}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: frontend-env, namespace: shop}
    data: {SEARCH: "catalog:9000", LOG: INFO}
    ---
    apiVersion: v1
    kind: ConfigMap
    metadata: {name: settings, namespace: shop}
    data: {catalog: "catalog.shop"}
    ---
    apiVersion: v1
    kind: Secret
    metadata:
      name: api-token
      namespace: shop
      annotations:
        kubectl.kubernetes.io/last-applied-configuration: '{"data":{"token":"c3VwZXJzZWNyZXQ="}}'
    data: {token: c3VwZXJzZWNyZXQ=}
    stringData: {password: hunter2-very-secret}
    ---
    apiVersion: autoscaling/v2
    kind: HorizontalPodAutoscaler
    metadata: {name: frontend, namespace: shop}
    spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: frontend}, maxReplicas: 5}
    ---
    apiVersion: networking.k8s.io/v1
    kind: NetworkPolicy
    metadata: {name: all, namespace: shop}
    spec: {podSelector: {}}
    ---
    apiVersion: networking.k8s.io/v1
    kind: NetworkPolicy
    metadata: {name: web-only, namespace: shop}
    spec: {podSelector: {matchLabels: {tier: web}}}
    ---
    apiVersion: policy/v1
    kind: PodDisruptionBudget
    metadata: {name: frontend, namespace: shop}
    spec:
      minAvailable: 1
      selector:
        matchExpressions:
          - {key: app, operator: In, values: [frontend, cart]}
          - {key: canary, operator: DoesNotExist}
    ---
    apiVersion: v1
    kind: Pod
    metadata: {name: debug, labels: {app: debug}}
    spec: {containers: [{name: shell, image: busybox}]}
    """
)


@pytest.fixture(scope="module")
def shop():
    return {e.id: e for e in read([EntityFile(SHOP.encode(), "shop.yaml")], max_property_chars=250)}


def targets(entity, relation: str) -> set[str]:
    return {link.target_id for link in entity.relations if link.type == relation}


def test_kind_is_the_type_and_namespace_plus_name_the_key(shop):
    assert "Deployment/shop/frontend" in shop
    assert "Namespace/shop" in shop  # cluster-scoped: the name alone
    assert "Pod/default/debug" in shop  # no namespace: "default"
    assert shop["Deployment/shop/frontend"].labels == ["app=frontend"]
    assert shop["Deployment/shop/frontend"].properties["spec.replicas"] == 2


def test_containers_and_init_containers_are_container_children(shop):
    deployment = shop["Deployment/shop/frontend"]
    assert targets(deployment, "HAS") >= {
        "Container/shop/frontend/app",
        "Container/shop/frontend/sidecar",
        "Container/shop/frontend/migrate",
    }
    assert shop["Container/shop/frontend/migrate"].properties["init"] is True
    assert shop["Container/shop/frontend/app"].parent_id == "Deployment/shop/frontend"


def test_a_service_selects_the_workloads_whose_pod_labels_hold_its_selector(shop):
    assert targets(shop["Service/shop/frontend"], "SELECTS") == {"Deployment/shop/frontend"}
    assert targets(shop["Service/shop/catalog"], "SELECTS") == set()  # tier=api is not on the pods
    assert targets(shop["Service/billing/payments"], "SELECTS") == set()  # no selector


def test_a_workload_uses_its_service_account(shop):
    assert targets(shop["Deployment/shop/frontend"], "USES") == {"ServiceAccount/shop/web"}
    assert targets(shop["Pod/default/debug"], "USES") == {"ServiceAccount/default/default"}


def test_a_container_references_the_services_its_environment_names(shop):
    # a URL, a FQDN with a port, and values of ConfigMaps it reads (envFrom, configMapKeyRef); "cart-less" is
    # no Service, and neither is "INFO"; the bare "frontend" is the pod naming its own Service
    assert targets(shop["Container/shop/frontend/app"], "REFERENCES") == {
        "Service/shop/cart",
        "Service/billing/payments",
        "Service/shop/catalog",
    }
    # a URL to its own Service is a call all the same
    assert targets(shop["Container/shop/frontend/sidecar"], "REFERENCES") == {"Service/shop/frontend"}


def test_a_container_reads_the_config_maps_and_secrets_it_is_given(shop):
    assert targets(shop["Container/shop/frontend/app"], "READS") == {
        "ConfigMap/shop/frontend-env",
        "ConfigMap/shop/settings",
        "Secret/shop/api-token",
        "Secret/shop/tls",  # projected volume, mounted
        "ConfigMap/shop/ca",
    }
    assert targets(shop["Container/shop/frontend/migrate"], "READS") == {"Secret/shop/db-creds"}
    # a volume nobody mounts is read by nobody
    assert all("ConfigMap/shop/never-mounted" not in targets(e, "READS") for e in shop.values())


def test_hpa_scales_network_policies_apply_and_pdbs_protect(shop):
    assert targets(shop["HorizontalPodAutoscaler/shop/frontend"], "SCALES") == {"Deployment/shop/frontend"}
    assert targets(shop["NetworkPolicy/shop/all"], "APPLIES_TO") == {"Deployment/shop/frontend"}
    assert targets(shop["NetworkPolicy/shop/web-only"], "APPLIES_TO") == {"Deployment/shop/frontend"}
    assert targets(shop["PodDisruptionBudget/shop/frontend"], "PROTECTS") == {"Deployment/shop/frontend"}


def test_a_secret_keeps_its_keys_and_its_values_are_nowhere(shop):
    secret = shop["Secret/shop/api-token"]
    assert secret.properties["keys"] == ["password", "token"]
    everything = json.dumps([(e.properties, e.all_properties, e.text()) for e in shop.values()])
    for value in ("c3VwZXJzZWNyZXQ=", "hunter2-very-secret", "supersecret"):
        assert value not in everything


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ({}, {"a": "1"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "2"}}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "3"]}]}, {"a": "1"}, True),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Unknown"}]}, {"a": "1"}, False),
    ],
)
def test_label_selectors(selector, labels, matches):
    assert selector_matches(selector, labels) is matches


@pytest.mark.parametrize(
    ("value", "found"),
    [
        ("cart", [("ns", "cart")]),
        ("cart:8080", [("ns", "cart")]),
        ("cart.other", [("other", "cart")]),
        ("cart.other.svc.cluster.local:80", [("other", "cart")]),
        ("http://cart:8080/path?q=1", [("ns", "cart")]),
        ("grpc://cart.other.svc:50051", [("other", "cart")]),
        ("a:1,b:2", [("ns", "a"), ("ns", "b")]),
        ("api.example.com", []),
        ("/tmp/data", []),
        ("0.0.0.0", []),
        ("INFO", []),
        ("key=value", []),
        ("cart:80:90", []),
    ],
)
def test_values_that_name_services_are_parsed(value, found):
    assert service_references(value, "ns") == found


def test_a_list_kind_stands_for_its_items_and_json_reads_like_yaml():
    items = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "web", "namespace": "shop"}},
            {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}},
        ],
    }
    found = read([EntityFile(json.dumps(items).encode(), "list.json")], max_property_chars=250)
    assert [e.id for e in found] == ["ServiceAccount/shop/web", "ConfigMap/default/c"]


def refused(text: str, filename: str = "bad.yaml") -> RagmeshError:
    with pytest.raises(RagmeshError) as caught:
        read([EntityFile(b"", "empty.yaml"), EntityFile(text.encode(), filename)], max_property_chars=250)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
    return caught.value


def test_bad_yaml_is_refused_with_the_file_and_line():
    error = refused("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [unclosed\n")
    assert error.reason == Reason.GRAPH_FILE_INVALID
    assert error.metadata["filename"] == "bad.yaml"
    assert error.metadata["line"] == "5"
    assert "bad.yaml line 5" in error.message


def test_bad_json_is_refused_with_the_file_and_line():
    error = refused('{"apiVersion": "v1",\n "kind": }', "bad.json")
    assert error.reason == Reason.GRAPH_FILE_INVALID
    assert error.metadata["line"] == "2"


def test_text_that_is_not_utf8_is_refused():
    with pytest.raises(RagmeshError) as caught:
        read([EntityFile(b"\xff\xfe\x00bad", "x.yaml")], max_property_chars=250)
    assert caught.value.reason == Reason.GRAPH_FILE_INVALID


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("apiVersion: v1\nkind: ConfigMap\nmetadata: {namespace: a}\n", "files[1] document 1: metadata.name"),
        (
            "---\nkind: X\napiVersion: v1\nmetadata: {name: ok}\n---\napiVersion: v1\nkind: 9x\nmetadata: {name: b}\n",
            "files[1] document 2: kind",
        ),
        (
            "apiVersion: v1\nkind: List\nitems:\n  - {apiVersion: v1, kind: Secret, metadata: {}}\n",
            "files[1] document 1: items[0].metadata.name",
        ),
        ("just: a mapping\n", "files[1] document 1: "),
    ],
)
def test_a_bad_document_is_refused_naming_file_document_and_field(text, field):
    error = refused(text)
    assert error.reason == Reason.ENTITY_INVALID
    assert [v.field for v in error.field_violations] == [field]


def test_a_yaml_alias_bomb_is_refused_before_it_is_walked():
    lines = ["apiVersion: v1", "kind: ConfigMap", "metadata: {name: lol}", "a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]  # 10^9 leaves
    lines += ["data: {bomb: *a8}"]
    with pytest.raises(RagmeshError) as caught:
        read([EntityFile("\n".join(lines).encode(), "lol.yaml")], max_property_chars=250)
    assert caught.value.reason == Reason.ENTITY_INVALID
    assert caught.value.field_violations[0].field == "files[0] document 1: "
