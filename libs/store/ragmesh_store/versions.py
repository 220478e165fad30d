"""Versioned collections: a collection's name points at one physical version, its own index built with its own
embedding model and chunking. Searches and ingests address the name; a re-index builds the next version beside
the active one and switches the name over in one write.

The registry is a collection record (`VERSIONS_RECORD`) kept on the collection's own name, so it goes with the
collection, survives restarts and is the same in both store adapters; switching is one record write, which
both adapters make atomically (a file rename; one Qdrant collection-metadata update). Version 1 is the
collection under its own name (every collection made before versions existed is a version 1); version n > 1
lives in the physical collection `<name>.v<n>` (a name no user collection can have: COLLECTION_NAME_RE has
no dot), which the adapters leave out of `list_collections`.

Where there is no record, the collection has one version, 1, built with the indexer's configured settings.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import Any, Literal

from .base import Store

VERSIONS_RECORD = "versions"
VERSION_NAME_RE = re.compile(r"^(?P<name>.+)\.v(?P<version>[1-9][0-9]*)$")
State = Literal["active", "building", "previous"]


def physical_name(name: str, version: int) -> str:
    """The store collection holding `version` of collection `name`."""
    return name if version == 1 else f"{name}.v{version}"


def is_version_name(physical: str) -> bool:
    """True for the store collection of a version above 1 (hidden from listings)."""
    return VERSION_NAME_RE.fullmatch(physical) is not None


@dataclass(frozen=True)
class IndexSettings:
    """What decides a version's vectors. `model` is the embedder's name for it ("" = its default model)."""

    model: str = ""
    model_id: str = ""
    dimension: int = 0
    sparse_model_id: str = ""
    chunk_tokens: int = 0
    chunk_overlap_tokens: int = 0
    chunker_fingerprint: str = ""


@dataclass(frozen=True)
class Version:
    """One version. `settings` is None for a version 1 recorded before its settings were (the indexer's
    configured settings, as with no record at all)."""

    version: int
    state: State
    settings: IndexSettings | None = None
    created_at: str = ""
    retained_until: str = ""  # previous versions: dropped after this (ISO 8601, UTC)
    job_id: str = ""  # the re-index job that builds or built it


@dataclass(frozen=True)
class Versions:
    """A collection's versions: exactly one active, at most one building and one previous."""

    name: str
    active: int = 1
    versions: tuple[Version, ...] = (Version(1, "active"),)
    next_version: int = 2  # numbers are never reused, so a dropped version's leftovers never mix with a new one
    recorded: bool = False  # False: there was no record (one implicit version 1)

    def get(self, version: int) -> Version | None:
        return next((v for v in self.versions if v.version == version), None)

    def in_state(self, state: State) -> Version | None:
        return next((v for v in self.versions if v.state == state), None)

    @property
    def current(self) -> Version:
        found = self.get(self.active)
        assert found is not None, f"{self.name}: active version {self.active} is not among its versions"
        return found

    def physical(self, version: int | None = None) -> str:
        """The store collection of `version` (default: the active one)."""
        return physical_name(self.name, self.active if version is None else version)

    def written(self) -> list[Version]:
        """The versions every write goes to: the active one first, then one being built and the one kept for a
        rollback (so that neither a switch nor a rollback loses a write)."""
        return [self.current, *(v for v in self.versions if v.state in ("building", "previous"))]

    def replaced(self, *versions: Version) -> Versions:
        """These versions, with the given ones replacing those of the same number (or added)."""
        by_number = {v.version: v for v in self.versions}
        by_number.update({v.version: v for v in versions})
        return dataclasses.replace(self, versions=tuple(by_number[n] for n in sorted(by_number)))

    def without(self, version: int) -> Versions:
        return dataclasses.replace(self, versions=tuple(v for v in self.versions if v.version != version))

    def to_json(self) -> dict[str, Any]:
        return {
            "active": self.active,
            "next_version": self.next_version,
            "versions": [dataclasses.asdict(v) for v in self.versions],
        }

    @classmethod
    def from_json(cls, name: str, value: dict[str, Any]) -> Versions:
        versions = tuple(
            Version(
                int(v["version"]),
                v["state"],
                IndexSettings(**v["settings"]) if v.get("settings") else None,
                v.get("created_at", ""),
                v.get("retained_until", ""),
                v.get("job_id", ""),
            )
            for v in value["versions"]
        )
        return cls(name, int(value["active"]), versions, int(value.get("next_version", 2)), recorded=True)


def read_versions(store: Store, name: str) -> Versions:
    """The collection's versions (one implicit version 1 when it has no record). CollectionNotFound if the
    collection does not exist."""
    value = store.collection_record(name, VERSIONS_RECORD)
    return Versions(name) if value is None else Versions.from_json(name, value)


def write_versions(store: Store, versions: Versions) -> None:
    """Replace the collection's record: one atomic write (this is the switch)."""
    store.set_collection_record(versions.name, VERSIONS_RECORD, versions.to_json())


__all__ = [
    "VERSIONS_RECORD",
    "IndexSettings",
    "Version",
    "Versions",
    "is_version_name",
    "physical_name",
    "read_versions",
    "write_versions",
]
