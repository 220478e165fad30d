"""Backups of the embedded store: `snapshot` writes a data directory to one .tar.gz with a manifest, `restore`
puts it back into an empty data directory and proves it whole (`ragmesh snapshot` / `ragmesh restore`).

A snapshot is consistent: it is taken while holding the data directory's lock, so no process writes while the
files are read (the WAL goes with the segments, so even writes a crashed owner never flushed are in it). A
running mesh holds that lock: stop it first (or, with QDRANT_URL, use the Qdrant server's own snapshots).

The archive holds `MANIFEST.json` (first), the format record and `collections/<name>/...` (with every version of
a versioned collection: `collections/<name>.v<n>/...`). The manifest has the
store format version, the collections with their document and chunk counts, and a SHA-256 of every file.
`restore` refuses a non-empty target (unless `force`), a format this version cannot read, a member outside the
data directory, a file whose checksum differs, and a restored collection whose counts differ.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
import tempfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import qdrant_edge as qe

from ._common import is_store_name
from .base import StoreError, StoreFormatError
from .edge import FORMAT_FILE, FORMAT_VERSION, check_format, lock_data_dir, read_format

MANIFEST = "MANIFEST.json"
SNAPSHOT_VERSION = 1


class SnapshotError(StoreError):
    """A snapshot could not be taken or restored; the message says why and what to do."""


@contextlib.contextmanager
def _owned(data_dir: Path) -> Iterator[None]:
    """Hold the data directory's lock (as a store owner does) for the duration."""
    fd = lock_data_dir(data_dir, busy_hint="; stop it before taking or restoring a snapshot")
    try:
        yield
    finally:
        os.close(fd)


def _collections(data_dir: Path) -> list[Path]:
    root = data_dir / "collections"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if p.is_dir() and is_store_name(p.name))  # versions too


