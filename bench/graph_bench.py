"""Graph RAG at scale: a synthetic Kubernetes cluster's entities through the mesh's `IngestEntities` (dual storage:
the graph service, the embedder and the vector store) against LadybugDB's own bulk insert of the same nodes and
relations; then the graph service's read paths and its resident memory.

    .venv/bin/python -m bench.graph_bench [--entities 10000 100000] [--backends hash local] [--local-max 10000]
        [--queries 200] [--json bench/results/<date>-graph.json]

The cluster (`generate`, deterministic for a seed): namespaces of 8-32 apps; each app a Deployment (1 in 10 a
StatefulSet) with 1-3 containers, a Service selecting it (9 in 10), its own ServiceAccount (half; else the
namespace's `default` one), 0-2 ConfigMaps, a Secret (half) and an HPA (3 in 10 Deployments). Containers
REFERENCE 0-3 Services of apps before theirs (in their namespace, 1 in 10 in another) and READ 0-2 of their app's
ConfigMaps and its Secret. Every relation points at an entity emitted before it, so any cut into requests (or the
indexer's batches) leaves none dangling. Containers are entities of their own (type `Container`, key namespace +
workload + name, so the ids are the Kubernetes ingestor's) with a HAS relation from their workload: an
EntityInput's relations start from the entity itself, so a child made from a list property could not carry its
own REFERENCES and READS.

The entities go to the indexer as JSON Lines of EntityInput objects (`IngestEntitiesRequest.files`): by default
one .jsonl file of them all in one request, as `ragmesh graph ingest FILE` sends it; `--request-entities N` cuts
them into files of N, sent one request at a time. The mesh runs as two processes: `ragmesh serve graph` alone (so
its resident memory is its own) and `ragmesh serve embedder search indexer` (RAGMESH_GRAPH_ENABLED=true). The
baseline writes one CSV per node table and per (relation, from, to) into a temporary folder and loads them with
`COPY ... FROM` into an empty database laid out as the graph service lays out its own (a node table per type: `id`
primary key, `_labels`, `_alternative_keys`, `_parent_id`, one column per flattened property; a relation table
per relation type with `index`), the engine's fastest documented bulk path. The ratio of the two rates is the
result: what dual storage and the service's transactions cost. A third row sends the same entities straight to
the graph service (`UpsertEntities`, 256 a request, as the indexer batches them): the graph's share of the cost.

Then, with the graph loaded (on the first backend of each size): ExploreEntity p50/p95 at depth 1, 2 and 3 on
random entities, ShortestPaths between random pairs of the ontology's types (gRPC, one client, straight to the
graph service), and the graph process's resident memory before and after the load.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import random
import shutil
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"

APPS = (
    "cart checkout payments search catalog auth users orders inventory shipping email recommend ads frontend "
    "gateway billing reports media chat notify ledger pricing quotes reviews session profile"
).split()
TEAMS = ("core", "growth", "platform", "data", "edge", "sre", "mobile", "billing")
SIDECARS = ("istio-proxy", "log-shipper", "metrics-exporter", "vault-agent")
CONFIG_KEYS = ("LOG_LEVEL", "FEATURE_FLAGS", "TIMEOUT_MS", "REGION", "CACHE_TTL", "DB_POOL", "MAX_CONNS", "RETRIES")
SECRET_KEYS = ("password", "username", "token", "tls.crt", "tls.key", "api-key")
CONTAINER_KEY = ("namespace", "workload", "name")  # Container/<namespace>/<workload>/<name>, as the Kubernetes ingestor
ENV_NAMES = ("PORT", "LOG_LEVEL", "DATABASE_URL", "OTEL_EXPORTER_OTLP_ENDPOINT", "REDIS_ADDR", "JAVA_OPTS")


# --- the cluster -------------------------------------------------------------------------------------------------
def _meta(namespace: str, name: str, **labels: str) -> dict[str, Any]:
    return {"name": name, "namespace": namespace, "labels": labels}


def _entity(kind: str, properties: dict, relations: Sequence[tuple[str, str]] = (), key: Sequence[str] = ()) -> dict:
    return {
        "type": kind,
        "primary_key": list(key or ("metadata.namespace", "metadata.name")),
        "properties": properties,
        "labels": [],
        "alternative_keys": [],
        "relations": [{"type": t, "target_id": target} for t, target in relations],
    }


def entity_id(entity: dict) -> str:
    """`<type>/<primary key values joined by '/'>`, the values read from the properties by their dotted paths."""
    values = []
    for path in entity["primary_key"]:
        value: Any = entity["properties"]
        for part in path.split("."):
            value = value[part]
        values.append(str(value))
    return f"{entity['type']}/{'/'.join(values)}"


def generate(entities: int, seed: int = 49) -> list[dict]:
    """`entities` EntityInput objects (dicts, as in a .jsonl file) of a synthetic cluster, every relation pointing
    at an entity before it."""
    cluster = _Cluster(random.Random(seed))
    while len(cluster.out) < entities:
        cluster.namespace(entities)
    return cluster.out[:entities]


class _Cluster:
    """The entities emitted so far and the Services their containers may reference."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.out: list[dict] = []
        self.services: list[str] = []  # every Service's id so far
        self.namespaces = 0

    def namespace(self, until: int) -> None:
        rng, team = self.rng, self.rng.choice(TEAMS)
        ns = f"{team}-{self.namespaces}"
        self.namespaces += 1
        namespace = {"metadata": {"name": ns, "labels": {"team": team}}, "status": {"phase": "Active"}}
        self.out.append(_entity("Namespace", namespace, key=("metadata.name",)))
        default = {"metadata": _meta(ns, "default"), "automountServiceAccountToken": True}
        self.out.append(_entity("ServiceAccount", default))
        local: list[str] = []  # this namespace's Services so far
        for number in range(rng.randint(8, 32)):
            if len(self.out) >= until:
                return
            self.app(ns, team, f"{rng.choice(APPS)}-{number}", local)

    def app(self, ns: str, team: str, app: str, local: list[str]) -> None:
        rng, out = self.rng, self.out
        sa = "default"
        if rng.random() < 0.5:
            sa = app
            out.append(
                _entity("ServiceAccount", {"metadata": _meta(ns, app, app=app), "automountServiceAccountToken": False})
            )
        configmaps = []
        for c in range(rng.choices((0, 1, 2), (3, 5, 2))[0]):
            name = f"{app}-config" if c == 0 else f"{app}-env"
            data = {k: str(rng.randint(1, 999)) for k in rng.sample(CONFIG_KEYS, rng.randint(2, 5))}
            out.append(_entity("ConfigMap", {"metadata": _meta(ns, name, app=app), "data": data}))
            configmaps.append(f"ConfigMap/{ns}/{name}")
        secret = None
        if rng.random() < 0.5:
            keys = rng.sample(SECRET_KEYS, rng.randint(1, 3))  # a Secret's keys only, never its values
            out.append(
                _entity("Secret", {"metadata": _meta(ns, f"{app}-secret", app=app), "type": "Opaque", "keys": keys})
            )
            secret = f"Secret/{ns}/{app}-secret"
        kind = "StatefulSet" if rng.random() < 0.1 else "Deployment"
        names = [app, *rng.sample(SIDECARS, rng.choices((0, 1, 2), (6, 3, 1))[0])]
        for index, name in enumerate(names):
            relations = []
            for _ in range(rng.choices((0, 1, 2, 3), (35, 35, 20, 10))[0]):
                pool = local if local and rng.random() < 0.9 else self.services
                if pool:
                    relations.append(("REFERENCES", rng.choice(pool)))
            if index == 0:
                relations += [("READS", c) for c in rng.sample(configmaps, rng.randint(0, len(configmaps)))]
                if secret and rng.random() < 0.7:
                    relations.append(("READS", secret))
            out.append(
                _entity("Container", self.container(ns, team, app, name, index), sorted(set(relations)), CONTAINER_KEY)
            )
        workload = f"{kind}/{ns}/{app}"
        labels = {"app": app, "team": team, "tier": rng.choice(("web", "api", "worker", "db"))}
        spec = {
            "replicas": rng.choice((1, 2, 3, 3, 5)),
            "selector": {"matchLabels": {"app": app}},
            "template": {"spec": {"serviceAccountName": sa}},
        }
        uses = [("USES", f"ServiceAccount/{ns}/{sa}"), *(("HAS", f"Container/{ns}/{app}/{n}") for n in names)]
        out.append(_entity(kind, {"metadata": _meta(ns, app, **labels), "spec": spec}, uses))
        if rng.random() < 0.9:
            spec = {"type": "ClusterIP", "ports": ["80"], "selector": {"app": app}}
            out.append(_entity("Service", {"metadata": _meta(ns, app, app=app), "spec": spec}, [("SELECTS", workload)]))
            local.append(f"Service/{ns}/{app}")
            self.services.append(f"Service/{ns}/{app}")
        if kind == "Deployment" and rng.random() < 0.3:
            spec = {"minReplicas": 2, "maxReplicas": rng.choice((5, 10, 20)), "targetCPUUtilizationPercentage": 70}
            hpa = {"metadata": _meta(ns, app, app=app), "spec": spec}
            out.append(_entity("HorizontalPodAutoscaler", hpa, [("SCALES", workload)]))

    def container(self, ns: str, team: str, app: str, name: str, index: int) -> dict:
        rng = self.rng
        version = f"1.{rng.randint(0, 40)}.{rng.randint(0, 9)}"
        return {
            "namespace": ns,
            "workload": app,
            "name": name,
            "image": f"registry.example.com/{team}/{app if index == 0 else name}:{version}",
            "imagePullPolicy": "IfNotPresent",
            "ports": [str(8080 + index)],
            "env": rng.sample(ENV_NAMES, rng.randint(0, 4)),
            "resources": {
                "requests": {"cpu": f"{rng.choice((50, 100, 250))}m", "memory": f"{rng.choice((64, 128, 256))}Mi"},
                "limits": {"cpu": f"{rng.choice((500, 1000, 2000))}m", "memory": f"{rng.choice((256, 512))}Mi"},
            },
        }


