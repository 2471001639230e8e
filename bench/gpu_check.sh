#!/usr/bin/env bash
# Every GPU check of this project in one call, for the lent H200 (see the device tool).
#
# The machine has torch and transformers 5.17 but none of Parley's pins and no network:
# `make gpu-wheels` here puts the transformers wheel Parley pins into .whl/ (ignored by
# git), and the call carries it:
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=420)
# It checks that the row decoder's CUDA graphs capture and replay, then times every
# draft variant at 1, 4 and 16 rows on large-v3-shaped models (bench/asr_gpu.py).
# The JSON comes back under $OUT.
set -euo pipefail
export PYTHONUNBUFFERED=1 PYANNOTE_METRICS_ENABLED=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site:$PWD/server
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
out=${OUT:-bench/results}
python3 bench/asr_gpu.py --device cuda --shapes large-v3 turbo --tokens 120 --repeats 2 \
  --json "$out/asr-gpu.json" 2>&1 | tee "$out/asr-gpu.log"