def _counts(shard_dir: Path) -> dict[str, int]:
    """Documents (chunks with chunk_index 0) and chunks of one collection, read from its files."""
    try:
        shard = qe.EdgeShard.load(str(shard_dir))
    except Exception as exc:  # noqa: BLE001 - the binding raises bare Exceptions
        raise SnapshotError(f"cannot read collection {shard_dir.name!r}: {exc}") from None
    try:
        first = qe.Filter(must=[qe.FieldCondition("chunk_index", match=qe.MatchValue(0))])
        return {
            "documents": shard.count(qe.CountRequest(exact=True, filter=first)),
            "chunks": shard.count(qe.CountRequest(exact=True)),
        }
    finally:
        shard.close()


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def snapshot(data_dir: str | os.PathLike[str], output: str | os.PathLike[str]) -> dict[str, Any]:
    """Write the embedded store under `data_dir` to `output` (.tar.gz); returns the manifest."""
    from importlib.metadata import version

    data_dir, output = Path(data_dir).resolve(), Path(output).resolve()
    if not (data_dir / "collections").is_dir():
        raise SnapshotError(f"RAGMESH_DATA_DIR={data_dir} holds no ragmesh store")
    with _owned(data_dir):
        check_format(data_dir)
        record = read_format(data_dir)
        assert record is not None  # check_format wrote one when there was none
        collections = {p.name: _counts(p) for p in _collections(data_dir)}
        members = [data_dir / FORMAT_FILE] + [
            f for p in _collections(data_dir) for f in sorted(p.rglob("*")) if f.is_file()
        ]
        files = {f.relative_to(data_dir).as_posix(): _sha256(f) for f in members}
        manifest = {
            "snapshot_version": SNAPSHOT_VERSION,
            "format_version": record["format_version"],
            "created_by": f"ragmesh-store {version('ragmesh-store')}",
            "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "collections": collections,
            "files": files,
        }
        output.parent.mkdir(parents=True, exist_ok=True)
        partial = output.with_name(f".{output.name}.{uuid.uuid4().hex}.partial")
        try:
            with tempfile.TemporaryDirectory() as scratch:
                (Path(scratch) / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
                # GNU tar, for --sparse: the store preallocates its files (~190 MB per collection, mostly holes),
                # which Python's tarfile would read and compress byte by byte. Python's tarfile reads the result.
                names = [m.relative_to(data_dir).as_posix() for m in members]
                result = subprocess.run(
                    [
                        "tar",
                        "--sparse",
                        "--format=gnu",
                        "-czf",
                        str(partial),
                        "-C",
                        scratch,
                        MANIFEST,
                        "-C",
                        str(data_dir),
                        "--",
                        *names,
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if result.returncode != 0:
                    raise SnapshotError(f"writing {output} failed: {result.stderr.strip()[:500]}")
            os.replace(partial, output)
        finally:
            partial.unlink(missing_ok=True)
    return manifest


def read_manifest(archive: str | os.PathLike[str]) -> dict[str, Any]:
    with tarfile.open(archive, "r:gz") as tar:
        try:
            member = tar.getmember(MANIFEST)
        except KeyError:
            raise SnapshotError(f"{archive} is not a ragmesh snapshot (no {MANIFEST})") from None
        file = tar.extractfile(member)
        if file is None:  # a member that is not a regular file
            raise SnapshotError(f"{archive} is not a ragmesh snapshot ({MANIFEST} is not a file)")
        manifest: dict[str, Any] = json.loads(file.read())
        return manifest


def restore(
    archive: str | os.PathLike[str],
    data_dir: str | os.PathLike[str],
    *,
    force: bool = False,
) -> dict[str, Any]:
    """Restore a snapshot into `data_dir` (which must be empty or absent unless `force`); returns the manifest
    after checking every file's checksum and every collection's counts."""
    archive, data_dir = Path(archive).resolve(), Path(data_dir).resolve()
    manifest = read_manifest(archive)
    if manifest.get("snapshot_version") != SNAPSHOT_VERSION:
        raise SnapshotError(
            f"{archive} has snapshot version {manifest.get('snapshot_version')}; this ragmesh "
            f"reads version {SNAPSHOT_VERSION}"
        )
    if not isinstance(manifest.get("format_version"), int) or manifest["format_version"] > FORMAT_VERSION:
        raise StoreFormatError(
            f"{archive} holds store format version {manifest.get('format_version')} (written by "
            f"{manifest.get('created_by')}); this ragmesh reads up to {FORMAT_VERSION}: restore it with that release"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    with _owned(data_dir):
        existing = [p for p in data_dir.iterdir() if p.name != ".lock"]
        if existing and not force:
            raise SnapshotError(
                f"RAGMESH_DATA_DIR={data_dir} is not empty ({len(existing)} entries); restore into "
                "an empty directory, or pass --force to replace what is there"
            )
        with tempfile.TemporaryDirectory(prefix=".restoring-", dir=data_dir) as staging_name:
            staging = Path(staging_name)
            with tarfile.open(archive, "r:gz") as tar:
                try:
                    tar.extractall(staging, filter="data")  # no absolute paths, no "..", no links out
                except tarfile.TarError as exc:
                    raise SnapshotError(f"{archive}: unsafe or damaged member: {exc}") from None
            extracted = {f.relative_to(staging).as_posix() for f in staging.rglob("*") if f.is_file()} - {MANIFEST}
            expected = manifest["files"]
            if extracted != set(expected):
                raise SnapshotError(
                    f"{archive}: the files do not match the manifest "
                    f"(missing {sorted(set(expected) - extracted)[:5]}, "
                    f"extra {sorted(extracted - set(expected))[:5]})"
                )
            damaged = [name for name, digest in expected.items() if _sha256(staging / name) != digest]
            if damaged:
                raise SnapshotError(f"{archive}: checksum mismatch in {damaged[:5]}")
            found = {p.name: _counts(p) for p in _collections(staging)}
            if found != manifest["collections"]:
                raise SnapshotError(
                    f"{archive}: restored collections {found} differ from the manifest {manifest['collections']}"
                )
            for entry in existing:
                shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()
            (staging / MANIFEST).unlink()
            for entry in staging.iterdir():
                os.replace(entry, data_dir / entry.name)
    return manifest
