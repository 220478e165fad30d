"""Folders on a client's machine (datasource kind "manifest"): the client walks the folder with the folder rules
and sends a manifest (path -> SHA-256 and size); `plan` says which files it must upload (new, changed, or not in
the store) and which stored documents are gone; the job over the uploaded archive counts the others unchanged.

A manifest datasource remembers the SHA-256 of every file its last jobs ingested (`files`); a job writes them when
it finishes, without the files that failed, so a failed file is uploaded again next time.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from ragmesh_common.errors import invalid_argument
from ragmesh_common.reasons import Reason

MAX_MANIFEST_ENTRIES = 100_000
_SHA256 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ManifestEntry:
    path: str
    sha256: str
    size: int


@dataclass(frozen=True)
class ManifestIn:
    """A manifest as the client sent it (validated by `validate`)."""

    host: str
    folder: str
    entries: Sequence[ManifestEntry] = ()


@dataclass(frozen=True)
class Manifest:
    """A validated manifest: the client's host and folder, and its files by path (in the client's order)."""

    host: str
    folder: str
    files: dict[str, ManifestEntry] = field(default_factory=dict)

    @property
    def spec(self) -> str:
        """What makes the datasource: the same host and folder is the same datasource."""
        return f"{self.host}\0{self.folder}"

    @property
    def source(self) -> str:
        """The folder for people: host:folder."""
        return f"{self.host}:{self.folder}" if self.host else self.folder


@dataclass(frozen=True)
class Plan:
    upload: list[str]
    delete: list[str]
    unchanged: list[str]


def _path_ok(path: str) -> bool:
    if not path or "\\" in path or "\0" in path:
        return False
    parts = path.split("/")
    return not PurePosixPath(path).is_absolute() and all(p not in ("", ".", "..") for p in parts)


def validate(given: ManifestIn, *, field: str = "manifest") -> Manifest:
    """The manifest, or INVALID_ARGUMENT naming the first bad field (nothing is stored before this passes)."""
    folder, entries = given.folder, given.entries
    if not folder.strip():
        raise invalid_argument(Reason.MANIFEST_PATH_INVALID, "the manifest names no folder", field=f"{field}.folder")
    if len(entries) > MAX_MANIFEST_ENTRIES:
        raise invalid_argument(
            Reason.MANIFEST_TOO_LARGE,
            f"the manifest lists {len(entries)} files; the limit is {MAX_MANIFEST_ENTRIES}",
            field=f"{field}.entries",
            entries=len(entries),
            limit=MAX_MANIFEST_ENTRIES,
        )
    files: dict[str, ManifestEntry] = {}
    for i, entry in enumerate(entries):
        where = f"{field}.entries[{i}]"
        if not _path_ok(entry.path):
            raise invalid_argument(
                Reason.MANIFEST_PATH_INVALID,
                f"{entry.path!r} is not a relative path inside the folder (empty, absolute, '.' or '..' parts)",
                field=f"{where}.path",
                path=entry.path,
            )
        if entry.path in files:
            raise invalid_argument(
                Reason.MANIFEST_PATH_INVALID,
                f"{entry.path!r} is listed twice",
                field=f"{where}.path",
                path=entry.path,
            )
        if not _SHA256.fullmatch(entry.sha256):
            raise invalid_argument(
                Reason.MANIFEST_HASH_INVALID,
                f"the sha256 of {entry.path!r} is not 64 lowercase hex digits",
                field=f"{where}.sha256",
                path=entry.path,
            )
        files[entry.path] = entry
    return Manifest(given.host.strip(), folder, files)


def plan(manifest: Manifest, stored: Mapping[str, str], present: Collection[str], *, prune: bool) -> Plan:
    """Which files to upload (hash differs from the stored one, or the document is not in the store), which are
    unchanged, and (with `prune`) which stored documents are gone from the folder."""
    upload: list[str] = []
    unchanged: list[str] = []
    for path, entry in manifest.files.items():
        (unchanged if stored.get(path) == entry.sha256 and path in present else upload).append(path)
    delete = sorted(set(present) - manifest.files.keys()) if prune else []
    return Plan(upload, delete, unchanged)
