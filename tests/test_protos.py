"""The contract: protos lint clean, and the committed Python stubs are exactly what the protos generate."""

from __future__ import annotations

import filecmp
import importlib
import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

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


# The released contracts, as buf images built from the protos they shipped with (`buf build -o
# protos/releases/vX.Y.Z.binpb`). Every later change must be wire- and source-compatible with the latest (buf.yaml's
# FILE rules): new fields, RPCs and packages are fine; renames, removals and renumbering are not.
RELEASES = sorted(
    (ROOT / "protos" / "releases").glob("v*.binpb"), key=lambda p: [int(n) for n in p.stem[1:].split(".")]
)
RELEASE = RELEASES[-1]
# v1.1.0 declared every RPC's idempotency_level (which calls a client may retry); the gRPC wire is unchanged, so
# against the releases before it that one rule is left out.
IDEMPOTENCY_DECLARED = ROOT / "protos" / "releases" / "v1.1.0.binpb"


def _breaking(against: Path, cwd: Path = ROOT, *excepted: str) -> subprocess.CompletedProcess:
    config = (
        [
            "--config",
            json.dumps(
                {
                    "version": "v2",
                    "modules": [{"path": "protos"}],
                    "breaking": {"use": ["FILE"], "except": list(excepted)},
                }
            ),
        ]
        if excepted
        else []
    )
    return subprocess.run(
        [_buf(), "breaking", "--against", str(against), *config], cwd=cwd, capture_output=True, text=True, timeout=120
    )


def test_no_breaking_change_since_the_last_release():
    result = _breaking(RELEASE)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("release", [r.name for r in RELEASES[: RELEASES.index(IDEMPOTENCY_DECLARED)]])
def test_no_breaking_change_on_the_wire_since_an_earlier_release(release):
    result = _breaking(ROOT / "protos" / "releases" / release, ROOT, "RPC_SAME_IDEMPOTENCY_LEVEL")
    assert result.returncode == 0, result.stdout + result.stderr


def _breaking_after(tmp_path, proto: str, old: str, new: str):
    """buf breaking against RELEASE for a copy of the protos where `proto` has its first `old` replaced."""
    shutil.copytree(ROOT / "protos", tmp_path / "protos", ignore=shutil.ignore_patterns("releases"))
    shutil.copy(ROOT / "buf.yaml", tmp_path / "buf.yaml")
    path = tmp_path / "protos" / "ragmesh" / proto
    text = path.read_text()
    changed = text.replace(old, new, 1)
    assert changed != text
    path.write_text(changed)
    return _breaking(RELEASE, tmp_path)


def test_buf_breaking_catches_a_changed_idempotency_level(tmp_path):
    result = _breaking_after(
        tmp_path,
        "indexer/v1/indexer_service.proto",
        "option idempotency_level = IDEMPOTENT;",
        "option idempotency_level = NO_SIDE_EFFECTS;",
    )
    assert result.returncode != 0
    assert "idempotency_level" in result.stdout + result.stderr


def test_buf_breaking_catches_a_renumbered_field(tmp_path):
    result = _breaking_after(tmp_path, "search/v1/search_service.proto", "string query = 1;", "string query = 99;")
    assert result.returncode != 0
    assert "query" in result.stdout + result.stderr


# The RPCs a client must not retry, and why; every other unary RPC declares its idempotency_level, which
# ragmesh_common.clients reads to decide what to retry. A new RPC fails here until it says which it is.
NOT_IDEMPOTENT = {
    "ragmesh.answer.v1.AnswerService.Ask": "stores a turn in the session",
    "ragmesh.answer.v1.AnswerService.AskStream": "stores a turn in the session",
    "ragmesh.indexer.v1.IndexerService.CreateJob": "each call is a new job",
    "ragmesh.indexer.v1.IndexerService.SyncDatasources": "each call queues new jobs",
    "ragmesh.indexer.v1.IndexerService.ReindexCollection": "each call is a new re-index job",
    "ragmesh.indexer.v1.IndexerService.RollbackCollection": "a second call switches back again",
    "ragmesh.search.v1.SearchService.EvaluateCollection": "adds the scores to the collection's history",
}


def test_every_rpc_says_whether_it_may_be_retried():
    from google.protobuf.descriptor_pb2 import MethodOptions

    unmarked = set()
    for pb2 in ROOT.joinpath("libs", "api", "ragmesh").rglob("*_pb2.py"):
        module = importlib.import_module(".".join(pb2.relative_to(ROOT / "libs" / "api").with_suffix("").parts))
        for service in module.DESCRIPTOR.services_by_name.values():
            for method in service.methods:
                if method.GetOptions().idempotency_level == MethodOptions.IDEMPOTENCY_UNKNOWN:
                    unmarked.add(method.full_name)
    assert unmarked == set(NOT_IDEMPOTENT)
