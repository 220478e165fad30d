"""Walking a folder to index it: the one set of skip rules the CLI (`ragmesh index`, `ragmesh ingest`), the
indexer's folder jobs and the MCP bridge share.

- Ignored quietly: `.gitignore` and `.ragmeshignore` rules (nested files apply below their folder, as in git)
  and the default skips (`.git`, `node_modules`, `__pycache__`, virtual environments, caches, build outputs,
  `*.egg-info`). Ignored folders are not entered.
- Secrets are never opened: `.env` files, private keys, credentials files (reason SECRET).
- Binaries (reason BINARY: a known binary extension, or a NUL byte in the first 8 KiB of a file that is not
  a document the converter reads), oversized files (TOO_LARGE), symlinks that leave the folder
  (SYMLINK_OUTSIDE) and unreadable files (UNREADABLE) are skipped with their reason; empty files (EMPTY, no
  visible text) are skipped too, and `SkippedFile.quiet` says not to shout about them.
"""

from __future__ import annotations

import fnmatch
import io
import os
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pathspec

IGNORE_FILES = (".gitignore", ".ragmeshignore")
DEFAULT_SKIP_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".tox",
        ".nox",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".ragmesh",
        ".eggs",
        "build",
        "dist",
        "target",
        ".next",
        ".gradle",
        ".idea",
        ".cache",
        "site-packages",
    }
)
DEFAULT_SKIP_DIR_GLOBS = ("*.egg-info",)
# Never opened, whatever the ignore files say.
SECRET_GLOBS = (
    ".env",
    ".env.*",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "*.jks",
    "*.keystore",
    "*.kdbx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".netrc",
    ".npmrc",
    ".pypirc",
    ".htpasswd",
    ".pgpass",
    "credentials",
    "credentials.*",
    "*credentials*.json",
    "service-account*.json",
    "*.secret",
    "secrets.*",
)
SECRET_EXCEPTIONS = (".env.example", ".env.sample", ".env.template", "*.pub")
BINARY_EXTENSIONS = frozenset(
    {
        ".pyc",
        ".pyo",
        ".so",
        ".o",
        ".a",
        ".dll",
        ".dylib",
        ".exe",
        ".class",
        ".jar",
        ".war",
        ".whl",
        ".egg",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".bmp",
        ".ico",
        ".webp",
        ".tif",
        ".tiff",
        ".woff",
        ".woff2",
        ".ttf",
        ".otf",
        ".eot",
        ".mp3",
        ".mp4",
        ".wav",
        ".ogg",
        ".mov",
        ".avi",
        ".mkv",
        ".sqlite",
        ".sqlite3",
        ".db",
        ".bin",
        ".pt",
        ".pth",
        ".onnx",
        ".npy",
        ".npz",
        ".pkl",
        ".parquet",
        ".tar",
        ".gz",
        ".tgz",
        ".bz2",
        ".xz",
        ".7z",
        ".rar",
        ".zst",
        ".iso",
        ".dmg",
        ".lock-wal",
    }
)
# Binary documents the converter reads.
DOCUMENT_EXTENSIONS = frozenset({".pdf", ".docx", ".pptx", ".xlsx", ".xls", ".epub", ".zip", ".msg"})
_SNIFF_BYTES = 8192

SECRET, BINARY, TOO_LARGE, EMPTY, SYMLINK_OUTSIDE, UNREADABLE = (
    "SECRET",
    "BINARY",
    "TOO_LARGE",
    "EMPTY",
    "SYMLINK_OUTSIDE",
    "UNREADABLE",
)


@dataclass(frozen=True)
class WalkedFile:
    """A file to ingest: its absolute path, its path relative to the folder (POSIX) and its size."""

    path: Path
    rel: str
    size: int


@dataclass(frozen=True)
class SkippedFile:
    rel: str
    reason: str

    @property
    def quiet(self) -> bool:
        """Empty files are skipped without a word."""
        return self.reason == EMPTY


@dataclass
class Walk:
    files: list[WalkedFile] = field(default_factory=list)
    skipped: list[SkippedFile] = field(default_factory=list)


def is_secret(name: str) -> bool:
    lowered = name.lower()
    if any(fnmatch.fnmatchcase(lowered, g) for g in SECRET_EXCEPTIONS):
        return False
    return any(fnmatch.fnmatchcase(lowered, g) for g in SECRET_GLOBS)


def _skip_dir(name: str) -> bool:
    return name in DEFAULT_SKIP_DIRS or any(fnmatch.fnmatchcase(name, g) for g in DEFAULT_SKIP_DIR_GLOBS)


def _ignore_spec(folder: Path) -> pathspec.GitIgnoreSpec | None:
    lines: list[str] = []
    for name in IGNORE_FILES:
        try:
            lines += (folder / name).read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
    return pathspec.GitIgnoreSpec.from_lines(lines) if lines else None


