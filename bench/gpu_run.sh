#!/usr/bin/env bash
# The embedder's GPU checks on a lent GPU machine, in one call of the device tool (from the repository root, with
# `.gpu/` from `python -m bench.gpu_carry` carried):  bash bench/gpu_run.sh
# Each step has its own time limit so that the whole fits ~10 minutes of a 15-minute budget (~7 expected on an
# H200); what each writes comes back under $OUT (8 files, the most a device call returns). QUICK=1: tiny sizes, for
# a dry run of this script on a CPU.
set -uo pipefail
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
OUT=${OUT:-/tmp/gpu-out}
mkdir -p "$OUT"
PYTHON=${PYTHON:-python3}
SITE=${SITE:-/tmp/site}

"$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" .gpu/wheels/*.whl \
  || exit 1
export PYTHONPATH="$SITE:libs/api:libs/common:libs/store:services/embedder:."

# The model's architecture with random weights (seed 0): what is timed does not depend on the weights.
MODEL=/tmp/gpu-model
rm -rf "$MODEL" && cp -r .gpu/model "$MODEL" || exit 1
"$PYTHON" -c "
import sys, torch
from transformers import BertConfig, BertModel
torch.manual_seed(0)
BertModel(BertConfig.from_pretrained(sys.argv[1])).save_pretrained(sys.argv[1])" "$MODEL" || exit 1
export RAGMESH_EMBEDDER_MODEL_PATH="$MODEL"
[ -f ../shared/datasets/msmarco-5k/corpus.jsonl ] || { mkdir -p ../shared/datasets && cp -r .gpu/msmarco-5k ../shared/datasets/; }

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1
  "$PYTHON" -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(),
'transformers', transformers.__version__)"; } | tee "$OUT/machine.txt"

if [ "${QUICK:-0}" = 1 ]; then  # micro-batches of at most 4 keep the shapes' passes short on a CPU
  SHAPES="--batches 2 --passages 40 --seconds 0.3 --forward-passages 32 --clients 2 --request-size 8 --warm"
  EMBEDDER="--passages 256 --rounds 1 --skip-st --clients 2 --request-size 32"
  BUDGETS="--passages 48 --rounds 1 --skip-st --forward-seconds 0.3"
  export RAGMESH_EMBEDDER_BATCH_SIZE=4
else
  SHAPES="--warm"
  EMBEDDER="--rounds 2 --skip-st"
  BUDGETS="--passages 256 --rounds 1 --skip-st --forward-seconds 6"
fi
timeout 150 "$PYTHON" -m pytest -q -p no:cacheprovider --noconftest -o addopts="" \
  services/embedder/tests/test_embedder_cuda.py 2>&1 | tee -a "$OUT/machine.txt"
# The service's micro-batches are what is queued when the model thread is free (~400 msmarco passages on the H200),
# padded to the longest of them (~146 % at CUDA's default budget of 131,072 padded tokens), where the forward rate's
# are length-sorted over every passage (~10 %; CUDA's default micro-batches in every run). Fitted to the 2026-11-27
# H200's runs, a micro-batch costs ~2.7 ms of launches plus ~117 ns a padded token (bench.gpu_cost): smaller budgets
# pad less but launch more, and should pay only with CUDA graphs, which launch a whole forward pass at once
# (docs/decisions/gpu-micro-batches.md). First the unpadded model (no padding at all, one call a window; its row "against the padded forward
# pass" is the GPU target's ratio): eager on one model thread and on two (while one waits for the GPU, the other
# launches its micro-batch's kernels), and as CUDA graphs (one per token bucket: 69 at the default budget). Then the
# padded model as CUDA graphs (320 shapes at the default budget) at two budgets. Compare each run's service rates
# with its own forward rate.
for runners in 1 2; do
  # shellcheck disable=SC2086 # word splitting of the size flags is meant
  RAGMESH_EMBEDDER_UNPADDED=true RAGMESH_EMBEDDER_RUNNERS=$runners timeout 90 "$PYTHON" -m bench.bench_embedder \
    --runtimes torch --forward $BUDGETS --json "$OUT/unpadded-runners$runners.json" 2>&1 \
    | grep -E "^\| torch|^\| runtime|Error"
done
# shellcheck disable=SC2086
RAGMESH_EMBEDDER_UNPADDED=true RAGMESH_EMBEDDER_CUDA_GRAPHS=true timeout 120 "$PYTHON" -m bench.bench_embedder \
  --runtimes torch --forward $BUDGETS --json "$OUT/unpadded-graphs.json" 2>&1 | grep -E "^\| torch|^\| runtime|Error"
for tokens in 131072 16384; do
  # shellcheck disable=SC2086
  RAGMESH_EMBEDDER_CUDA_GRAPHS=true RAGMESH_EMBEDDER_MAX_BATCH_TOKENS=$tokens timeout 120 "$PYTHON" -m bench.bench_embedder \
    --runtimes torch --forward $BUDGETS --json "$OUT/graphs$tokens.json" 2>&1 | grep -E "^\| torch|^\| runtime|Error"
done
# Then what earlier runs measured already (CUDA's default configuration; then micro-batch shapes, whose question,
# cuDNN's attention, is settled), last, so that a call cut short at the device's limit still brings the runs above back.
# shellcheck disable=SC2086
timeout 180 "$PYTHON" -m bench.bench_embedder --runtimes torch $EMBEDDER --json "$OUT/embedder.json" 2>&1 | tail -30
# shellcheck disable=SC2086
timeout 240 "$PYTHON" -m bench.bench_gpu_shapes $SHAPES --json "$OUT/shapes.json" 2>&1 | tail -40
ls -la "$OUT"
