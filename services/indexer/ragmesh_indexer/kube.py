"""Kubernetes objects -> graph entities and the relations a reader of the manifests would draw. Pure: it gets the
parsed documents (`entity_files` reads the files).

Entities. The type is the object's kind, the key its namespace and name ("Deployment/ragmesh/gateway"; an object
of a namespaced kind without a namespace is in "default"); cluster-scoped kinds (CLUSTER_SCOPED) are keyed by name
alone ("Namespace/ragmesh"). A `kind: List` (what `kubectl get -o yaml` prints) stands for its items. The labels
are the object's labels as "key=value". Properties are the object flattened (`entities`), less what is noise or
must not be stored: metadata.managedFields and the last-applied-configuration annotation (a copy of the whole
object, a Secret's values included). A Secret keeps its keys only (the property "keys"): the values of data and
stringData are stored nowhere, neither in the graph nor in the text.

Containers (containers, initContainers and ephemeralContainers of a pod template) are child entities of type
Container, "Container/<namespace>/<workload>/<container>", with "init": true for init containers.

Relations (outgoing from the first entity):

- Service -[SELECTS]-> Deployment, StatefulSet, DaemonSet, ReplicaSet or Pod of its namespace whose pod labels
  include every label of the Service's selector (a Service without a selector selects nothing).
- workload (the kinds of WORKLOADS) -[USES]-> ServiceAccount: spec.serviceAccountName, else "default". The
  relation is sent even when the ServiceAccount is not among the files: the graph service writes it if the
  ServiceAccount is already in the graph, else reports it as dangling (the "default" ServiceAccount Kubernetes
  creates in every namespace is rarely in manifests, so expect it there).
- workload -[HAS]-> Container (with the container's index in its list).
- Container -[READS]-> ConfigMap or Secret: named by envFrom, by env valueFrom (configMapKeyRef, secretKeyRef) or
  by a pod volume (configMap, secret, projected sources) that the container mounts. Sent whether or not the
  ConfigMap or Secret is among the files.
- Container -[REFERENCES]-> Service of the files: when a value the container gets in its environment (env
  values, and the values of the ConfigMaps of the files it reads through envFrom or configMapKeyRef) names the
  Service. A value names a Service when, split at commas and spaces, a part is `name`, `name:port`,
  `name.namespace`, `name.namespace.svc[.cluster.local]` (with a port or not), or a URL whose host is one of
  those; names are DNS labels. A bare name is a Service of the container's namespace, unless it is the Service
  in front of the container's own pods (OTEL_SERVICE_NAME=gateway in the gateway is the pod naming itself, not
  a call); an address with a port, a namespace or a scheme counts whatever it names.
- HorizontalPodAutoscaler -[SCALES]-> its scaleTargetRef (sent whether or not the target is among the files).
- NetworkPolicy -[APPLIES_TO]-> workloads of its namespace whose pod labels match spec.podSelector (an empty
  selector: every workload of the namespace).
- PodDisruptionBudget -[PROTECTS]-> workloads of its namespace whose pod labels match spec.selector (matchLabels
  and matchExpressions In, NotIn, Exists, DoesNotExist; no selector: none, an empty one: all).

SELECTS, REFERENCES, APPLIES_TO and PROTECTS are drawn between the objects of one request only: they need the
other object's labels or existence, which the files give.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .entities import TYPE_RE, GraphEntity, Link, at, build, entity_invalid

CLUSTER_SCOPED = frozenset(
    {
        "APIService",
        "CertificateSigningRequest",
        "ClusterIssuer",
        "ClusterRole",
        "ClusterRoleBinding",
        "ComponentStatus",
        "CSIDriver",
        "CSINode",
        "CustomResourceDefinition",
        "FlowSchema",
        "IngressClass",
        "MutatingWebhookConfiguration",
        "Namespace",
        "Node",
        "PersistentVolume",
        "PriorityClass",
        "PriorityLevelConfiguration",
        "RuntimeClass",
        "StorageClass",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "VolumeAttachment",
    }
)
# The kinds with a pod template, and the path to it ("" for a Pod: its own metadata and spec).
WORKLOADS = {
    "Deployment": "spec.template",
    "StatefulSet": "spec.template",
    "DaemonSet": "spec.template",
    "ReplicaSet": "spec.template",
    "ReplicationController": "spec.template",
    "Job": "spec.template",
    "CronJob": "spec.jobTemplate.spec.template",
    "Pod": "",
}
SELECTABLE = frozenset({"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Pod"})
CONTAINER = "Container"
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
_PORT = re.compile(r"^([0-9]{1,5}|[a-z]([-a-z0-9]{0,13}[a-z0-9])?)$")


@dataclass(frozen=True)
class KubeObject:
    """One Kubernetes object of a file; `field` names it in errors ("files[0] document 2: ")."""

    body: Mapping[str, Any]
    field: str


@dataclass(frozen=True)
class _Parsed:
    kind: str
    namespace: str  # "" for a cluster-scoped kind
    name: str
    body: Mapping[str, Any]
    field: str

    @property
    def id(self) -> str:
        return "/".join(p for p in (self.kind, self.namespace, self.name) if p)

    @property
    def template(self) -> Mapping[str, Any]:
        """The pod template (metadata and spec) of a workload; {} for other kinds."""
        if self.kind not in WORKLOADS:
            return {}
        return _get(self.body, WORKLOADS[self.kind]) if WORKLOADS[self.kind] else self.body

    @property
    def pod_labels(self) -> Mapping[str, str]:
        return _mapping(_get(self.template, "metadata.labels"))

    @property
    def pod_spec(self) -> Mapping[str, Any]:
        return _mapping(_get(self.template, "spec"))


def is_kube_object(document: Any) -> bool:
    """Whether a parsed document is a Kubernetes object (it has apiVersion and kind)."""
    return isinstance(document, Mapping) and "apiVersion" in document and "kind" in document


def objects(document: Mapping[str, Any], field: str) -> list[KubeObject]:
    """The objects of one document: itself, or the items of a List."""
    if document.get("kind") == "List" or str(document.get("kind", "")).endswith("List") and "items" in document:
        items = document.get("items") or []
        if not isinstance(items, list):
            raise entity_invalid("a List's items is a list", at(field, "items"))
        return [KubeObject(item, at(field, f"items[{i}]")) for i, item in enumerate(items)]
    return [KubeObject(document, field)]


def entities(kube_objects: Sequence[KubeObject], *, max_property_chars: int) -> list[GraphEntity]:
    """The graph entities of the objects (each followed by its children), with the relations of the module's
    docstring."""
    parsed = [_parse(o) for o in kube_objects]
    config_maps = {(p.namespace, p.name): _mapping(p.body.get("data")) for p in parsed if p.kind == "ConfigMap"}
    services = {(p.namespace, p.name): p for p in parsed if p.kind == "Service"}
    workloads = [p for p in parsed if p.kind in WORKLOADS]
    out: list[GraphEntity] = []
    for p in parsed:
        raw = _entity_input(p)
        raw["relations"] = [{"type": link.type, "target_id": link.target_id} for link in _relations(p, workloads)]
        template = WORKLOADS.get(p.kind)
        prefix = f"{template}.spec." if template else "spec."
        built = build(
            raw,
            field=p.field,
            max_property_chars=max_property_chars,
            child_types={f"{prefix}{name}": CONTAINER for name in _CONTAINER_LISTS} if template is not None else {},
        )
        if template is not None:
            _container_relations(p, built, config_maps, services)
        out.extend(built)
    return out


def service_references(value: str, namespace: str) -> list[tuple[str, str]]:
    """The (namespace, name) of each Service a value may name (see the module's docstring)."""
    found: list[tuple[str, str]] = []
    for part in re.split(r"[\s,;]+", value.strip()):
        if not part:
            continue
        if "://" in part:
            try:
                host = urlsplit(part).hostname or ""
            except ValueError:
                continue
        else:
            host, colon, port = part.partition(":")
            if colon and not _PORT.fullmatch(port):
                continue
        labels = host.rstrip(".").split(".")
        if not all(_DNS_LABEL.fullmatch(label) for label in labels) or labels[0][:1].isdigit():
            continue
        if len(labels) == 1:
            found.append((namespace, labels[0]))
        elif len(labels) == 2 or labels[2] == "svc":
            found.append((labels[1], labels[0]))
    return found


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """A Kubernetes label selector (matchLabels and matchExpressions) against labels; {} matches everything."""
    for key, value in _mapping(selector.get("matchLabels")).items():
        if labels.get(key) != value:
            return False
    for expression in selector.get("matchExpressions") or []:
        key, operator = expression.get("key"), expression.get("operator")
        values = expression.get("values") or []
        if operator == "In":
            ok = key in labels and labels[key] in values
        elif operator == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif operator == "Exists":
            ok = key in labels
        elif operator == "DoesNotExist":
            ok = key not in labels
        else:
            ok = False
        if not ok:
            return False
    return True


def _parse(o: KubeObject) -> _Parsed:
    body = o.body
    if not isinstance(body, Mapping):
        raise entity_invalid("a Kubernetes object is a mapping", o.field)
    kind = body.get("kind")
    if not isinstance(kind, str) or not TYPE_RE.fullmatch(kind):
        raise entity_invalid(f"kind {str(kind)[:70]!r} is not a Kubernetes kind", at(o.field, "kind"))
    metadata = _mapping(body.get("metadata"))
    name = metadata.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        raise entity_invalid(f"a {kind} needs metadata.name (without '/')", at(o.field, "metadata.name"))
    namespace = "" if kind in CLUSTER_SCOPED else metadata.get("namespace") or "default"
    if not isinstance(namespace, str) or "/" in namespace:
        raise entity_invalid("metadata.namespace is a name (without '/')", at(o.field, "metadata.namespace"))
    return _Parsed(kind, namespace, name, body, o.field)


def _entity_input(p: _Parsed) -> dict[str, Any]:
    """The EntityInput (as a dict) of an object: its properties less what must not be stored."""
    body = dict(p.body)
    metadata = dict(_mapping(body.get("metadata")))
    metadata.pop("managedFields", None)
    annotations = {k: v for k, v in _mapping(metadata.get("annotations")).items() if k != _LAST_APPLIED}
    if "annotations" in metadata:
        metadata["annotations"] = annotations
    if p.namespace:
        metadata["namespace"] = p.namespace
    body["metadata"] = metadata
    if p.kind == "Secret":
        keys = {*_mapping(body.pop("data", None)), *_mapping(body.pop("stringData", None))}
        body["keys"] = sorted(keys)
    if p.kind in WORKLOADS:
        body = _mark_init_containers(body, WORKLOADS[p.kind])
    labels = _mapping(metadata.get("labels"))
    return {
        "type": p.kind,
        "primary_key": ["metadata.namespace", "metadata.name"] if p.namespace else ["metadata.name"],
        "properties": body,
        "labels": [f"{k}={v}" for k, v in labels.items()],
    }


def _mark_init_containers(body: dict[str, Any], template: str) -> dict[str, Any]:
    """A copy of the workload with "init": true on each init container (the copy is shallow but for that path)."""
    path = [*template.split("."), "spec"] if template else ["spec"]
    spec = _get(body, ".".join(path))
    inits = spec.get("initContainers") if isinstance(spec, Mapping) else None
    if not isinstance(inits, list):
        return body
    marked = [{**c, "init": True} if isinstance(c, Mapping) else c for c in inits]
    return _replace(body, [*path, "initContainers"], marked)


def _replace(obj: Mapping[str, Any], path: list[str], value: Any) -> dict[str, Any]:
    head, *rest = path
    return {**obj, head: _replace(_mapping(obj.get(head)), rest, value) if rest else value}


def _selected(service: _Parsed, workloads: Iterable[_Parsed]) -> list[str]:
    """The ids of the workloads a Service selects."""
    selector = _mapping(_mapping(service.body.get("spec")).get("selector"))
    if not selector:
        return []
    return [
        w.id
        for w in workloads
        if w.namespace == service.namespace
        and w.kind in SELECTABLE
        and all(w.pod_labels.get(k) == v for k, v in selector.items())
    ]


def _relations(p: _Parsed, workloads: Iterable[_Parsed]) -> list[Link]:
    spec = _mapping(p.body.get("spec"))
    same_ns = [w for w in workloads if w.namespace == p.namespace]
    if p.kind == "Service":
        return [Link("SELECTS", target) for target in _selected(p, same_ns)]
    if p.kind in WORKLOADS:
        account = p.pod_spec.get("serviceAccountName") or p.pod_spec.get("serviceAccount") or "default"
        return [Link("USES", f"ServiceAccount/{p.namespace}/{account}")]
    if p.kind == "HorizontalPodAutoscaler":
        target = _mapping(spec.get("scaleTargetRef"))
        kind, name = target.get("kind"), target.get("name")
        if isinstance(kind, str) and TYPE_RE.fullmatch(kind) and isinstance(name, str) and name and "/" not in name:
            return [Link("SCALES", f"{kind}/{p.namespace}/{name}")]
        return []
    if p.kind == "NetworkPolicy":
        selector = _mapping(spec.get("podSelector"))
        return [Link("APPLIES_TO", w.id) for w in same_ns if selector_matches(selector, w.pod_labels)]
    if p.kind == "PodDisruptionBudget" and isinstance(spec.get("selector"), Mapping):
        return [Link("PROTECTS", w.id) for w in same_ns if selector_matches(spec["selector"], w.pod_labels)]
    return []


def _container_relations(
    p: _Parsed,
    built: list[GraphEntity],
    config_maps: Mapping[tuple[str, str], Mapping[str, Any]],
    services: Mapping[tuple[str, str], _Parsed],
) -> None:
    """Add each container's READS and REFERENCES to its child entity in `built`."""
    by_id = {e.id: e for e in built}
    volumes = {v.get("name"): _volume_sources(v) for v in p.pod_spec.get("volumes") or [] if isinstance(v, Mapping)}
    for list_name in _CONTAINER_LISTS:
        for container in p.pod_spec.get(list_name) or []:
            if not isinstance(container, Mapping) or not isinstance(container.get("name"), str):
                continue
            entity = by_id.get(f"{CONTAINER}/{p.namespace}/{p.name}/{container['name']}")
            if entity is None:
                continue
            reads: list[tuple[str, str]] = []
            values: list[str] = []
            for source in container.get("envFrom") or []:
                if cm := _name(source, "configMapRef"):
                    reads.append(("ConfigMap", cm))
                    values.extend(v for v in config_maps.get((p.namespace, cm), {}).values() if isinstance(v, str))
                if secret := _name(source, "secretRef"):
                    reads.append(("Secret", secret))
            for env in container.get("env") or []:
                if not isinstance(env, Mapping):
                    continue
                if isinstance(env.get("value"), str):
                    values.append(env["value"])
                value_from = _mapping(env.get("valueFrom"))
                if cm := _name(value_from, "configMapKeyRef"):
                    reads.append(("ConfigMap", cm))
                    key = _mapping(value_from.get("configMapKeyRef")).get("key")
                    known = config_maps.get((p.namespace, cm), {})
                    if isinstance(key, str) and isinstance(known.get(key), str):
                        values.append(known[key])
                if secret := _name(value_from, "secretKeyRef"):
                    reads.append(("Secret", secret))
            for mount in container.get("volumeMounts") or []:
                if isinstance(mount, Mapping):
                    reads.extend(volumes.get(mount.get("name"), []))
            for kind, name in dict.fromkeys(reads):
                entity.relations.append(Link("READS", f"{kind}/{p.namespace}/{name}"))
            bare = {v.strip() for v in values}
            referenced = dict.fromkeys(ref for value in values for ref in service_references(value, p.namespace))
            for namespace, name in referenced:
                service = services.get((namespace, name))
                if service is None or (name in bare and p.id in _selected(service, [p])):
                    continue  # not a Service of the files, or a bare name of the pod's own Service
                entity.relations.append(Link("REFERENCES", f"Service/{namespace}/{name}"))


def _volume_sources(volume: Mapping[str, Any]) -> list[tuple[str, str]]:
    found: list[tuple[str, str]] = []
    if cm := _name(volume, "configMap"):
        found.append(("ConfigMap", cm))
    secret = _mapping(volume.get("secret")).get("secretName")
    if isinstance(secret, str) and secret:
        found.append(("Secret", secret))
    for source in _mapping(volume.get("projected")).get("sources") or []:
        if cm := _name(source, "configMap"):
            found.append(("ConfigMap", cm))
        if secret := _name(source, "secret"):
            found.append(("Secret", secret))
    return found


def _name(obj: Any, key: str) -> str:
    """obj[key].name when it is a usable name, else ""."""
    name = _mapping(_mapping(obj).get(key)).get("name")
    return name if isinstance(name, str) and name and "/" not in name else ""


def _get(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = _mapping(obj).get(part)
    return obj if obj is not None else {}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}
