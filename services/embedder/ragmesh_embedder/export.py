"""The local model as ONNX: exported once from the packaged weights, cached, never downloaded.

    python -m ragmesh_embedder.export [--cache-dir DIR] [--precision fp32 --precision int8 ...]

`ensure_export` is what the embedder calls at start-up; the command does the same ahead of time (at image build,
for pods with a read-only root filesystem). The cache is a folder per (model id, opset, recipe version, hash of the
weights and configs) holding `model.onnx` (fp32), `model.int8.onnx` and `model.fp16.onnx`, each written under a
temporary name, renamed into place and checked against a manifest (`<file>.json`: size, SHA-256), so a broken
cache is made again. The graph is the transformer plus mean pooling (`sentence_embedding`, not normalised); the fp32
export needs torch and runs in a subprocess, so the serving process never loads torch for it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

OPSET = 17
# Bump when the exported graph changes (inputs, outputs, pooling): old cache folders are then ignored.
RECIPE = 1
FILES = {"fp32": "model.onnx", "int8": "model.int8.onnx", "fp16": "model.fp16.onnx"}
INPUTS = ("input_ids", "attention_mask", "token_type_ids")
OUTPUT = "sentence_embedding"
# What the hash covers: the weights and every config that changes the graph or the pooling.
_HASHED = (
    "model.safetensors",
    "pytorch_model.bin",
    "config.json",
    "modules.json",
    "sentence_bert_config.json",
    "1_Pooling/config.json",
)


class ExportError(RuntimeError):
    """The model could not be exported or quantized (the message says why and what to do)."""


def model_hash(model_path: Path) -> str:
    digest = hashlib.sha256()
    for name in _HASHED:
        path = model_path / name
        if path.is_file():
            digest.update(name.encode() + b"\0")
            with path.open("rb") as data:
                while chunk := data.read(1 << 20):
                    digest.update(chunk)
    return digest.hexdigest()[:16]


def export_dir(cache_dir: Path, model_id: str, model_path: Path) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "-", model_id).strip("-") or "model"
    return cache_dir / f"{slug}-opset{OPSET}-v{RECIPE}-{model_hash(model_path)}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        while chunk := data.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _manifest(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def is_valid(path: Path) -> bool:
    """True when the file exists and matches the manifest written after it."""
    try:
        manifest = json.loads(_manifest(path).read_text())
        return path.stat().st_size == manifest["bytes"] and _sha256(path) == manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _publish(tmp: Path, path: Path, **facts: object) -> None:
    """Rename a finished file into place, then write its manifest (both atomically)."""
    manifest = {"sha256": _sha256(tmp), "bytes": tmp.stat().st_size, "created": time.time(), **facts}
    os.replace(tmp, path)
    _write_atomic(_manifest(path), json.dumps(manifest, indent=2).encode())


def _write_atomic(path: Path, data: bytes) -> None:
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(name, 0o644)  # mkstemp makes it private; the cache may be shared with other users
        os.replace(name, path)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise


def ensure_export(cache_dir: Path, model_id: str, model_path: Path, precision: str) -> Path:
    """The ONNX file for `precision` (fp32, int8 or fp16), made now if the cache lacks a valid one."""
    folder = export_dir(cache_dir, model_id, model_path)
    target = folder / FILES[precision]
    if is_valid(target):
        return target
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-")
        probe.close()
    except OSError as exc:
        raise ExportError(
            f"the ONNX export of {model_id} is not in {folder} and that folder is not writable ({exc}); point "
            "RAGMESH_EMBEDDER_MODEL_CACHE_DIR (or RAGMESH_DATA_DIR) at a writable volume, or export at build "
            "time with `python -m ragmesh_embedder.export --cache-dir DIR`"
        ) from None
    fp32 = folder / FILES["fp32"]
    if not is_valid(fp32):
        _export_in_subprocess(model_path, fp32)
    if precision == "int8" and not is_valid(target):
        _quantize_int8(fp32, target)
    elif precision == "fp16" and not is_valid(target):
        _convert_fp16(fp32, target)
    return target


def _export_in_subprocess(model_path: Path, target: Path) -> None:
    log.info("exporting %s to ONNX (once; cached in %s)", model_path, target.parent)
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "ragmesh_embedder.export",
            "--fp32-only",
            "--model-path",
            str(model_path),
            "--to",
            str(target),
        ],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    if proc.returncode != 0 or not is_valid(target):
        tail = "\n".join(proc.stderr.strip().splitlines()[-15:])
        raise ExportError(f"exporting {model_path} to ONNX failed (exit {proc.returncode}):\n{tail}")
    log.info("exported %s in %.1f s", target, time.perf_counter() - started)


def export_fp32(model_path: Path, target: Path) -> None:
    """torch.onnx.export of the transformer + mean pooling (run in its own process: it loads torch)."""
    import torch
    from sentence_transformers import SentenceTransformer

    _check_supported(model_path)
    model = SentenceTransformer(str(model_path), device="cpu", local_files_only=True)
    # torch types nn.Sequential's items as "Tensor | Module"; a SentenceTransformer's first is its Transformer module.
    transformer = model[0].auto_model.eval()  # type: ignore[union-attr]

    class MeanPooled(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            hidden = self.transformer(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)

    sample = torch.ones((2, 8), dtype=torch.int64)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        with torch.inference_mode():
            torch.onnx.export(
                MeanPooled(),
                (sample, torch.ones_like(sample), torch.zeros_like(sample)),
                str(tmp),
                input_names=list(INPUTS),
                output_names=[OUTPUT],
                opset_version=OPSET,
                dynamo=False,
                dynamic_axes={**{name: {0: "batch", 1: "sequence"} for name in INPUTS}, OUTPUT: {0: "batch"}},
            )
        _publish(tmp, target, opset=OPSET, recipe=RECIPE, torch=torch.__version__, source=str(model_path))
    finally:
        tmp.unlink(missing_ok=True)


def pooling_modes(model_path: Path) -> list[str]:
    """How the sentence-transformers model folder says it pools (["pooling_mode_mean_tokens"]: by mean)."""
    pooling = model_path / "1_Pooling" / "config.json"
    config = json.loads(pooling.read_text()) if pooling.is_file() else {}
    return [key for key, on in config.items() if key.startswith("pooling_mode_") and on]


def _check_supported(model_path: Path) -> None:
    """The ONNX graph pools by mean: refuse models configured otherwise (the torch runtime handles them)."""
    modes = pooling_modes(model_path)
    if modes != ["pooling_mode_mean_tokens"]:
        raise ExportError(
            f"the ONNX runtime supports mean-pooled models only; {model_path} pools by {modes}: "
            "use RAGMESH_EMBEDDER_RUNTIME=torch"
        )


def _quantize_int8(fp32: Path, target: Path) -> None:
    """ONNX Runtime dynamic quantization: int8 weights (one scale per output channel: per-tensor scales cost
    this model ~0.04 cosine to fp32, per-channel ~0.006), activations quantized per batch at run time."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    log.info("quantizing %s to int8", fp32)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True)
        _publish(tmp, target, quantization="dynamic QInt8 per channel (onnxruntime.quantization.quantize_dynamic)")
    finally:
        tmp.unlink(missing_ok=True)


