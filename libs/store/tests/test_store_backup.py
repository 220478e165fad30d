"""Snapshots of the embedded store: a round trip gives back every chunk; a snapshot is refused while another
process owns the store; a restore is refused into a non-empty directory, from a newer format, from a tampered
archive or one with members that would land outside the data directory."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
import uuid
from pathlib import Path

import pytest
from ragmesh_store import ChunkPoint, EdgeStore, Sparse, StoreBusyError, StoreFormatError
from ragmesh_store.backup import MANIFEST, SnapshotError, read_manifest, restore, snapshot


def _chunks(doc_id: str, n: int) -> list[ChunkPoint]:
    return [
        ChunkPoint(
            id=str(uuid.uuid5(uuid.NAMESPACE_URL, f"{doc_id}:{i}")),
            dense=[1.0, float(i), 0.5, 0.0],
            sparse=Sparse([i + 1], [1.0]),
            payload={"doc_id": doc_id, "chunk_index": i, "text": f"{doc_id} part {i}"},
        )
        for i in range(n)
    ]


@pytest.fixture
def stocked(tmp_path: Path) -> Path:
    data = tmp_path / "data"
    store = EdgeStore(data, 4, flush_interval=0)
    for collection, docs in (("docs", {"a": 3, "b": 1}), ("notes", {"c": 2})):
        store.ensure_collection(collection)
        for doc_id, n in docs.items():
            store.upsert(collection, _chunks(doc_id, n))
    store.close()
    return data


def _texts(data: Path) -> dict[tuple[str, str], list[str]]:
    store = EdgeStore(data, 4)
    try:
        return {
            (c, d): [h.payload["text"] for h in store.document_chunks(c, d)]
            for c, d in (("docs", "a"), ("docs", "b"), ("notes", "c"))
        }
    finally:
        store.close()


@pytest.mark.slow  # snapshots write and hash 0.2-0.7 GB of store files
def test_a_snapshot_restores_every_chunk_into_a_fresh_directory(stocked: Path, tmp_path: Path) -> None:
    before = _texts(stocked)
    manifest = snapshot(stocked, tmp_path / "backup.tar.gz")
    assert manifest["collections"] == {"docs": {"documents": 2, "chunks": 4}, "notes": {"documents": 1, "chunks": 2}}
    assert manifest["format_version"] == 1 and manifest["files"]
    assert read_manifest(tmp_path / "backup.tar.gz") == manifest
    restored = restore(tmp_path / "backup.tar.gz", tmp_path / "fresh")
    assert restored == manifest
    assert (
        _texts(tmp_path / "fresh")
        == before
        == {
            ("docs", "a"): ["a part 0", "a part 1", "a part 2"],
            ("docs", "b"): ["b part 0"],
            ("notes", "c"): ["c part 0", "c part 1"],
        }
    )


@pytest.mark.e2e  # a second process owns the store
def test_a_snapshot_is_refused_while_another_process_owns_the_store(stocked: Path, tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"from ragmesh_store import EdgeStore; s = EdgeStore({str(stocked)!r}, 4); "
            "print('held', flush=True); input()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(StoreBusyError, match="stop it before taking or restoring a snapshot"):
            snapshot(stocked, tmp_path / "backup.tar.gz")
    finally:
        holder.communicate("\n", timeout=30)
    assert not (tmp_path / "backup.tar.gz").exists()


@pytest.mark.slow  # snapshots write and hash 0.2-0.7 GB of store files
def test_a_restore_refuses_a_non_empty_directory_unless_forced(stocked: Path, tmp_path: Path) -> None:
    snapshot(stocked, tmp_path / "backup.tar.gz")
    with pytest.raises(SnapshotError, match="is not empty"):
        restore(tmp_path / "backup.tar.gz", stocked)
    store = EdgeStore(stocked, 4)
    store.ensure_collection("extra")
    store.close()
    restore(tmp_path / "backup.tar.gz", stocked, force=True)
    assert sorted(p.name for p in (stocked / "collections").iterdir()) == ["docs", "notes"]


@pytest.mark.slow  # snapshots write and hash 0.2-0.7 GB of store files
def test_a_snapshot_keeps_every_version_of_a_versioned_collection(stocked: Path, tmp_path: Path) -> None:
    store = EdgeStore(stocked, 4, flush_interval=0)
    store.ensure_collection("docs.v2")  # version 2 of "docs", built beside it
    store.upsert("docs.v2", _chunks("a", 2))
    store.set_collection_record(
        "docs",
        "versions",
        {
            "active": 2,
            "next_version": 3,
            "versions": [{"version": 1, "state": "previous"}, {"version": 2, "state": "active"}],
        },
    )
    store.close()
    manifest = snapshot(stocked, tmp_path / "backup.tar.gz")
    assert manifest["collections"]["docs.v2"] == {"documents": 1, "chunks": 2}
    restore(tmp_path / "backup.tar.gz", tmp_path / "fresh")
    restored = EdgeStore(tmp_path / "fresh", 4)
    try:
        assert restored.list_collections() == ["docs", "notes"]
        assert [h.payload["text"] for h in restored.document_chunks("docs.v2", "a")] == ["a part 0", "a part 1"]
        assert restored.collection_record("docs", "versions")["active"] == 2
    finally:
        restored.close()


def _repack(archive: Path, out: Path, tmp_path: Path, change) -> None:
    """Unpack with GNU tar, let `change` edit the files, pack again (sparse, as snapshots are written)."""
    work = tmp_path / f"unpacked-{out.stem}"
    work.mkdir()
    subprocess.run(["tar", "-xzf", str(archive), "-C", str(work)], check=True)
    change(work)
    names = [MANIFEST, *sorted(p.name for p in work.iterdir() if p.name != MANIFEST)]
    subprocess.run(["tar", "--sparse", "-czf", str(out), "-C", str(work), *names], check=True)


@pytest.mark.slow  # snapshots write and hash 0.2-0.7 GB of store files
def test_a_tampered_or_unsafe_or_newer_archive_is_refused(tmp_path: Path) -> None:
    small = EdgeStore(tmp_path / "small", 4, flush_interval=0)
    small.ensure_collection("docs")
    small.upsert("docs", _chunks("a", 2))
    small.close()
    good = tmp_path / "backup.tar.gz"
    snapshot(tmp_path / "small", good)

    def flip_a_wal_byte(work: Path) -> None:
        wal = next(p for p in sorted((work / "collections" / "docs" / "wal").iterdir()) if p.stat().st_size)
        with wal.open("r+b") as f:
            first = f.read(1)
            f.seek(0)
            f.write(bytes([first[0] ^ 0xFF]))

    _repack(good, tmp_path / "tampered.tar.gz", tmp_path, flip_a_wal_byte)
    with pytest.raises(SnapshotError, match="checksum mismatch"):
        restore(tmp_path / "tampered.tar.gz", tmp_path / "t1")

    def newer(work: Path) -> None:
        manifest = json.loads((work / MANIFEST).read_text())
        (work / MANIFEST).write_text(json.dumps({**manifest, "format_version": 99}))

    _repack(good, tmp_path / "newer.tar.gz", tmp_path, newer)
    with pytest.raises(StoreFormatError, match="format version 99"):
        restore(tmp_path / "newer.tar.gz", tmp_path / "t3")

    # A member that would land outside the data directory.
    unsafe = tmp_path / "unsafe.tar.gz"
    with tarfile.open(unsafe, "w:gz") as tar:
        for name, body in ((MANIFEST, json.dumps(read_manifest(good)).encode()), ("../escaped.json", b"{}")):
            info = tarfile.TarInfo(name)
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    with pytest.raises(SnapshotError, match="unsafe"):
        restore(unsafe, tmp_path / "t2")
    assert not (tmp_path / "escaped.json").exists()
    for target in ("t1", "t2", "t3"):  # nothing half-restored
        assert not (tmp_path / target / "collections").exists()
