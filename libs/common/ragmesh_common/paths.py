"""Local paths a server may read: only under configured roots, with `..` and symlinks resolved first, so
neither leads out of them. Shared by the gateway's MCP `convert_to_text`, the indexer's folder jobs and the
CLI's MCP bridge."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlsplit

import grpc

from .errors import RagmeshError, invalid_argument, not_found
from .reasons import Reason


def parse_roots(raw: str) -> tuple[Path, ...]:
    """Comma-separated folders -> resolved paths (empty entries dropped)."""
    return tuple(Path(part.strip()).expanduser().resolve() for part in raw.split(",") if part.strip())


def split_commas(value: object) -> object:
    """A settings validator (mode="before"): "a, b" -> ("a", "b"); other values unchanged."""
    if isinstance(value, str):
        return tuple(part.strip() for part in value.split(",") if part.strip())
    return value


def existing_folders(roots: tuple[Path, ...]) -> tuple[Path, ...]:
    """Roots from settings, resolved; ValueError naming those that are not folders (a settings validator)."""
    missing = [str(root) for root in roots if not root.expanduser().is_dir()]
    if missing:
        raise ValueError(f"not a folder: {', '.join(missing)}")
    return tuple(root.expanduser().resolve() for root in roots)


def under_roots(uri: str, roots: tuple[Path, ...], *, domain: str, setting: str, field: str = "uri") -> Path:
    """The path `uri` (a path or file:// URI) names, resolved (`..` and symlinks followed) and inside one of
    `roots`, else PERMISSION_DENIED (LOCAL_PATHS_DISABLED, PATH_OUTSIDE_ROOTS). A relative path is taken
    relative to the first root. `setting` names the variable that holds the roots, for the message."""
    if not roots:
        raise RagmeshError(
            grpc.StatusCode.PERMISSION_DENIED,
            Reason.LOCAL_PATHS_DISABLED,
            f"this server reads no local files ({setting} is empty)",
            domain,
            {"setting": setting},
        )
    raw = unquote(urlsplit(uri).path) if uri.lower().startswith("file://") else uri
    try:
        path = (roots[0] / Path(raw).expanduser()).resolve()
    except (OSError, RuntimeError, ValueError) as exc:  # a symlink loop, a NUL byte
        raise invalid_argument(Reason.PATH_INVALID, f"not a usable path: {exc}", field=field) from None
    if not any(path.is_relative_to(root) for root in roots):
        raise RagmeshError(
            grpc.StatusCode.PERMISSION_DENIED,
            Reason.PATH_OUTSIDE_ROOTS,
            f"the path is outside the folders this server may read ({setting})",
            domain,
            {"roots": ",".join(str(root) for root in roots), "setting": setting},
        )
    return path


def file_under_roots(uri: str, roots: tuple[Path, ...], *, domain: str, setting: str, field: str = "uri") -> Path:
    """As `under_roots`, and the path must be a file (else NOT_FOUND FILE_NOT_FOUND)."""
    path = under_roots(uri, roots, domain=domain, setting=setting, field=field)
    if not path.is_file():
        raise not_found(Reason.FILE_NOT_FOUND, "no such file", path=str(path))
    return path


def folder_under_roots(uri: str, roots: tuple[Path, ...], *, domain: str, setting: str, field: str = "folder") -> Path:
    """As `under_roots`, and the path must be a folder (else NOT_FOUND FOLDER_NOT_FOUND)."""
    path = under_roots(uri, roots, domain=domain, setting=setting, field=field)
    if not path.is_dir():
        raise not_found(Reason.FOLDER_NOT_FOUND, "no such folder", path=str(path))
    return path
