#!/usr/bin/env bash
# Everything that needs a GPU, in one command: run from the
# repository root on a CUDA machine whose Python has torch 2.11+ with CUDA.
#   1. the NCCL numerics (a one-rank NCCL world per GPU: compiled == eager,
#      the collectives in the captured graphs, inductor's CUDA kernels);
#   2. the demo with inductor (one NCCL rank per GPU);
#   3. the step-time benchmark against the hand-written local-tensor version.
# pytest and hypothesis must be importable: on a machine with no index, carry
# their wheels (`pip download pytest hypothesis -d wheels` on a connected
# machine) and `pip install --no-index --find-links wheels pytest hypothesis`.
# Output goes to stdout and, when $OUT is set, to $OUT/gpu_check.log.
set -euo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-/tmp}/gpu_check.log
{
    python -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.get_device_name(0))"
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    python -m pytest -q -p no:cacheprovider -rs tests/spawned/test_dtensor_numerics_nccl.py
    python -m dynamo_dist demo --backend inductor --device cuda
    python -m devtools bench --only step_time
} 2>&1 | tee "$LOG"
