"""The layers point one way: protos -> libs -> services and gateway -> the CLI -> bench, and no package imports
itself round in a circle.

Nothing in libs/ imports a service, the gateway or the CLI; a service never imports another service, the
gateway or the CLI (they talk gRPC); the gateway imports no service and no CLI. Checked on every import
statement, function-level ones included, and by importing every lib module in a fresh interpreter where the
services, the gateway and the CLI cannot be imported at all (as in an image that carries only a lib).

`.importlinter` holds the same rules as import-linter contracts (`lint-imports`, in `make lint`): the layers, the
independence of the services and the gateway, and no circle inside a package. The tests below keep that file
naming every package and kept, and name a circle module by module (with the import lines) where one appears."""

from __future__ import annotations

import ast
import configparser
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

import grimp
import pytest

REPO = Path(__file__).resolve().parents[1]
SERVICES = sorted(p.name for p in (REPO / "services").iterdir() if (p / "pyproject.toml").is_file())
UPPER = {f"ragmesh_{name}" for name in SERVICES} | {"ragmesh_gateway", "ragmesh_cli"}


def _packages() -> dict[str, tuple[Path, set[str]]]:
    """package -> (its folder, the top-level ragmesh packages it must not import)."""
    found = {}
    for lib in (REPO / "libs").iterdir():
        for pkg in lib.glob("ragmesh_*/__init__.py"):
            found[pkg.parent.name] = (pkg.parent, UPPER)
    for name in SERVICES:
        found[f"ragmesh_{name}"] = (REPO / "services" / name / f"ragmesh_{name}", UPPER - {f"ragmesh_{name}"})
    found["ragmesh_gateway"] = (REPO / "gateway" / "ragmesh_gateway", UPPER - {"ragmesh_gateway"})
    return found


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_every_package_is_checked():
    packages = _packages()
    assert {"ragmesh_common", "ragmesh_store", "ragmesh_gateway"} <= set(packages)
    assert {f"ragmesh_{name}" for name in ("converter", "embedder", "indexer", "search")} <= set(packages)


@pytest.mark.parametrize("package", sorted(_packages()))
def test_no_import_points_up_or_sideways(package):
    folder, forbidden = _packages()[package]
    wrong = {
        f"{path.relative_to(REPO)} imports {name}"
        for path in folder.rglob("*.py")
        for name in _imports(path) & forbidden
    }
    assert not wrong, sorted(wrong)


def test_the_checker_sees_function_level_imports(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from ragmesh_gateway.app import run_gateway\n    import ragmesh_cli.app\n")
    assert {"ragmesh_gateway", "ragmesh_cli"} <= _imports(module)


@pytest.mark.e2e  # a child process
def test_every_lib_module_imports_without_any_service_gateway_or_cli():
    modules = sorted(
        ".".join(path.relative_to(lib).with_suffix("").parts).removesuffix(".__init__")
        for lib in (REPO / "libs").iterdir()
        for path in lib.glob("ragmesh_*/**/*.py")
    )
    assert "ragmesh_common.server" in modules and "ragmesh_store.edge" in modules
    script = f"""
import importlib, importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {sorted(UPPER)!r}:
            raise ModuleNotFoundError(f"{{name}} is not installed here")
sys.meta_path.insert(0, Block())
for module in {modules!r}:
    importlib.import_module(module)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


# --- circles and the import contracts -------------------------------------------------------------------------
def _root_packages() -> list[str]:
    """Every package of the repository: the generated API, libs, services, gateway, CLI and bench."""
    found = [
        pkg.parent.name
        for pattern in ("libs/*/*/__init__.py", "services/*/ragmesh_*/__init__.py")
        for pkg in REPO.glob(pattern)
    ]
    return sorted({*found, "ragmesh_gateway", "ragmesh_cli", "bench"})


def _circles(graph: grimp.ImportGraph, modules: Iterable[str]) -> list[list[str]]:
    """The import circles among `modules`: each strongly connected component of more than one module, sorted."""
    modules = sorted(modules)
    imports: Mapping[str, list[str]] = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in modules}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles = []
    for root in modules:  # Tarjan's algorithm, iterative
        if root in index:
            continue
        work = [(root, iter(imports.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, pending = work[-1]
            child = next(pending, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
            elif child not in index and child in imports:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(imports[child])))
            elif child in on_stack:
                low[module] = min(low[module], index[child])
    return sorted(circles)


def _described(graph: grimp.ImportGraph, circle: list[str]) -> str:
    members = set(circle)
    lines = [" <-> ".join(circle)]
    for importer in circle:
        for imported in sorted(graph.find_modules_directly_imported_by(importer) & members):
            for detail in graph.get_import_details(importer=importer, imported=imported):
                lines.append(f"  {importer} -> {imported} (line {detail['line_number']}: {detail['line_contents']})")
    return "\n".join(lines)


def test_no_package_imports_itself_round_in_a_circle(monkeypatch):
    monkeypatch.syspath_prepend(str(REPO))  # bench
    graph = grimp.build_graph(*_root_packages(), cache_dir=None)
    circles = _circles(graph, graph.modules)
    assert not circles, "import circles (move what they share into a module below them):\n" + "\n".join(
        _described(graph, c) for c in circles
    )


def test_the_circle_finder_sees_function_level_and_type_checking_imports(tmp_path, monkeypatch):
    package = tmp_path / "circled"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from . import b\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import c\n")
    (package / "c.py").write_text("import circled.a\n")
    (package / "d.py").write_text("from . import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    graph = grimp.build_graph("circled", cache_dir=None)
    circles = _circles(graph, graph.modules)
    assert circles == [["circled.a", "circled.b", "circled.c"]]
    assert "circled.a -> circled.b (line 2: from . import b)" in _described(graph, circles[0])


def _contracts() -> configparser.ConfigParser:
    config = configparser.ConfigParser()
    assert config.read(REPO / ".importlinter"), "no .importlinter at the repository root"
    return config


def _listed(value: str) -> list[str]:
    return sorted(line.strip() for line in value.splitlines() if line.strip())


def test_the_import_contracts_name_every_package():
    config = _contracts()
    packages = _root_packages()
    upper = sorted(UPPER - {"ragmesh_cli"})
    assert {"ragmesh", "ragmesh_common", "ragmesh_store", "ragmesh_cli", "bench"} <= set(packages)
    assert _listed(config["importlinter"]["root_packages"]) == packages
    assert _listed(config["importlinter:contract:acyclic"]["ancestors"]) == packages
    assert _listed(config["importlinter:contract:independent"]["modules"]) == upper
    layers = _listed(config["importlinter:contract:layers"]["layers"].replace("|", "\n"))
    assert sorted(layers) == packages


def test_the_import_contracts_are_kept():
    lint_imports = Path(sys.executable).with_name("lint-imports")
    proc = subprocess.run(
        [str(lint_imports), "--no-cache", "--no-logo"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 kept, 0 broken" in proc.stdout, proc.stdout
