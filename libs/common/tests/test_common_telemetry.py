"""Telemetry set-up: off without an endpoint, one provider per service with its own name, JSON logs that
carry the current trace (written by a thread of their own), and the store wrapper."""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from ragmesh_common.config import ConfigError
from ragmesh_common.logs import JsonFormatter
from ragmesh_common.telemetry import Attr, Telemetry, TracedStore


@pytest.fixture
def otel_env(monkeypatch):
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_SERVICE_NAME",
        "OTEL_SDK_DISABLED",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_RESOURCE_ATTRIBUTES",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")  # nothing listens on the endpoints: do not wait at shutdown
    return monkeypatch


def test_without_an_endpoint_nothing_is_traced_and_no_interceptor_is_added(otel_env):
    telemetry = Telemetry("search")
    assert not telemetry.tracing
    assert telemetry.client_interceptors() == []
    assert len(telemetry.server_interceptors()) == 1  # metrics only
    store = object()
    assert telemetry.traced_store(store) is store
    assert not telemetry.tracer().start_span("x").is_recording()


def test_sdk_disabled_wins_over_an_endpoint(otel_env):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    otel_env.setenv("OTEL_SDK_DISABLED", "true")
    assert not Telemetry("search").tracing


def test_each_service_reports_under_its_own_name_with_the_resource_attributes(otel_env):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    otel_env.setenv("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test")
    otel_env.setenv("OTEL_SERVICE_NAME", "custom-name")
    search, embedder = Telemetry("search"), Telemetry("embedder")
    single = Telemetry("gateway", use_env_service_name=True)
    try:
        assert search.tracer_provider.resource.attributes["service.name"] == "ragmesh-search"
        assert embedder.tracer_provider.resource.attributes["service.name"] == "ragmesh-embedder"
        assert single.tracer_provider.resource.attributes["service.name"] == "custom-name"
        assert search.tracer_provider.resource.attributes["deployment.environment"] == "test"
    finally:
        for t in (search, embedder, single):
            t.tracer_provider.shutdown()


def test_an_unknown_protocol_fails_at_start_up_with_the_variable_named(otel_env):
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    otel_env.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json")
    with pytest.raises(ConfigError, match="OTEL_EXPORTER_OTLP_PROTOCOL"):
        Telemetry("search")


def _recording(otel_env) -> tuple[Telemetry, InMemorySpanExporter]:
    otel_env.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    telemetry = Telemetry("indexer")
    exporter = InMemorySpanExporter()
    telemetry.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    return telemetry, exporter


class _Store:
    dimension = 8

    def upsert(self, name, points):
        return len(points)


def test_store_calls_are_spans_of_their_own(otel_env):
    telemetry, exporter = _recording(otel_env)
    try:
        store = telemetry.traced_store(_Store())
        assert isinstance(store, TracedStore) and store.dimension == 8
        assert store.upsert("docs", [1, 2, 3]) == 3
        (span,) = exporter.get_finished_spans()
        assert span.name == "store.upsert"
        assert span.attributes[Attr.COLLECTION] == "docs" and span.attributes[Attr.BATCH_SIZE] == 3
    finally:
        telemetry.tracer_provider.shutdown()


def test_json_log_lines_carry_the_current_trace(otel_env):
    telemetry, _ = _recording(otel_env)
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter("test"))
    logger = logging.getLogger("ragmesh.test.telemetry")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("outside")
        with telemetry.tracer().start_as_current_span("work") as span:
            logger.warning("inside")
        outside, inside = (json.loads(line) for line in stream.getvalue().splitlines())
        assert "trace_id" not in outside
        assert inside["trace_id"] == f"{span.get_span_context().trace_id:032x}"
        assert inside["span_id"] == f"{span.get_span_context().span_id:016x}"
    finally:
        logger.removeHandler(handler)
        telemetry.tracer_provider.shutdown()


_BLOCKED_STDOUT = textwrap.dedent("""
    import io, logging, sys, threading
    from opentelemetry.sdk.trace import TracerProvider
    from ragmesh_common.logs import setup_logging

    released = threading.Event()

    class Blocked(io.TextIOBase):  # a stdout nobody reads yet: a full pipe
        def write(self, text):
            released.wait()
            return sys.__stdout__.write(text)

        def flush(self):
            sys.__stdout__.flush()

    sys.stdout = Blocked()
    setup_logging("svc")
    log = logging.getLogger("ragmesh.test")
    with TracerProvider().get_tracer("test").start_as_current_span("work") as span:
        for i in range(500):
            log.info("line %d", i)
    try:
        1 / 0
    except ZeroDivisionError:
        log.exception("failed")
    print(f"{span.get_span_context().trace_id:032x}", file=sys.stderr)
    released.set()  # reached only if logging did not wait for stdout
""")


@pytest.mark.e2e  # a child process
def test_logging_never_waits_for_stdout_and_writes_every_line_by_exit():
    done = subprocess.run([sys.executable, "-c", _BLOCKED_STDOUT], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    trace_id = done.stderr.strip().splitlines()[-1]
    assert [x["message"] for x in lines[:500]] == [f"line {i}" for i in range(500)]  # all, in order
    assert all(x["trace_id"] == trace_id and x["service"] == "svc" for x in lines[:500])  # the logging thread's span
    assert len(lines) == 501 and lines[-1]["message"] == "failed" and "trace_id" not in lines[-1]
    assert "ZeroDivisionError" in lines[-1]["exception"]


@pytest.mark.e2e  # a child process
@pytest.mark.parametrize("how", ["setup_logging('svc', stream=sys.stderr)", "setup_logging('svc'); log_to_stderr()"])
def test_a_process_whose_stdout_carries_a_protocol_logs_to_stderr(how):
    script = (
        f"import logging, sys\nfrom ragmesh_common.logs import log_to_stderr, setup_logging\n{how}\n"
        "logging.getLogger('ragmesh.test').warning('to stderr')\nprint('protocol')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "protocol\n"  # nothing but the protocol on stdout
    assert json.loads(done.stderr.strip().splitlines()[-1])["message"] == "to stderr"
