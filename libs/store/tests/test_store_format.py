"""The embedded store records its format version, upgrades a data directory made before versions were recorded,
and refuses one written in a format it cannot read, with a message that says what to do."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from ragmesh_store import ChunkPoint, EdgeStore, Sparse, StoreFormatError
from ragmesh_store.edge import FORMAT_FILE, FORMAT_VERSION


def _point(doc_id: str) -> ChunkPoint:
    return ChunkPoint(
        id=str(uuid.uuid5(uuid.NAMESPACE_URL, doc_id)),
        dense=[1.0, 0.0, 0.0, 0.0],
        sparse=Sparse([1], [1.0]),
        payload={"doc_id": doc_id, "chunk_index": 0, "text": doc_id},
    )


def test_a_new_data_directory_records_its_format(tmp_path: Path) -> None:
    EdgeStore(tmp_path / "data", 4).close()
    record = json.loads((tmp_path / "data" / FORMAT_FILE).read_text())
    assert record["format_version"] == FORMAT_VERSION == 1
    assert record["created_by"].startswith("ragmesh-store ")


def test_a_directory_from_before_format_records_is_version_1_and_keeps_its_data(tmp_path: Path) -> None:
    store = EdgeStore(tmp_path / "data", 4)
    store.ensure_collection("docs")
    store.upsert("docs", [_point("kept")])
    store.close()
    (tmp_path / "data" / FORMAT_FILE).unlink()  # as today's release leaves it

    store = EdgeStore(tmp_path / "data", 4)
    try:
        assert [hit.payload["text"] for hit in store.document_chunks("docs", "kept")] == ["kept"]
    finally:
        store.close()
    assert json.loads((tmp_path / "data" / FORMAT_FILE).read_text())["format_version"] == 1


@pytest.mark.parametrize(
    "record",
    [
        {"format_version": FORMAT_VERSION + 1, "created_by": "ragmesh-store 9.0.0"},
        {"format_version": 0},
    ],
)
def test_a_format_this_version_cannot_read_is_refused_and_left_alone(tmp_path: Path, record: dict) -> None:
    data = tmp_path / "data"
    EdgeStore(data, 4).close()
    (data / FORMAT_FILE).write_text(json.dumps(record))
    with pytest.raises(StoreFormatError) as refused:
        EdgeStore(data, 4)
    message = str(refused.value)
    assert f"format version {record['format_version']}" in message and f"RAGMESH_DATA_DIR={data.resolve()}" in message
    assert "restore a snapshot" in message
    assert json.loads((data / FORMAT_FILE).read_text()) == record  # not "upgraded" behind the user's back
    (data / FORMAT_FILE).write_text(json.dumps({"format_version": 1}))  # the refusal released the lock:
    EdgeStore(data, 4).close()


def test_a_garbled_format_record_is_refused(tmp_path: Path) -> None:
    data = tmp_path / "data"
    EdgeStore(data, 4).close()
    (data / FORMAT_FILE).write_text("{not json")
    with pytest.raises(StoreFormatError, match=FORMAT_FILE):
        EdgeStore(data, 4)