def write_jsonl(entities: Sequence[dict], path: Path) -> None:
    with path.open("w", encoding="utf-8") as f:
        for entity in entities:
            f.write(json.dumps(entity, separators=(",", ":")) + "\n")


def flatten(properties: dict, prefix: str = "") -> dict[str, Any]:
    """Nested objects flattened with dot notation (lists of scalars stay lists), as the indexer does."""
    out: dict[str, Any] = {}
    for name, value in properties.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{name}."))
        else:
            out[f"{prefix}{name}"] = value
    return out


# --- LadybugDB's own bulk insert ---------------------------------------------------------------------------------
_TYPES = ((bool, "BOOLEAN"), (int, "INT64"), (float, "DOUBLE"), (list, "STRING[]"), (str, "STRING"))


def _column_type(value: Any) -> str:
    return next(name for kind, name in _TYPES if isinstance(value, kind))


def _csv_value(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ",".join(str(v) for v in value) + "]"
    return value


def tables(entities: Sequence[dict]) -> tuple[dict[str, dict], dict[tuple[str, str, str], list[tuple[str, str]]]]:
    """The graph the entities make: {type: {"columns": {name: type}, "rows": [...]}} and
    {(relation, from type, to type): [(from id, to id)]}."""
    nodes: dict[str, dict] = {}
    relations: dict[tuple[str, str, str], list[tuple[str, str]]] = defaultdict(list)
    for entity in entities:
        kind, eid = entity["type"], entity_id(entity)
        table = nodes.setdefault(kind, {"columns": {}, "rows": []})
        row = flatten(entity["properties"])
        for name, value in row.items():
            table["columns"].setdefault(name, _column_type(value))
        row.update(id=eid, _labels=entity["labels"], _alternative_keys=entity["alternative_keys"])
        table["rows"].append(row)
        for relation in entity["relations"]:
            target = relation["target_id"]
            relations[(relation["type"], kind, target.split("/", 1)[0])].append((eid, target))
    return nodes, dict(relations)


def ladybug_bulk(entities: Sequence[dict], folder: Path, buffer_pool_mb: int = 128) -> dict:
    """Load the entities' graph into an empty LadybugDB database with COPY FROM CSV; seconds and counts. The
    buffer pool is the graph service's default (RAGMESH_GRAPH_BUFFER_POOL_MB)."""
    import ladybug

    started = time.perf_counter()
    nodes, relations = tables(entities)
    csv_dir = folder / "csv"
    csv_dir.mkdir(parents=True)
    fixed = {"id": "STRING", "_labels": "STRING[]", "_alternative_keys": "STRING[]", "_parent_id": "STRING"}
    node_files = {}
    for kind, table in nodes.items():
        columns = {**fixed, **table["columns"]}
        path = csv_dir / f"{kind}.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(columns)
            writer.writerows([_csv_value(row.get(c)) for c in columns] for row in table["rows"])
        node_files[kind] = (columns, path)
    rel_files = {}
    for (rel, source, target), pairs in relations.items():
        path = csv_dir / f"{rel}-{source}-{target}.csv"
        with path.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(("from", "to", "index"))
            writer.writerows((a, b, "") for a, b in pairs)
        rel_files[(rel, source, target)] = path
    csv_seconds = time.perf_counter() - started

    started = time.perf_counter()
    db = ladybug.Database(str(folder / "db"), buffer_pool_size=buffer_pool_mb << 20)
    conn = ladybug.Connection(db)
    for kind, (columns, _) in node_files.items():
        cols = ", ".join(f"`{name}` {kind_}" for name, kind_ in columns.items())
        conn.execute(f"CREATE NODE TABLE `{kind}`({cols}, PRIMARY KEY(id))")
    pairs_of: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for rel, source, target in rel_files:
        pairs_of[rel].append((source, target))
    for rel, pairs in pairs_of.items():
        ends = ", ".join(f"FROM `{a}` TO `{b}`" for a, b in pairs)
        conn.execute(f"CREATE REL TABLE `{rel}`({ends}, `index` INT64)")
    schema_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for kind, (_, path) in node_files.items():
        conn.execute(f"COPY `{kind}` FROM '{path}' (header=true)")
    for (rel, source, target), path in rel_files.items():
        conn.execute(f"COPY `{rel}` FROM '{path}' (from='{source}', to='{target}', header=true)")
    copy_seconds = time.perf_counter() - started
    node_count = conn.execute("MATCH (n) RETURN count(n)").get_next()[0]  # type: ignore[union-attr]
    rel_count = conn.execute("MATCH ()-[r]->() RETURN count(r)").get_next()[0]  # type: ignore[union-attr]
    conn.close()
    db.close()
    total = csv_seconds + schema_seconds + copy_seconds
    return {
        "entities": node_count,
        "relations": rel_count,
        "csv_seconds": round(csv_seconds, 3),
        "schema_seconds": round(schema_seconds, 3),
        "copy_seconds": round(copy_seconds, 3),
        "entities_per_second": round(node_count / total, 1),
        "copy_entities_per_second": round(node_count / copy_seconds, 1),
        "entity_types": {kind: len(table["rows"]) for kind, table in sorted(nodes.items())},
    }


# --- the mesh ----------------------------------------------------------------------------------------------------
def _requests(entities: Sequence[dict], per_request: int, collection: str) -> Iterator[Any]:
    from ragmesh.indexer.v1 import indexer_service_pb2 as pb

    per_request = per_request or len(entities)
    for start in range(0, len(entities), per_request):
        lines = "".join(json.dumps(e, separators=(",", ":")) + "\n" for e in entities[start : start + per_request])
        name = f"entities-{start // per_request:05d}.jsonl"
        yield pb.IngestEntitiesRequest(collection=collection, files=[pb.FileInput(data=lines.encode(), filename=name)])


class MeshProcesses:
    """`ragmesh serve graph` and `ragmesh serve embedder search indexer` as two processes on a fresh data dir."""

    def __init__(self, folder: Path, backend: str, env: Sequence[str] = ()) -> None:
        from tests.e2e.mesh_process import Mesh

        self.folder = folder
        extra = {"RAGMESH_EMBEDDER_BACKEND": backend, "RAGMESH_GRAPH_ENABLED": "true", "RAGMESH_LOG_LEVEL": "WARNING"}
        for name in ("converter", "embedder", "indexer", "search", "answer", "graph"):
            extra[f"RAGMESH_{name.upper()}_METRICS_PORT"] = "0"
        extra.update(pair.split("=", 1) for pair in env)  # type: ignore[misc]
        self.mesh = Mesh(folder / "data", extra_env=extra)  # its ports (the graph's too) and their addresses
        self.graph_addr = f"127.0.0.1:{self.mesh.ports['graph']}"
        self.graph: Any = None
        self.rest: Any = None

    def __enter__(self) -> MeshProcesses:
        from tests.e2e.mesh_process import Proc, wait_serving

        env = self.mesh.env()
        self.folder.mkdir(parents=True, exist_ok=True)
        self.graph = Proc(["serve", "graph"], env, self.folder / "graph.log").start()
        self.rest = Proc(["serve", "embedder", "search", "indexer"], env, self.folder / "mesh.log").start()
        procs = [self.graph, self.rest]
        wait_serving(self.graph_addr, procs, timeout=300)
        wait_serving(f"127.0.0.1:{self.mesh.ports['indexer']}", procs, timeout=300)
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in (self.rest, self.graph):
            if proc is not None:
                proc.stop()

    @property
    def indexer_addr(self) -> str:
        return f"127.0.0.1:{self.mesh.ports['indexer']}"

    @property
    def embedder_addr(self) -> str:
        return f"127.0.0.1:{self.mesh.ports['embedder']}"


def warm_embedder(addr: str) -> None:
    """One call before the clock starts: a model that loads (or exports itself) on first use does it here."""
    import grpc
    from ragmesh.embedder.v1 import embedder_service_pb2 as epb
    from ragmesh.embedder.v1 import embedder_service_pb2_grpc as egrpc

    with grpc.insecure_channel(addr) as channel:
        egrpc.EmbedderServiceStub(channel).Embed(epb.EmbedRequest(texts=["Deployment default/frontend"]), timeout=600)


def mesh_ingest(entities: Sequence[dict], backend: str, folder: Path, args: argparse.Namespace, reads: bool) -> dict:
    """IngestEntities of every entity into a fresh mesh, then (`reads`) the graph's reads and the graph service's
    UpsertEntities alone."""
    import grpc
    from ragmesh.graph.v1 import graph_service_pb2 as gpb
    from ragmesh.graph.v1 import graph_service_pb2_grpc as ggrpc
    from ragmesh.indexer.v1 import indexer_service_pb2_grpc as igrpc

    from bench.report import rss_mb

    options = [("grpc.max_receive_message_length", 256 * 2**20), ("grpc.max_send_message_length", 256 * 2**20)]
    out: dict[str, Any] = {"backend": backend, "request_entities": args.request_entities}
    with MeshProcesses(folder, backend, args.env) as mesh:
        warm_embedder(mesh.embedder_addr)
        out["graph_rss_mb_idle"] = rss_mb(mesh.graph.popen.pid)
        with (
            grpc.insecure_channel(mesh.indexer_addr, options=options) as indexer_channel,
            grpc.insecure_channel(mesh.graph_addr, options=options) as graph_channel,
        ):
            graph = ggrpc.GraphServiceStub(graph_channel)
            out.update(ingest(igrpc.IndexerServiceStub(indexer_channel), entities, args.request_entities))
            if "failed" in out:  # said, with what the graph service logged and what the graph holds
                out["graph_log_error"] = last_exception(mesh.folder / "graph.log")
                reads = False
            [info] = graph.ListEntityTypes(gpb.ListEntityTypesRequest(), timeout=120).graphs or [gpb.GraphInfo()]
            out["graph_entities"] = info.entities
            out["graph_entity_types"] = {t.name: t.count for t in sorted(info.entity_types, key=lambda t: t.name)}
            out["graph_rss_mb_loaded"] = rss_mb(mesh.graph.popen.pid)
            out["mesh_rss_mb_loaded"] = rss_mb(mesh.rest.popen.pid)
            if reads:
                out.update(graph_reads(graph, entities, [t.name for t in info.entity_types], args))
                out["graph_rss_mb_after_reads"] = rss_mb(mesh.graph.popen.pid)
                out["graph_upsert_direct"] = graph_upsert(graph, entities, args.graph_batch, "k8s-direct")
    return out


def ingest(indexer: Any, entities: Sequence[dict], per_request: int) -> dict:
    """The entities through IngestEntities, one request at a time; what the replies say, and the rate (or the
    error that stopped it, and when)."""
    import grpc

    stored = relations = 0
    dangling: list[str] = []
    per_type: Counter[str] = Counter()
    started = time.perf_counter()
    for request in _requests(entities, per_request, "k8s"):
        try:
            reply = indexer.IngestEntities(request, timeout=3600)
        except grpc.RpcError as exc:
            seconds = round(time.perf_counter() - started, 1)
            return {"failed": f"{exc.code().name}: {exc.details()}", "failed_after_seconds": seconds}
        stored += reply.entities
        relations += reply.relations
        dangling += reply.dangling_relations
        per_type.update(dict(reply.entity_types))
    seconds = time.perf_counter() - started
    return {
        "seconds": round(seconds, 3),
        "entities": stored,
        "relations": relations,
        "dangling_relations": len(dangling),
        "dangling_examples": dangling[:5],
        "entities_per_second": round(stored / seconds, 1),
        "entity_types": dict(sorted(per_type.items())),
    }


def last_exception(log: Path) -> str:
    """The last line of the last exception a service logged (its JSON log lines' "exception")."""
    found = ""
    for line in log.read_text(errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("exception"):
                found = record["exception"].strip().splitlines()[-1]
    return found


def graph_entities(entities: Sequence[dict]) -> list[Any]:
    """The entities as the graph service takes them (what the indexer sends it), flattened."""
    from google.protobuf import struct_pb2
    from ragmesh.graph.v1 import graph_service_pb2 as gpb

    out = []
    for entity in entities:
        values = struct_pb2.Struct()
        values.update(flatten(entity["properties"]))
        key = set(entity["primary_key"])
        out.append(
            gpb.Entity(
                id=entity_id(entity),
                type=entity["type"],
                primary_key=[gpb.Property(name=name, value=values.fields[name]) for name in entity["primary_key"]],
                properties=[gpb.Property(name=n, value=v) for n, v in values.fields.items() if n not in key],
                relations=[gpb.Relation(type=r["type"], target_id=r["target_id"]) for r in entity["relations"]],
            )
        )
    return out


def graph_upsert(graph: Any, entities: Sequence[dict], batch: int, collection: str) -> dict:
    """The same entities straight into the graph service (UpsertEntities, `batch` a request, one at a time): the
    graph's share of the mesh's ingest, without the embedder and the vector store."""
    from ragmesh.graph.v1 import graph_service_pb2 as gpb

    requests = graph_entities(entities)
    stored = relations = dangling = 0
    started = time.perf_counter()
    for start in range(0, len(requests), batch):
        request = gpb.UpsertEntitiesRequest(collection=collection, entities=requests[start : start + batch])
        reply = graph.UpsertEntities(request, timeout=1800)
        stored, relations = stored + reply.entities, relations + reply.relations
        dangling += len(reply.dangling_relations)
    seconds = time.perf_counter() - started
    graph.DeleteGraph(gpb.DeleteGraphRequest(collection=collection), timeout=600)
    return {
        "batch": batch,
        "seconds": round(seconds, 3),
        "entities": stored,
        "relations": relations,
        "dangling_relations": dangling,
        "entities_per_second": round(stored / seconds, 1),
    }


def graph_reads(graph: Any, entities: Sequence[dict], types: list[str], args: argparse.Namespace) -> dict:
    """ExploreEntity at depth 1..3 on random entities and ShortestPaths between random type pairs, one client,
    each depth after 20 untimed calls on other entities."""
    from ragmesh.graph.v1 import graph_service_pb2 as gpb

    from bench.report import summary

    rng = random.Random(args.seed + 1)
    ids = [entity_id(e) for e in rng.sample(list(entities), min(args.queries, len(entities)))]
    warm = [entity_id(e) for e in rng.sample(list(entities), min(20, len(entities)))]  # others than the timed
    out: dict[str, Any] = {}
    for depth in (1, 2, 3):
        for eid in warm:
            graph.ExploreEntity(gpb.ExploreEntityRequest(collection="k8s", entity_id=eid, depth=depth), timeout=60)
        latencies, neighbours, truncated = [], [], 0
        for eid in ids:
            request = gpb.ExploreEntityRequest(collection="k8s", entity_id=eid, depth=depth, limit=args.limit)
            started = time.perf_counter()
            reply = graph.ExploreEntity(request, timeout=60)
            latencies.append((time.perf_counter() - started) * 1000)
            neighbours.append(len(reply.neighbours))
            truncated += reply.truncated
        out[f"explore_depth_{depth}"] = {
            **summary(latencies),
            "neighbours_mean": round(sum(neighbours) / len(neighbours), 1),
            "truncated": truncated,
        }
    pairs = [tuple(rng.sample(types, 2)) for _ in range(args.queries)] if len(types) >= 2 else []
    if pairs:
        latencies, paths = [], []
        for source, target in pairs:
            request = gpb.ShortestPathsRequest(collection="k8s", from_type=source, to_type=target)
            started = time.perf_counter()
            reply = graph.ShortestPaths(request, timeout=60)
            latencies.append((time.perf_counter() - started) * 1000)
            paths.append(len(reply.paths))
        out["shortest_paths"] = {**summary(latencies), "paths_mean": round(sum(paths) / len(paths), 2)}
    return out


# --- the run -----------------------------------------------------------------------------------------------------
def run_size(size: int, args: argparse.Namespace, folder: Path) -> dict:
    entities = generate(size, args.seed)
    nodes, relations = tables(entities)
    result: dict[str, Any] = {
        "entities": len(entities),
        "relations": sum(len(pairs) for pairs in relations.values()),
        "entity_types": {kind: len(table["rows"]) for kind, table in sorted(nodes.items())},
        "relation_types": dict(sorted(_relation_counts(relations).items())),
    }
    write_jsonl(entities, folder / "entities.jsonl")
    result["jsonl_mb"] = round((folder / "entities.jsonl").stat().st_size / 2**20, 2)
    result["ladybug_bulk"] = ladybug_bulk(entities, folder / "ladybug", args.buffer_pool_mb)
    shutil.rmtree(folder / "ladybug", ignore_errors=True)
    result["mesh"] = {}
    reads_done = False
    for backend in args.backends:
        if backend == "local" and size > args.local_max:
            result["mesh"][backend] = {"skipped": f"the real model runs at sizes up to --local-max {args.local_max}"}
            continue
        mesh = mesh_ingest(entities, backend, folder / f"mesh-{backend}", args, reads=not reads_done)
        reads_done = True
        bulk = result["ladybug_bulk"]
        if "failed" not in mesh:
            mesh["ratio_to_ladybug_bulk"] = round(mesh["entities_per_second"] / bulk["entities_per_second"], 4)
        # The graph holds what the bulk insert loaded: the same entities of each type.
        mesh["same_entities_as_ladybug"] = mesh["graph_entity_types"] == bulk["entity_types"]
        result["mesh"][backend] = mesh
        shutil.rmtree(folder / f"mesh-{backend}", ignore_errors=True)
    return result


def _relation_counts(relations: dict[tuple[str, str, str], list]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for (rel, _, _), pairs in relations.items():
        counts[rel] += len(pairs)
    return counts


def _direct_row(entities: int, direct: dict, bulk: dict) -> str:
    return (
        f"| {entities:,} | {direct['relations']:,} | graph service alone: UpsertEntities, {direct['batch']} a request "
        f"({direct['seconds']} s, {direct['dangling_relations']} dangling) | {direct['entities_per_second']:,} | "
        f"{round(direct['entities_per_second'] / bulk['entities_per_second'], 4)} | |"
    )


def markdown(data: dict) -> str:
    lines = [
        f"Graph ingest and reads, {data['machine'].get('cpus_usable', '?')} usable CPUs, ladybug "
        f"{data['ladybug']}, seed {data['seed']}, {data['request_entities'] or 'all'} entities a request.",
        "",
        "| entities | relations | path | entities/s | x LadybugDB bulk | graph RSS MB (idle -> loaded) |",
        "|---|---|---|---|---|---|",
    ]
    for size in data["sizes"]:
        bulk = size["ladybug_bulk"]
        lines.append(
            f"| {size['entities']:,} | {size['relations']:,} | LadybugDB COPY FROM CSV (CSV {bulk['csv_seconds']} s, "
            f"COPY {bulk['copy_seconds']} s) | {bulk['entities_per_second']:,} | 1 | |"
        )
        for backend, mesh in size["mesh"].items():
            if "skipped" in mesh:
                lines.append(
                    f"| {size['entities']:,} | | IngestEntities ({backend}) | skipped: {mesh['skipped']} | | |"
                )
                continue
            if "failed" in mesh:
                lines.append(
                    f"| {size['entities']:,} | | IngestEntities, embedder `{backend}`: failed after "
                    f"{mesh['failed_after_seconds']} s with {mesh['graph_entities']:,} entities in the graph: "
                    f"{mesh['failed']} ({mesh['graph_log_error']}) | | | {mesh['graph_rss_mb_idle']} -> "
                    f"{mesh['graph_rss_mb_loaded']} |"
                )
                continue
            lines.append(
                f"| {size['entities']:,} | {mesh['relations']:,} | IngestEntities, embedder `{backend}` "
                f"({mesh['seconds']} s, {mesh['dangling_relations']} dangling) | {mesh['entities_per_second']:,} | "
                f"{mesh['ratio_to_ladybug_bulk']} | {mesh['graph_rss_mb_idle']} -> {mesh['graph_rss_mb_loaded']} |"
            )
            if "graph_upsert_direct" in mesh:
                lines.append(_direct_row(size["entities"], mesh["graph_upsert_direct"], bulk))
    lines += [
        "",
        "| entities | read (gRPC, one client) | p50 ms | p95 ms | n | mean size |",
        "|---|---|---|---|---|---|",
    ]
    for size in data["sizes"]:
        reads = next((m for m in size["mesh"].values() if "explore_depth_1" in m), None)
        if reads is None:
            continue
        for depth in (1, 2, 3):
            r = reads[f"explore_depth_{depth}"]
            lines.append(
                f"| {size['entities']:,} | ExploreEntity depth {depth} (limit {data['limit'] or 100}) | "
                f"{r['p50_ms']} | {r['p95_ms']} | {r['n']} | "
                f"{r['neighbours_mean']} neighbours, {r['truncated']} truncated |"
            )
        if "shortest_paths" in reads:
            r = reads["shortest_paths"]
            lines.append(
                f"| {size['entities']:,} | ShortestPaths (random type pairs) | {r['p50_ms']} | {r['p95_ms']} | "
                f"{r['n']} | {r['paths_mean']} paths |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, nargs="+", default=[10_000], help="sizes, e.g. 10000 100000")
    parser.add_argument("--backends", nargs="+", default=["hash", "local"], choices=["hash", "local"])
    parser.add_argument("--local-max", type=int, default=10_000, help="the largest size the real model ingests")
    parser.add_argument(
        "--request-entities",
        type=int,
        default=0,
        help="entities per IngestEntities request (0: one .jsonl file of them all, as `ragmesh graph ingest` sends)",
    )
    parser.add_argument("--graph-batch", type=int, default=256, help="entities per UpsertEntities (the direct row)")
    parser.add_argument("--queries", type=int, default=200, help="reads per kind (explore depth, shortest paths)")
    parser.add_argument("--limit", type=int, default=0, help="ExploreEntity's limit (0: the service's default)")
    parser.add_argument("--seed", type=int, default=49)
    parser.add_argument(
        "--env", action="append", default=[], metavar="KEY=VALUE", help="a setting for the mesh's processes"
    )
    parser.add_argument("--buffer-pool-mb", type=int, default=512, help="the bulk insert's LadybugDB page cache")
    parser.add_argument("--note", default="", help="a line the report keeps (what was patched, what else ran)")
    parser.add_argument("--json", type=Path, help="write {name, markdown, data} here (bench/results/<date>-graph.json)")
    parser.add_argument("--jsonl", type=Path, help="only write the first size's entities as JSON Lines here, and stop")
    args = parser.parse_args(argv)
    if args.jsonl:
        write_jsonl(generate(args.entities[0], args.seed), args.jsonl)
        return {}
    from bench.report import machine

    data: dict[str, Any] = {
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "ladybug": metadata.version("ladybug"),
        "seed": args.seed,
        "request_entities": args.request_entities,
        "limit": args.limit,
        "buffer_pool_mb": args.buffer_pool_mb,
        "env": args.env,
        "note": args.note,
        "sizes": [],
    }
    with tempfile.TemporaryDirectory(prefix="graph-bench-") as tmp:
        for size in args.entities:
            folder = Path(tmp) / str(size)
            folder.mkdir()
            data["sizes"].append(run_size(size, args, folder))
            text = markdown(data)
            if args.json:  # after each size: a later one that runs out of time leaves the earlier ones
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps({"name": "graph", "markdown": text, "data": data}, indent=2) + "\n")
    print(text)
    return data


if __name__ == "__main__":
    main()
