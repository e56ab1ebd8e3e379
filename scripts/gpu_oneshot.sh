#!/usr/bin/env bash
# The first command on a lent GPU machine (docs/guides/scale.md): in <= 9 minutes on one GPU, without network and
# without ../shared, each step under its own `timeout`, the clock checked before each step after the required ones,
# and at most 7 small files written to $OUT:
#
#   env.txt          1. `pip install --no-deps -e .` on the machine's own torch; versions of python, torch, CUDA,
#                       Triton, transformers, tokenizers; the GPU
#   canary.json      2. compiled fp32 bmm + log_softmax + backward under the relations' TF32 context
#   pytest-gpu.json  3. `pytest -m gpu` on the files that hold GPU tests (a skip fails it)
#   gpu-check.json   4. the CLI at real shape and the default batch: tokens/s, MFU (datasheet and measured GEMM),
#   gpu-check.md        peak memory, recompiles and why, kill -9 and --resume, the auto batch's pick
#   gpu-long.json    5. if time is left: the same student at 64 x 512 (the relations' share at long sequences)
#   oneshot.log      everything printed, and each step's exit code and seconds
#
# Scratch (teacher, data, runs, logs) stays in /tmp/mlminilm-gpu-check. Without a CUDA device (or without torch) it
# prints one line on stderr and exits 2, before anything is installed or written. Exit 0 when steps 1-4 passed.
set -u -o pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
BUDGET=${ONESHOT_BUDGET_S:-540}  # 9 minutes: the device tool's 10-minute command limit, with room to return

if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' >/dev/null 2>&1; then
    echo "Error: gpu_oneshot.sh needs a CUDA device and $PY with torch: none here, nothing was run" >&2
    exit 2
fi
OUT=${OUT:-/tmp/mlminilm-oneshot}
WORK=/tmp/mlminilm-gpu-check
mkdir -p "$OUT" "$WORK"
exec > >(tee -a "$OUT/oneshot.log") 2>&1
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 MLMINILM_NO_PROGRESS=1
START=$SECONDS
FAILED=""

left() { echo $((BUDGET - (SECONDS - START))); }

# step NAME CAP REQUIRED COMMAND...: run under `timeout` for min(CAP, what is left); an optional step (REQUIRED 0)
# that would get less than CAP / 2 is skipped with a line saying so.
step() {
    local name=$1 cap=$2 required=$3 t0=$SECONDS
    shift 3
    local limit
    limit=$(left)
    if ((limit > cap)); then limit=$cap; fi
    if ((required == 0 && limit < cap / 2)) || ((limit < 10)); then
        echo "oneshot: $name: skipped, $(left) s left of $BUDGET"
        return 0
    fi
    echo "oneshot: $name: started (limit $limit s, $(left) s left)"
    # gpu_check.py stops its own processes within this budget, so that its summaries are written before `timeout`.
    MLMINILM_GPU_CHECK_BUDGET_S=$((limit - 10)) timeout -k 10 "$limit" "$@"
    local rc=$?
    echo "oneshot: $name: exit $rc in $((SECONDS - t0)) s"
    if ((rc != 0)) && ((required == 1)); then FAILED="$FAILED $name"; fi
    return 0
}

versions() {
    "$PY" - <<'EOF'
import platform
from importlib import metadata

import torch

print("python", platform.python_version())
print("torch", torch.__version__, "CUDA", torch.version.cuda)
for name in ("triton", "transformers", "tokenizers", "typer", "rich", "mlminilm"):
    try:
        print(name, metadata.version(name))
    except metadata.PackageNotFoundError:
        print(name, "absent")
if torch.cuda.is_available():
    print("gpu", torch.cuda.get_device_name(), "x", torch.cuda.device_count(), torch.cuda.get_device_capability())
EOF
}

oneshot_install() {
    "$PY" -m pip install -q --no-deps --no-build-isolation --no-index -e . && versions | tee "$OUT/env.txt"
}
# `timeout` runs programs, not this shell's functions: a child bash runs the exported ones.
export -f oneshot_install versions
export PY OUT

step install 120 1 bash -c oneshot_install
step canary 90 1 "$PY" scripts/gpu_canary.py --out "$OUT/canary.json"
step pytest-gpu 180 1 "$PY" scripts/gpu_check.py --stage pytest --out "$OUT" --work "$WORK"
step cli-real-shape 330 1 "$PY" scripts/gpu_check.py --stage cli --out "$OUT" --work "$WORK"
step long-64x512 150 0 "$PY" scripts/gpu_check.py --stage long --out "$OUT" --work "$WORK"
echo "oneshot: done in $((SECONDS - START)) s; failed:${FAILED:- none}"
[ -z "$FAILED" ]
