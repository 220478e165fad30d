"""The manifests and the code agree: every RAGMESH_* / QDRANT_* variable a container is given is read by that
service's settings class, the resulting settings validate, the ports the Services expose are the ports the
processes listen on, and every address a service dials leads to the right pods."""

from __future__ import annotations

import importlib

import pytest
from deploy_support import (
    GRPC_SERVICES,
    RENDER_NAMES,
    by_name,
    container_env,
    named_port,
    ragmesh_containers,
    resolve_service_port,
)
from pydantic_settings import BaseSettings
from ragmesh_common.config import load

SETTINGS = {
    "converter": ["ragmesh_converter.config:ConverterSettings"],
    "embedder": ["ragmesh_embedder.config:EmbedderSettings"],
    "indexer": ["ragmesh_indexer.config:IndexerSettings", "ragmesh_store.config:StoreSettings"],
    "search": ["ragmesh_search.config:SearchSettings", "ragmesh_store.config:StoreSettings"],
    "answer": ["ragmesh_answer.config:AnswerSettings"],
    "gateway": ["ragmesh_gateway.config:GatewaySettings"],
}
OURS = ("RAGMESH_", "QDRANT_")
# The metrics endpoint lands with its own issue (RAGMESH_<SVC>_METRICS_PORT); until the settings have the
# field, the manifests use its announced default.
DEFAULT_METRICS_PORT = 9464


def settings_classes(service: str) -> list[type[BaseSettings]]:
    classes = []
    for ref in SETTINGS[service]:
        module, name = ref.split(":")
        classes.append(getattr(importlib.import_module(module), name))
    return classes


def env_names(cls: type[BaseSettings]) -> set[str]:
    """The variables pydantic-settings reads for a class: the field's validation_alias, else prefix + name."""
    prefix = cls.model_config.get("env_prefix", "")
    names = set()
    for name, field in cls.model_fields.items():
        alias = field.validation_alias
        if isinstance(alias, str):
            names.add(alias.upper())
        elif alias is not None:
            names |= {str(choice).upper() for choice in getattr(alias, "choices", ())}
        else:
            names.add(f"{prefix}{name}".upper())
    return names


def unread_variables(service: str, env: dict[str, str]) -> set[str]:
    known = set().union(*(env_names(cls) for cls in settings_classes(service)))
    return {name for name in env if name.startswith(OURS) and name not in known}


@pytest.fixture
def clean_env(monkeypatch):
    """An environment holding none of our variables, so only the manifest's values are loaded."""
    import os

    for name in list(os.environ):
        if name.startswith(OURS):
            monkeypatch.delenv(name)

    def apply(env: dict[str, str]) -> None:
        for name, value in env.items():
            monkeypatch.setenv(name, value)

    return apply


def test_a_variable_no_settings_class_reads_is_caught():
    assert unread_variables("search", {"RAGMESH_SEARCH_PORT": "1", "RAGMESH_SEARCH_PROT": "1"}) == {
        "RAGMESH_SEARCH_PROT"
    }
    assert unread_variables("converter", {"QDRANT_URL": "http://qdrant:6333"}) == {"QDRANT_URL"}


@pytest.mark.parametrize("name", RENDER_NAMES)
def test_every_variable_is_read_by_the_settings_of_its_container(renders, name):
    docs = renders[name]
    for _, container, service in ragmesh_containers(docs):
        assert unread_variables(service, container_env(docs, container)) == set(), f"{name}: {service}"


@pytest.mark.parametrize("name", RENDER_NAMES)
def test_settings_load_from_the_manifests_and_listen_where_the_services_point(renders, name, clean_env):
    docs = renders[name]
    for workload, container, service in ragmesh_containers(docs):
        where = f"{name}: {service}"
        clean_env(container_env(docs, container, secret_placeholder="key-from-the-out-of-band-secret"))
        loaded = [load(cls) for cls in settings_classes(service)]
        settings = loaded[0]
        if service in GRPC_SERVICES:
            assert settings.host == "0.0.0.0", where
            assert settings.port == named_port(container, "grpc"), where
            # The Service named after the service, on its `grpc` port, reaches this container on that port.
            grpc_port = next(
                p["port"] for p in by_name(docs, "Service", service)["spec"]["ports"] if p["name"] == "grpc"
            )
            target_workload, _, target_port = resolve_service_port(docs, service, grpc_port)
            assert (target_workload["metadata"]["name"], target_port) == (
                workload["metadata"]["name"],
                settings.port,
            ), where
            assert named_port(container, "metrics") == getattr(settings, "metrics_port", DEFAULT_METRICS_PORT), where
        else:
            assert settings.http_host == "0.0.0.0", where
            assert settings.http_port == named_port(container, "http"), where
            assert settings.api_keys, f"{where}: the gateway must not run open on 0.0.0.0"
            http_port = by_name(docs, "Service", "gateway")["spec"]["ports"][0]["port"]
            target_workload, _, target_port = resolve_service_port(docs, "gateway", http_port)
            assert target_workload["metadata"]["name"] == "gateway" and target_port == settings.http_port

        # Every address this service dials leads to the pods of the service it names (the graph's only when it
        # is enabled: without the graph component nothing dials it).
        for field in type(settings).model_fields:
            if field == "graph_addr" and not settings.graph_enabled:
                continue
            if field.endswith("_addr"):
                host, port = getattr(settings, field).rsplit(":", 1)
                target_workload, target, target_port = resolve_service_port(docs, host, int(port))
                callee = field.removesuffix("_addr")
                assert target_workload["metadata"]["name"] == callee, f"{where}: {field}"
                assert target_port == named_port(target, "grpc"), f"{where}: {field}"

        if service in ("indexer", "search"):
            store = loaded[1]
            assert store.qdrant_url, f"{where}: the embedded store cannot be shared by separate pods"
            from urllib.parse import urlparse

            url = urlparse(store.qdrant_url)
            target_workload, target, target_port = resolve_service_port(docs, url.hostname, url.port)
            assert target_workload["kind"] == "StatefulSet" and target_workload["metadata"]["name"] == "qdrant"
            assert target_port == named_port(target, "http")
            # The key the clients send is the key the server requires.
            client_ref = next(v for v in container["env"] if v["name"] == "QDRANT_API_KEY")["valueFrom"]
            server_ref = next(v for v in target["env"] if v["name"] == "QDRANT__SERVICE__API_KEY")["valueFrom"]
            assert client_ref == server_ref, where
