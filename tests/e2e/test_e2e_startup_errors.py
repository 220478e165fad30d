"""Start-up errors as a user meets them: `ragmesh up` / `ragmesh serve` as real processes stop with exit code 2
and one clear message naming the cause and the setting that fixes it -- never a traceback."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
from ragmesh_store import EdgeStore

from .mesh_process import RAGMESH, Mesh


def _run(args: list[str], env: dict[str, str], timeout: float = 180) -> str:
    result = subprocess.run([RAGMESH, *args], env=env, capture_output=True, text=True, timeout=timeout)
    output = result.stdout + result.stderr
    assert result.returncode == 2, output[-3000:]
    assert "Traceback" not in output, output[-3000:]
    return output


@pytest.fixture
def held_port():
    """A port something else (this test process) listens on."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def test_a_second_mesh_on_a_taken_grpc_port_names_the_port_the_holder_and_the_setting(tmp_path, held_port):
    mesh = Mesh(tmp_path / "data", extra_env={"RAGMESH_EMBEDDER_BACKEND": "hash"})
    mesh.ports["converter"] = held_port
    output = _run(["up"], mesh.env())
    assert f"127.0.0.1:{held_port}" in output and "in use" in output
    assert "RAGMESH_CONVERTER_PORT" in output
    assert f"pid {os.getpid()}" in output  # what is in the way


def test_a_taken_http_port_names_ragmesh_http_port(tmp_path, held_port):
    env = Mesh(tmp_path / "data", http_port=held_port).env()
    output = _run(["serve", "gateway"], env)
    assert f"127.0.0.1:{held_port}" in output and "RAGMESH_HTTP_PORT" in output


def test_a_data_directory_held_by_another_process_names_ragmesh_data_dir(tmp_path):
    data = tmp_path / "data"
    holder = EdgeStore(data, 16)  # this process owns the directory, as another `ragmesh up` would
    try:
        output = _run(["up"], Mesh(data, extra_env={"RAGMESH_EMBEDDER_BACKEND": "hash"}).env())
    finally:
        holder.close()
    assert f"RAGMESH_DATA_DIR={data.resolve()}" in output and "already open in another process" in output
    assert f"pid {os.getpid()}" in output


def test_a_data_directory_that_cannot_be_written_names_ragmesh_data_dir(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    output = _run(["up"], Mesh(blocker / "data", extra_env={"RAGMESH_EMBEDDER_BACKEND": "hash"}).env())
    assert f"RAGMESH_DATA_DIR={blocker / 'data'}" in output and "this user can write" in output


def test_bad_settings_name_the_variable(tmp_path):
    env = Mesh(tmp_path / "data").env() | {"RAGMESH_EMBEDDER_MAX_QUEUE_TEXTS": "lots"}
    output = _run(["serve", "embedder"], env)
    assert "RAGMESH_EMBEDDER_MAX_QUEUE_TEXTS" in output


def test_a_malformed_api_key_entry_is_named_by_position_without_echoing_keys(tmp_path: Path):
    env = Mesh(tmp_path / "data").env() | {"RAGMESH_API_KEYS": "good-secret:read, other-secret:reed"}
    output = _run(["serve", "gateway"], env)
    assert "RAGMESH_API_KEYS" in output and "entry 2" in output and "'reed'" in output
    assert "good-secret" not in output and "other-secret" not in output


def test_an_unknown_event_loop_names_the_variable_and_the_choices(tmp_path):
    env = Mesh(tmp_path / "data", extra_env={"RAGMESH_EMBEDDER_BACKEND": "hash", "RAGMESH_EVENT_LOOP": "fast"}).env()
    output = _run(["up"], env)
    assert "RAGMESH_EVENT_LOOP" in output and "'fast'" in output
    assert "'uvloop'" in output and "'asyncio'" in output


def test_an_invalid_in_process_calls_setting_names_the_variable(tmp_path):
    env = Mesh(
        tmp_path / "data", extra_env={"RAGMESH_EMBEDDER_BACKEND": "hash", "RAGMESH_IN_PROCESS_CALLS": "sometimes"}
    ).env()
    output = _run(["up"], env)
    assert "RAGMESH_IN_PROCESS_CALLS" in output
