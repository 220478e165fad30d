"""The contract: protos lint clean, and the committed Python stubs are exactly what the protos generate."""

from __future__ import annotations

import filecmp
import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _buf() -> str:
    buf = shutil.which("buf") or str(Path(sys.executable).parent / "buf")
    assert Path(buf).exists(), "buf is not installed (pip install buf-bin)"
    return buf


def test_buf_lint_is_clean():
    result = subprocess.run([_buf(), "lint"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_generated_stubs_match_the_protos(tmp_path):
    spec = importlib.util.spec_from_file_location("gen_protos", ROOT / "scripts" / "gen_protos.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    gen.generate(tmp_path)
    committed = ROOT / "libs" / "api"
    fresh = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    stale = [
        str(rel)
        for rel in fresh
        if not (committed / rel).exists() or not filecmp.cmp(tmp_path / rel, committed / rel, shallow=False)
    ]
    extra = sorted(
        str(p.relative_to(committed))
        for p in (committed / "ragmesh").rglob("*.py*")
        if p.is_file() and "__pycache__" not in p.parts and not (tmp_path / p.relative_to(committed)).exists()
    )
    assert not stale and not extra, f"stubs drifted from protos/ (run `make protos`): {stale} {extra}"


def test_every_service_package_is_versioned_and_matches_its_directory():
    for proto in (ROOT / "protos").rglob("*.proto"):
        rel = proto.relative_to(ROOT / "protos")
        package = ".".join(rel.parts[:-1])
        assert f"package {package};" in proto.read_text(), proto
        assert rel.parts[-2] == "v1"


# The first release of the contract, as a buf image built from the protos it shipped with
# (`buf build -o protos/releases/v1.0.0.binpb`). Every later change must be wire- and source-compatible with it
# (buf.yaml's FILE rules): new fields, RPCs and packages are fine; renames, removals and renumbering are not.
RELEASE = ROOT / "protos" / "releases" / "v1.0.0.binpb"


def test_no_breaking_change_since_the_first_release():
    result = subprocess.run(
        [_buf(), "breaking", "--against", str(RELEASE)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_buf_breaking_catches_a_renumbered_field(tmp_path):
    shutil.copytree(ROOT / "protos", tmp_path / "protos", ignore=shutil.ignore_patterns("releases"))
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    proto = tmp_path / "protos" / "ragmesh" / "search" / "v1" / "search_service.proto"
    text = proto.read_text()
    changed = text.replace("string query = 1;", "string query = 99;", 1)
    assert changed != text
    proto.write_text(changed)
    result = subprocess.run(
        [_buf(), "breaking", "--against", str(RELEASE)], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0
    assert "query" in result.stdout + result.stderr
