#!/usr/bin/env bash
# Every GPU check of this project, for the lent H200 (see the device tool).
#
# The machine has torch and transformers 5.17 but none of Parley's pins and no network:
# `make gpu-wheels` here puts the wheels Parley pins into .whl/ (ignored by git), with
# each part's recordings prepared on the bundled weights, and the calls carry them.
# 1. bench/files_gpu.py: the reference handler's two recordings (8 s and 60 s) on
#    large-v3 shapes, its batched and assisted ways against Parley plain and Parley's
#    own choice, through WhisperEngine's CUDA graphs and the step scheduler.
# 2. bench/asr_gpu.py: every draft variant at 1, 4 and 16 rows on large-v3 and turbo
#    shapes, eager and as CUDA graphs.
# 3. bench/diarization_gpu.py: diarized streams per GPU, the bundled speaker models in
#    the server's diarization worker (`make gpu-wheels` keeps them, with pyannote.audio's
#    pure-Python wheels, in .whl/diarization-*).
# The three do not fit one call's 64 MiB together, so PARTS picks (all by default):
#   run(command="PARTS='files asr' bash bench/gpu_check.sh", timeout_s=480,
#       carry=[<.whl's own wheels>, ".whl/files-gpu-cases"])
#   run(command="PARTS=diarization bash bench/gpu_check.sh", timeout_s=300,
#       carry=[".whl/diarization-wheels", ".whl/diarization-gpu-cases", <rapidfuzz's>])
# Each part has its own time limit, so one that fails leaves the others' figures. The
# JSON and logs come back under $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 PYANNOTE_METRICS_ENABLED=false
PARTS=${PARTS:-files asr diarization}
wheels=$(ls .whl/*.whl .whl/diarization-wheels/*.whl 2>/dev/null)
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site $wheels || exit 1
export PYTHONPATH=/tmp/site:$PWD/server
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
out=$(realpath -m "${OUT:-bench/results}")
status=0
part() { [[ " $PARTS " == *" $1 "* ]]; }
part files && { (cd bench && timeout "${FILES_GPU_S:-210}" python3 files_gpu.py \
  --cases ../.whl/files-gpu-cases --device cuda --shape large-v3 --repeats 2 \
  --json "$out/files-gpu.json") 2>&1 | tee "$out/files-gpu.log" || status=1; }
part asr && { timeout "${ASR_GPU_S:-210}" python3 bench/asr_gpu.py --device cuda \
  --shapes large-v3 turbo --tokens 120 --repeats 1 --json "$out/asr-gpu.json" 2>&1 \
  | tee "$out/asr-gpu.log" || status=1; }
part diarization && { (cd bench && timeout "${DIARIZATION_GPU_S:-200}" python3 \
  diarization_gpu.py --cases ../.whl/diarization-gpu-cases --device cuda \
  --json "$out/diarization-gpu.json" ${DIARIZATION_GPU_ARGS:-}) 2>&1 | tee "$out/diarization-gpu.log" || status=1; }
exit $status