def _convert_fp16(fp32: Path, target: Path) -> None:
    """fp16 weights and activations for CUDA; inputs and the output stay as they are (int64 in, float32 out)."""
    import onnx
    from onnxruntime.transformers.float16 import convert_float_to_float16

    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    try:
        onnx.save(convert_float_to_float16(onnx.load(str(fp32)), keep_io_types=True), str(tmp))
        _publish(tmp, target, conversion="fp16 (onnxruntime.transformers.float16, keep_io_types)")
    finally:
        tmp.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> None:
    from .config import EmbedderSettings

    defaults = EmbedderSettings()
    parser = argparse.ArgumentParser(description="Export the embedder's local model to ONNX into its cache.")
    parser.add_argument("--model-path", type=Path, default=Path(defaults.model_path))
    parser.add_argument("--model-id", default=defaults.model_id)
    parser.add_argument("--cache-dir", type=Path, default=defaults.onnx_cache_dir)
    parser.add_argument(
        "--precision", action="append", choices=sorted(FILES), help="what to make (repeatable); default: fp32 and int8"
    )
    parser.add_argument("--fp32-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--to", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.fp32_only:  # the subprocess ensure_export starts
        export_fp32(args.model_path, args.to)
        return
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for precision in args.precision or ["fp32", "int8"]:
        print(ensure_export(args.cache_dir, args.model_id, args.model_path, precision))


if __name__ == "__main__":
    main()
