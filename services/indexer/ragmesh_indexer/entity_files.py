"""Files of entities -> graph entities: Kubernetes YAML or JSON (one or many documents, List kinds included) and
JSON Lines of EntityInput objects. Pure: bytes in, entities out.

The format: a name ending in .jsonl or .ndjson (or a JSON Lines MIME type) is JSON Lines; .json is one JSON
value (an object, or an array of objects); anything else is YAML, one or many documents, unless its first line
is a JSON object and so is every other non-blank line (JSON Lines without the name). Each document or line is
then read by its content: an object with apiVersion and kind is a Kubernetes object (`kube`), an object with a
type is an EntityInput ({"type", "primary_key", "properties", "labels", "alternative_keys", "relations"}).

A file that cannot be parsed is refused with GRAPH_FILE_INVALID naming the file and the line; a document that is
not a valid entity with ENTITY_INVALID naming the file, the document (1-based) or line and the field, e.g.
"files[0] document 2: metadata.name".
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from ragmesh_common.errors import RagmeshError, invalid_argument
from ragmesh_common.reasons import Reason

from . import kube
from .entities import GraphEntity, build, entity_invalid

_JSONL_TYPES = ("application/jsonl", "application/x-ndjson", "application/x-jsonlines", "application/jsonlines")
_Loader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@dataclass(frozen=True)
class EntityFile:
    """A file to read entities from."""

    data: bytes
    filename: str = ""
    mime_type: str = ""
    path: str = ""  # where it lies in the folder it was read from; named in errors

    @property
    def name(self) -> str:
        return self.path or self.filename


def read(files: Sequence[EntityFile], *, max_property_chars: int) -> list[GraphEntity]:
    """The entities of every file, in file and document order (each followed by its children). Kubernetes
    objects of all files are read together, so a relation can join objects of two files."""
    generic: list[GraphEntity] = []
    objects: list[kube.KubeObject] = []
    for i, file in enumerate(files):
        for document, field in _documents(file, i):
            if kube.is_kube_object(document):
                objects.extend(kube.objects(document, field))
            elif isinstance(document, Mapping) and "type" in document:
                generic.extend(build(document, field=field, max_property_chars=max_property_chars))
            elif document is not None:
                raise entity_invalid(
                    "neither a Kubernetes object (apiVersion, kind) nor an entity (type, primary_key, properties)",
                    field,
                )
    return [*kube.entities(objects, max_property_chars=max_property_chars), *generic]


def _documents(file: EntityFile, index: int) -> list[tuple[Any, str]]:
    """(document, its field prefix for errors) of a file."""
    name = file.name or f"files[{index}]"
    try:
        text = file.data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise _file_invalid(f"{name} is not UTF-8 text (byte {exc.start})", index, file.name, 0) from None
    lower = (file.filename or file.path).lower()
    if lower.endswith((".jsonl", ".ndjson")) or file.mime_type in _JSONL_TYPES or _looks_like_jsonl(text, lower):
        return _json_lines(text, index, file.name)
    if lower.endswith(".json"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise _file_invalid(f"{name} is not JSON: {exc.msg}", index, file.name, exc.lineno) from None
        values = value if isinstance(value, list) else [value]
        return [(v, f"files[{index}] document {i + 1}: ") for i, v in enumerate(values)]
    return _yaml_documents(text, index, file.name)


def _looks_like_jsonl(text: str, lower: str) -> bool:
    if lower.endswith((".yaml", ".yml", ".json")):
        return False
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or not lines[0].lstrip().startswith("{"):
        return False
    try:
        return all(isinstance(json.loads(line), dict) for line in lines)
    except json.JSONDecodeError:
        return False


def _json_lines(text: str, index: int, filename: str) -> list[tuple[Any, str]]:
    documents: list[tuple[Any, str]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            documents.append((json.loads(line), f"files[{index}] line {number}: "))
        except json.JSONDecodeError as exc:
            raise _file_invalid(
                f"{filename or f'files[{index}]'} line {number} is not JSON: {exc.msg}", index, filename, number
            ) from None
    return documents


def _yaml_documents(text: str, index: int, filename: str) -> list[tuple[Any, str]]:
    documents: list[tuple[Any, str]] = []
    loader = _Loader(text)
    try:
        while loader.check_node():
            node = loader.get_node()
            documents.append((loader.construct_document(node), f"files[{index}] document {len(documents) + 1}: "))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        line = mark.line + 1 if mark is not None else 0
        problem = getattr(exc, "problem", None) or str(exc)
        where = f" line {line}" if line else ""
        raise _file_invalid(
            f"{filename or f'files[{index}]'}{where} is not valid YAML: {problem}", index, filename, line
        ) from None
    finally:
        loader.dispose()
    return documents


def _file_invalid(message: str, index: int, filename: str, line: int) -> RagmeshError:
    return invalid_argument(Reason.GRAPH_FILE_INVALID, message, field=f"files[{index}]", filename=filename, line=line)