def _ignored(rel: str, is_dir: bool, specs: list[tuple[str, pathspec.GitIgnoreSpec]]) -> bool:
    for base, spec in specs:
        if base and not rel.startswith(base + "/"):
            continue
        local = rel[len(base) + 1 :] if base else rel
        if spec.match_file(local + "/" if is_dir else local):
            return True
    return False


def classify(path: Path, rel: str, size: int, max_bytes: int) -> str | None:
    """Why a file (not ignored) is skipped, or None to ingest it. Secrets are decided by name, unopened."""
    name = PurePosixPath(rel).name
    if is_secret(name):
        return SECRET
    suffix = PurePosixPath(name.lower()).suffix
    if suffix in BINARY_EXTENSIONS:
        return BINARY
    if size > max_bytes:
        return TOO_LARGE
    if size == 0:
        return EMPTY
    if suffix in DOCUMENT_EXTENSIONS:
        return None
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError:
        return UNREADABLE
    if b"\x00" in head:
        return BINARY
    if size <= _SNIFF_BYTES and not head.strip():
        return EMPTY
    return None


def classify_bytes(rel: str, data: bytes, max_bytes: int) -> str | None:
    """`classify` for a file already in memory (an archive member)."""
    name = PurePosixPath(rel).name
    suffix = PurePosixPath(name.lower()).suffix
    if is_secret(name):
        return SECRET
    if suffix in BINARY_EXTENSIONS:
        return BINARY
    if len(data) > max_bytes:
        return TOO_LARGE
    if not data.strip():
        return EMPTY
    if suffix not in DOCUMENT_EXTENSIONS and b"\x00" in data[:_SNIFF_BYTES]:
        return BINARY
    return None


def walk(root: Path, *, max_bytes: int) -> Walk:
    """Every file under `root` to ingest, and the ones skipped with their reason, both sorted by path."""
    root = root.resolve()
    result = Walk()
    if root.is_file():
        reason = classify(root, root.name, root.stat().st_size, max_bytes)
        if reason:
            result.skipped.append(SkippedFile(root.name, reason))
        else:
            result.files.append(WalkedFile(root, root.name, root.stat().st_size))
        return result
    for item in _entries(root, root, [], max_bytes):
        if isinstance(item, SkippedFile):
            result.skipped.append(item)
        else:
            result.files.append(item)
    result.files.sort(key=lambda f: f.rel)
    result.skipped.sort(key=lambda s: s.rel)
    return result


def _entries(
    root: Path, folder: Path, specs: list[tuple[str, pathspec.GitIgnoreSpec]], max_bytes: int
) -> Iterator[WalkedFile | SkippedFile]:
    rel_folder = folder.relative_to(root).as_posix() if folder != root else ""
    spec = _ignore_spec(folder)
    if spec is not None:
        specs = [*specs, (rel_folder, spec)]
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError:
        yield SkippedFile(rel_folder or ".", UNREADABLE)
        return
    for entry in entries:
        rel = f"{rel_folder}/{entry.name}" if rel_folder else entry.name
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            is_link = entry.is_symlink()
        except OSError:
            yield SkippedFile(rel, UNREADABLE)
            continue
        if is_dir:
            if not _skip_dir(entry.name) and not _ignored(rel, True, specs):
                yield from _entries(root, Path(entry.path), specs, max_bytes)
            continue
        if _ignored(rel, False, specs) or entry.name in IGNORE_FILES:
            continue
        if is_secret(entry.name):  # decided by name: never stat'ed beyond the listing, never opened
            yield SkippedFile(rel, SECRET)
            continue
        path = Path(entry.path)
        if is_link:
            try:
                target = path.resolve(strict=True)
            except (OSError, RuntimeError):
                yield SkippedFile(rel, UNREADABLE)
                continue
            if not target.is_relative_to(root):
                yield SkippedFile(rel, SYMLINK_OUTSIDE)
                continue
            if not target.is_file():
                continue
        try:
            size = path.stat().st_size
        except OSError:
            yield SkippedFile(rel, UNREADABLE)
            continue
        if not path.is_file():
            continue
        reason = classify(path, rel, size, max_bytes)
        yield SkippedFile(rel, reason) if reason else WalkedFile(path, rel, size)


def size_groups(files: Sequence[WalkedFile], limit: int) -> list[list[WalkedFile]]:
    """The files in order, cut into groups of at most `limit` bytes (a larger file is a group of its own)."""
    groups: list[list[WalkedFile]] = [[]]
    size = 0
    for f in files:
        if groups[-1] and size + f.size > limit:
            groups.append([])
            size = 0
        groups[-1].append(f)
        size += f.size
    return [g for g in groups if g]


def zip_files(files: Sequence[WalkedFile]) -> bytes:
    """A ZIP archive of the files, each under its relative path (what archive jobs take)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for f in files:
            archive.write(f.path, f.rel)
    return buffer.getvalue()
