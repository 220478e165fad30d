"""The folder walker's skip rules, on a real folder. Secrets and ignored folders hold FIFOs: opening one would
block forever, so a walk that finishes proves they were never opened."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from ragmesh_common.errors import RagmeshError
from ragmesh_common.paths import file_under_roots, folder_under_roots
from ragmesh_common.walk import classify_bytes, walk


def write(root: Path, rel: str, data: str | bytes) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    write(root, "README.md", "# Repo\n\nHello.\n")
    write(root, "src/app.py", "def main():\n    return 1\n")
    write(root, "src/__init__.py", "")
    write(root, "src/blank.py", "\n\n  \n")
    write(root, "src/__pycache__/app.cpython-311.pyc", b"\x00\x01compiled")
    write(root, "pkg.egg-info/PKG-INFO", "Name: pkg\n")
    write(root, "node_modules/lib/index.js", "module.exports = 1;\n")
    write(root, "build/out.txt", "built\n")
    write(root, "logs/today.log", "ignored by .gitignore\n")
    write(root, "docs/keep.log", "kept by a negation\n")
    write(root, ".gitignore", "*.log\n!docs/keep.log\n")
    write(root, "web/.ragmeshignore", "generated/\n")
    write(root, "web/generated/bundle.js", "var x;\n")
    write(root, "web/page.ts", "export const x = 1;\n")
    write(root, "data/blob.dat", b"abc\x00def")
    write(root, "report.pdf", b"%PDF-1.4 binary document \x00")
    write(root, "big.txt", "x" * 2000)
    write(root, "config/.env.example", "KEY=\n")
    (root / ".git").mkdir()
    os.mkfifo(root / ".git" / "HEAD")
    os.mkfifo(root / ".env")
    os.mkfifo(root / "config" / "id_rsa")
    write(root, "config/service-account-prod.json", "{}")
    (root / "outside.txt").symlink_to(tmp_path / "secret-elsewhere.txt")
    write(tmp_path, "secret-elsewhere.txt", "outside the folder\n")
    (root / "alias.py").symlink_to(root / "src" / "app.py")
    return root


def test_walk_applies_the_skip_rules(tree: Path) -> None:
    result = walk(tree, max_bytes=1000)
    assert [f.rel for f in result.files] == [
        "README.md",
        "alias.py",
        "config/.env.example",
        "docs/keep.log",
        "report.pdf",
        "src/app.py",
        "web/page.ts",
    ]
    assert {s.rel: s.reason for s in result.skipped} == {
        ".env": "SECRET",
        "config/id_rsa": "SECRET",
        "config/service-account-prod.json": "SECRET",
        "data/blob.dat": "BINARY",
        "big.txt": "TOO_LARGE",
        "outside.txt": "SYMLINK_OUTSIDE",
        "src/__init__.py": "EMPTY",
        "src/blank.py": "EMPTY",
    }
    assert [s.rel for s in result.skipped if s.quiet] == ["src/__init__.py", "src/blank.py"]
    sizes = {f.rel: f.size for f in result.files}
    assert sizes["src/app.py"] == len("def main():\n    return 1\n")


def test_a_single_file_is_walked_alone(tree: Path) -> None:
    assert [f.rel for f in walk(tree / "src" / "app.py", max_bytes=1000).files] == ["app.py"]


def test_classify_bytes_for_archive_members() -> None:
    assert classify_bytes("a/.env", b"K=V", 100) == "SECRET"
    assert classify_bytes("a/x.pyc", b"\x00", 100) == "BINARY"
    assert classify_bytes("a/x.txt", b"x" * 101, 100) == "TOO_LARGE"
    assert classify_bytes("a/x.txt", b" \n", 100) == "EMPTY"
    assert classify_bytes("a/x.bin2", b"a\x00b", 100) == "BINARY"
    assert classify_bytes("a/x.pdf", b"%PDF\x00", 100) is None
    assert classify_bytes("a/x.py", b"print(1)\n", 100) is None


def test_paths_stay_under_their_roots(tree: Path, tmp_path: Path) -> None:
    roots = (tree.resolve(),)
    assert folder_under_roots("src", roots, domain="d", setting="S") == tree.resolve() / "src"
    assert file_under_roots(str(tree / "src" / "app.py"), roots, domain="d", setting="S").name == "app.py"
    for bad, reason in (
        ("../secret-elsewhere.txt", "PATH_OUTSIDE_ROOTS"),
        ("outside.txt", "PATH_OUTSIDE_ROOTS"),
        ("nope", "FOLDER_NOT_FOUND"),
    ):
        with pytest.raises(RagmeshError) as caught:
            folder_under_roots(bad, roots, domain="d", setting="S")
        assert caught.value.reason == reason
    with pytest.raises(RagmeshError) as caught:
        folder_under_roots("src", (), domain="d", setting="RAGMESH_X")
    assert caught.value.reason == "LOCAL_PATHS_DISABLED" and "RAGMESH_X" in caught.value.message
