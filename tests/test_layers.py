"""The layers point one way: protos -> libs -> services and gateway -> the CLI.

Nothing in libs/ imports a service, the gateway or the CLI; a service never imports another service, the
gateway or the CLI (they talk gRPC); the gateway imports no service and no CLI. Checked on every import
statement, function-level ones included, and by importing every lib module in a fresh interpreter where the
services, the gateway and the CLI cannot be imported at all (as in an image that carries only a lib)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

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
