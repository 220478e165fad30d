"""The reference pages are generated from the code and say what it says: docs/reference/ is exactly what
scripts/gen_docs.py writes now; every setting has a description; every error reason the code gives is a member
of `Reason`, raised with the registry's gRPC code, and every member is given somewhere."""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

from pydantic_settings import BaseSettings
from ragmesh_common.reasons import Reason

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "docs" / "reference"


def _gen_docs():
    spec = importlib.util.spec_from_file_location("gen_docs", ROOT / "scripts" / "gen_docs.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    return gen


gen = _gen_docs()


def _code_files() -> Iterator[tuple[str, ast.Module]]:
    for top in gen.CODE:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if "tests" not in rel.parts:
                yield rel.as_posix(), ast.parse(path.read_text(), str(rel))


# --- the pages ---------------------------------------------------------------------------------------------
def test_the_reference_pages_are_what_the_code_generates(tmp_path):
    gen.generate(tmp_path)
    fresh = sorted(p.name for p in tmp_path.iterdir())
    committed = sorted(p.name for p in REFERENCE.iterdir()) if REFERENCE.exists() else []
    stale = [
        name
        for name in fresh
        if name not in committed or (REFERENCE / name).read_text() != (tmp_path / name).read_text()
    ]
    extra = sorted(set(committed) - set(fresh))
    assert not stale and not extra, (
        f"docs/reference/ drifted from the code (run `python scripts/gen_docs.py`): stale {stale}, extra {extra}"
    )


# --- settings ------------------------------------------------------------------------------------------------
def test_every_setting_has_a_description():
    missing = [
        f"{cls.__name__}.{name}"
        for cls in gen.settings_classes()
        for name, field in cls.model_fields.items()
        if not (field.description or "").strip()
    ]
    assert not missing, f"settings without Field(description=...): {missing}"


def test_every_settings_class_of_the_code_is_on_the_page():
    # Classes that build on BaseSettings (or on a class that does), found in the source, not among the imports.
    bases: dict[str, list[str]] = {}
    for _, tree in _code_files():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
    settings = {"BaseSettings"}
    while grown := {name for name, of in bases.items() if name not in settings and settings.intersection(of)}:
        settings |= grown
    documented = {cls.__name__ for cls in gen.settings_classes()}
    # A base class whose fields its documented subclasses carry (ServiceSettings) needs no section of its own.
    inherited = {base.__name__ for cls in gen.settings_classes() for base in cls.__mro__[1:]}
    missing = sorted(settings - {"BaseSettings"} - documented - inherited)
    assert not missing, f"settings classes missing from scripts/gen_docs.py settings_sections(): {missing}"
    assert all(issubclass(cls, BaseSettings) for cls in gen.settings_classes())


# --- error reasons ---------------------------------------------------------------------------------------------
# The error helpers and where their reason is: RagmeshError(code, reason, ...), invalid_argument(reason, ...).
HELPERS = {"RagmeshError": 1, "_error": 1, "invalid_argument": 0, "not_found": 0, "failed_precondition": 0}
HELPERS["unavailable"] = 0
HELPER_CODES = {
    "invalid_argument": "INVALID_ARGUMENT",
    "not_found": "NOT_FOUND",
    "failed_precondition": "FAILED_PRECONDITION",
    "unavailable": "UNAVAILABLE",
}
# Names an error is caught as: `exc.reason == "COLLECTION_NOT_FOUND"` compares a reason (`skipped.reason` does not).
ERROR_NAMES = {"exc", "err", "error", "e"}


def _status_code(node: ast.expr | None) -> str | None:
    """ "NOT_FOUND" for `grpc.StatusCode.NOT_FOUND` (or `_C.NOT_FOUND`); None when not known statically."""
    if isinstance(node, ast.Attribute) and node.attr.isupper() and isinstance(node.value, ast.Name | ast.Attribute):
        owner = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
        if owner in ("StatusCode", "_C"):
            return node.attr
    return None


def _reason_sites(tree: ast.Module) -> Iterator[tuple[ast.expr, str | None]]:
    """Each expression the code gives as an error reason, with the gRPC code it is given with (when known)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
            code = HELPER_CODES.get(name) or (_status_code(node.args[0]) if node.args else None)
            if name in HELPERS and len(node.args) > HELPERS[name]:
                yield node.args[HELPERS[name]], code
            for keyword in node.keywords:
                if keyword.arg == "reason":
                    yield keyword.value, code if name in HELPERS else None
        elif isinstance(node, ast.Dict):  # {"code": "UNAVAILABLE", "reason": "REMOTE_UNREACHABLE", ...}
            for key, value in zip(node.keys, node.values, strict=True):
                if isinstance(key, ast.Constant) and key.value == "reason":
                    yield value, None
        elif isinstance(node, ast.Compare):  # exc.reason == "X", exc.reason in ("X", "Y")
            left = node.left
            if (
                isinstance(left, ast.Attribute)
                and left.attr == "reason"
                and getattr(left.value, "id", "") in ERROR_NAMES
            ):
                for right in node.comparators:
                    yield from (
                        (e, None)
                        for e in (right.elts if isinstance(right, ast.Tuple | ast.List | ast.Set) else [right])
                    )
        elif isinstance(node, ast.Tuple) and len(node.elts) == 2 and _status_code(node.elts[0]):  # (code, reason)
            yield node.elts[1], _status_code(node.elts[0])
        elif isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.Dict):  # _STATUS_BY_REASON
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any("REASON" in getattr(t, "id", "") for t in targets):
                yield from ((k, None) for k in node.value.keys if k is not None)


def _reason_name(node: ast.expr) -> str | None:
    """The reason an expression names: a literal, or a member `Reason.X`; None for one computed at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Reason":
        return node.attr
    return None


def _used_reasons() -> list[tuple[str, str, int, str | None]]:
    """(reason, file, line, gRPC code or None) of every reason the code gives."""
    used = []
    for rel, tree in _code_files():
        for node, code in _reason_sites(tree):
            name = _reason_name(node)
            if name is not None:
                used.append((name, rel, node.lineno, code))
    return used


def _named_members() -> set[str]:
    """Every `Reason.X` the code names anywhere (outside the registry)."""
    return {
        node.attr
        for rel, tree in _code_files()
        if not rel.endswith("ragmesh_common/reasons.py")
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Reason"
    }


def test_the_scan_finds_the_reasons_the_code_gives():
    used = {name for name, *_ in _used_reasons()}
    # One of each kind of site: a helper, RagmeshError, the gateway's maps, a compared reason, a dict body.
    assert {"COLLECTION_NOT_FOUND", "MESH_TOKEN_INVALID", "ROUTE_NOT_FOUND", "REMOTE_UNREACHABLE"} <= used
    assert len(used) >= 100


def test_every_reason_the_code_gives_is_in_the_registry():
    members = {r.name for r in Reason}
    unknown = sorted({f"{name} ({rel}:{line})" for name, rel, line, _ in _used_reasons() if name not in members})
    assert not unknown, f"reasons missing from ragmesh_common.reasons.Reason: {unknown}"


def test_every_reason_is_given_with_its_registered_code():
    wrong = sorted(
        f"{name} as {code} ({rel}:{line}); the registry says {Reason[name].code.name}"
        for name, rel, line, code in _used_reasons()
        if code and name in Reason.__members__ and Reason[name].code.name != code
    )
    assert not wrong, wrong


def test_every_registered_reason_is_given_somewhere():
    used = {name for name, *_ in _used_reasons()} | _named_members()
    unused = sorted(r.name for r in Reason if r.name not in used)
    assert not unused, f"reasons in the registry that no code gives (remove them): {unused}"


def test_a_reason_is_its_name_on_the_wire():
    from ragmesh_common.errors import RagmeshError, received

    for reason in Reason:
        assert reason.value == reason.name and str(reason) == reason.name and f"{reason}" == reason.name
        assert reason.meaning.strip() and reason.meaning.endswith(".")
    sent = RagmeshError(Reason.COLLECTION_NOT_FOUND.code, Reason.COLLECTION_NOT_FOUND, "gone", "indexer.ragmesh")
    got = received(sent)
    assert got.reason == "COLLECTION_NOT_FOUND" and type(got.reason) is str
