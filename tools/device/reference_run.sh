#!/usr/bin/env bash
# The one script the device (GPU) run executes. Builds nothing.
#   A) tools/reference/make_tiny_fixtures.py   -> tests/fixtures/*  (CPU, seconds)
#   B) tools/train_default_model/train.py      -> models/default/*  (H200, a few minutes)
# Results land in $OUT (what the device tool brings back):
#   env.log fixtures.log train.log fixtures.tar.gz default_model.tar.gz default_model.safetensors
# Run it through the device tool with: command "bash tools/device/reference_run.sh", carry [".data"],
# timeout_s 600. .data/kjv-verses.txt comes from tools/train_default_model/prepare_data.sh.
# Each stage has its own timeout and its outputs are packed right after it, so one failing stage
# does not lose the other's results.
set -x
set -o pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT=${OUT:-/tmp/reference_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
TRAIN_BUDGET=${TRAIN_BUDGET:-300}

{
    date -u
    nvidia-smi
    python3 -c 'import torch, transformers, tokenizers, safetensors, matplotlib; print("torch", torch.__version__, "transformers", transformers.__version__, "tokenizers", tokenizers.__version__, "safetensors", safetensors.__version__, "matplotlib", matplotlib.__version__, "cuda", torch.cuda.is_available())'
    nproc
    ls -la .data
    sha256sum .data/kjv-verses.txt
} > "$OUT/env.log" 2>&1

# ---- A: tiny reference fixtures
t0=$(date +%s)
timeout 120 python3 tools/reference/make_tiny_fixtures.py --out tests/fixtures > "$OUT/fixtures.log" 2>&1
echo "fixtures rc=$? seconds=$(( $(date +%s) - t0 ))" >> "$OUT/fixtures.log"
tar czf "$OUT/fixtures.tar.gz" tests/fixtures

# ---- B: default model
t0=$(date +%s)
timeout 450 python3 tools/train_default_model/train.py --data .data/kjv-verses.txt --out models/default \
    --seed 1234 --time-budget "$TRAIN_BUDGET" > "$OUT/train.log" 2>&1
echo "train rc=$? seconds=$(( $(date +%s) - t0 ))" >> "$OUT/train.log"
[ -f models/default/model.safetensors ] && cp models/default/model.safetensors "$OUT/default_model.safetensors"
tar czf "$OUT/default_model.tar.gz" --exclude=model.safetensors models/default

ls -la "$OUT"
tail -n 25 "$OUT/fixtures.log"
tail -n 30 "$OUT/train.log"
