#!/usr/bin/env bash
# Every GPU check of this project in one call, for the lent H200 (see the device tool).
#
# The machine has torch and transformers 5.17 but none of Parley's pins and no network:
# `make gpu-wheels` here puts the wheels Parley pins into .whl/ (ignored by git), with
# bench/files_gpu.py's recordings prepared on the bundled weights, and the call carries it:
#   run(command="bash bench/gpu_check.sh", carry=[".whl"], timeout_s=480)
# 1. bench/files_gpu.py: the reference handler's two recordings (8 s and 60 s) on
#    large-v3 shapes, its batched and assisted ways against Parley plain and Parley's
#    own choice, through WhisperEngine's CUDA graphs and the step scheduler.
# 2. bench/asr_gpu.py: every draft variant at 1, 4 and 16 rows on large-v3 and turbo
#    shapes, eager and as CUDA graphs.
# Each part has its own time limit, so one that fails leaves the other's figures. The
# JSON and logs come back under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYANNOTE_METRICS_ENABLED=false
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD/server
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
out=$(realpath -m "${OUT:-bench/results}")
status=0
(cd bench && timeout "${FILES_GPU_S:-210}" python3 files_gpu.py --cases ../.whl/files-gpu-cases \
  --device cuda --shape large-v3 --repeats 2 --json "$out/files-gpu.json") 2>&1 \
  | tee "$out/files-gpu.log" || status=1
timeout "${ASR_GPU_S:-210}" python3 bench/asr_gpu.py --device cuda --shapes large-v3 turbo \
  --tokens 120 --repeats 1 --json "$out/asr-gpu.json" 2>&1 | tee "$out/asr-gpu.log" || status=1
exit $status
