"""Incremental sync: the first ingest of a source tree vs a re-sync of the unchanged tree, same run, same mesh.

    .venv/bin/python -m bench.bench_sync [--backend local|hash] [--json PATH]

The tree is this repository's tracked files (`git ls-files`), copied to a temporary folder. `ragmesh up`
runs as a real process; each pass is a folder job (`POST /api/v1/jobs`, prune on) timed from the request to
`done`. A re-sync hashes every file's bytes and skips it without converting, chunking or embedding, so its
rate is what reading and hashing cost; the first ingest is bounded by the embedding model. Then one file is
changed and the tree synced again (one file re-embedded).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from tests.e2e.mesh_process import Mesh, Proc, wait_ready

ROOT = Path(__file__).resolve().parents[1]


def copy_tree(target: Path) -> tuple[int, int]:
    """This repository's tracked files copied under `target`; (files, bytes)."""
    names = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    count = size = 0
    for name in filter(None, names.decode().split("\0")):
        source = ROOT / name
        if not source.is_file() or source.is_symlink():
            continue
        dest = target / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, dest)
        count += 1
        size += source.stat().st_size
    return count, size


def run_job(http: httpx.Client, folder: Path) -> tuple[dict, float]:
    start = time.perf_counter()
    job_id = http.post("/api/v1/jobs", json={"collection": "tree", "folder": str(folder), "prune": True}).json()[
        "job_id"
    ]
    while True:
        job = http.get(f"/api/v1/jobs/{job_id}").json()
        if job["state"] in ("done", "failed", "cancelled"):
            return job, time.perf_counter() - start
        time.sleep(0.05)


def row(name: str, job: dict, seconds: float, tree_bytes: int) -> dict:
    handled = job["indexed"] + job["unchanged"] + job["failed"]
    return {
        "pass": name,
        "seconds": round(seconds, 3),
        "files": handled,
        "indexed": job["indexed"],
        "unchanged": job["unchanged"],
        "failed": job["failed"],
        "skipped": job["skipped"],
        "files_per_second": float(f"{handled / seconds:.3g}"),
        "mb_per_second": float(f"{tree_bytes / seconds / 1e6:.3g}"),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backend", default="local", choices=["local", "hash"], help="the embedder backend")
    parser.add_argument("--json", type=Path, help="write {name, markdown, data} here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tree = Path(tmp) / "tree"
        files, size = copy_tree(tree)
        mesh = Mesh(
            Path(tmp) / "data", extra_env={"RAGMESH_EMBEDDER_BACKEND": args.backend, "RAGMESH_INDEXER_ROOTS": str(tree)}
        )
        proc = Proc(["up"], mesh.env(), Path(tmp) / "up.log").start()
        try:
            wait_ready(mesh.url, [proc])
            with httpx.Client(base_url=mesh.url, timeout=600) as http:
                sent = sum(1 for _ in tree.rglob("*") if _.is_file())
                first, first_s = run_job(http, tree)
                # Bytes actually handed to the indexer (the walk skips what the rules skip).
                ingested_bytes = first["bytes"]
                again, again_s = run_job(http, tree)
                changed = tree / "README.md"
                changed.write_text(changed.read_text() + "\nOne more line.\n")
                one, one_s = run_job(http, tree)
        finally:
            proc.stop()
    rows = [
        row("first ingest", first, first_s, ingested_bytes),
        row("re-sync, unchanged", again, again_s, ingested_bytes),
        row("re-sync, one file changed", one, one_s, ingested_bytes),
    ]
    speedup = round(first_s / again_s, 1)
    lines = [
        f"Source tree: this repository's {files} tracked files ({size / 1e6:.2f} MB; {sent} copied, "
        f"{first['indexed'] + first['failed']} sent to the indexer, {first['skipped']} skipped by the walk), "
        f"embedder `{args.backend}`, `ragmesh up`, one folder job per pass (prune on).",
        "",
        "| pass | seconds | files | indexed | unchanged | failed | files/s | MB/s |",
        "|---|---|---|---|---|---|---|---|",
        *(
            f"| {r['pass']} | {r['seconds']} | {r['files']} | {r['indexed']} | {r['unchanged']} | {r['failed']} | "
            f"{r['files_per_second']} | {r['mb_per_second']} |"
            for r in rows
        ),
        "",
        f"An unchanged re-sync is {speedup}x faster than the first ingest.",
    ]
    markdown = "\n".join(lines)
    print(markdown)
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "name": "bench_sync",
                    "markdown": markdown,
                    "data": {
                        "rows": rows,
                        "speedup": speedup,
                        "backend": args.backend,
                        "tree_files": files,
                        "tree_bytes": size,
                    },
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
