# Parley: `make run` sets everything up and serves; `make test` runs the whole suite.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check
HOST ?= 127.0.0.1
PORT ?= 8765
MODELS_DIR ?= $(HOME)/.cache/parley/models
APT_PACKAGES := ffmpeg espeak-ng sox chromium portaudio19-dev
export PYANNOTE_METRICS_ENABLED := false
export HF_HUB_DISABLE_TELEMETRY := 1

.PHONY: install system-packages venv models run cluster lint test test-fast bench gpu-wheels clean

install: system-packages $(VENV)/.installed models

# Debian packages: ffmpeg decodes audio files; espeak-ng and sox make test speech;
# chromium runs the browser client test (Playwright drives it, never downloads one);
# PyAudio, which WhisperLive's client imports, builds against portaudio19-dev.
system-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  $(if $(filter 0,$(shell id -u)),,sudo) apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive $(if $(filter 0,$(shell id -u)),,sudo) apt-get install -y -qq --no-install-recommends $$missing; \
	fi

$(VENV)/.installed: pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --quiet -e '.[dev,diarization,cluster]'
	# WhisperLive's client, for its wire's tests: the package requires its whole server
	# (torch, pinned faster-whisper and tokenizers, OpenVINO); its client needs only what
	# dev brings (PyAudio, websocket-client, av, numpy)
	$(PIP) install --quiet --no-deps whisper-live==0.10.0
	touch $@

venv: $(VENV)/.installed

models: $(VENV)/.installed
	$(VENV)/bin/parley models install --models-dir "$(MODELS_DIR)"

run: install
	$(VENV)/bin/parley serve --host $(HOST) --port $(PORT) --models-dir "$(MODELS_DIR)" --diarization bundle

# A local Ray cluster serving 2 replicas behind Ray Serve's proxy, in the foreground
# (Ctrl-C drains and stops it); README "Scaling out" joins other machines to it.
cluster: install
	$(VENV)/bin/parley cluster --host $(HOST) --port 8000 --replicas 2 --models-dir "$(MODELS_DIR)" --diarization bundle

# Three workers on two cores: much of the suite waits on real-time streams, sockets and
# subprocesses (the suite used 1.5 cores of 2 with two workers: 6 min 24 s, against
# 5 min 22 s with three, on the same commit); a test file stays on one worker, so its
# servers start once. One OpenMP thread per process: workers each running torch on
# both cores made every model wait on the others' threads (440 s against 322 s).
# Speaker threads at nice 10, not the server's idle: under SCHED_IDLE a test server's
# speaker steps wait for every other worker's models (341 s against 325 s), and a
# recording's, which take the same priority, waited up to 50 s for them.
TEST_WORKERS ?= 3
TEST_ENV = OMP_NUM_THREADS=1 PARLEY_DIARIZATION__NICE=10
test: install lint
	$(TEST_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile

# The inner loop: the gates and every test that needs no model weights (about 1.5 min).
test-fast: system-packages $(VENV)/.installed lint
	$(TEST_ENV) $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m "not weights"

# The gates (rules and reasons in pyproject.toml): formatting, lint, types.
lint: $(VENV)/.installed
	$(VENV)/bin/ruff format --check server tests bench
	$(VENV)/bin/ruff check server tests bench
	$(VENV)/bin/mypy

bench: install
	$(PY) bench/asr.py
	$(PY) bench/diarization.py
	$(PY) bench/stream.py
	$(PY) bench/load.py
	$(PY) bench/compat.py
	$(PY) bench/telephony.py
	$(PY) bench/cluster.py

# What bench/gpu_check.sh needs on the lent GPU machine, which has torch but not these
# pins: the wheels, and the recordings of bench/files_gpu.py and bench/diarization_gpu.py
# prepared here on real weights. The speaker models' part imports pyannote.audio, whose
# pure-Python wheels (and the few of theirs the machine lacks) go in .whl/diarization-wheels.
GPU_WHEELS = transformers rapidfuzz soxr
DIARIZATION_GPU_WHEELS = pyannote.audio pyannote.core pyannote.database pyannote.metrics \
  pyannote.pipeline asteroid-filterbanks torch-audiomentations julius torch-pitch-shift \
  primePy optuna colorlog protobuf googleapis-common-protos opentelemetry-api \
  opentelemetry-sdk opentelemetry-proto opentelemetry-semantic-conventions \
  opentelemetry-exporter-otlp-proto-http opentelemetry-exporter-otlp-proto-common \
  opentelemetry-exporter-http-transport opentelemetry-exporter-otlp-common
PINNED = $(PY) -c 'import importlib.metadata as m, sys; print(*(f"{n}=={m.version(n)}" for n in sys.argv[1:]))'
WHEEL_DOWNLOAD = $(PIP) download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
  --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
gpu-wheels: $(VENV)/.installed models
	mkdir -p .whl/diarization-wheels
	$(WHEEL_DOWNLOAD) -d .whl $$($(PINNED) $(GPU_WHEELS))
	$(WHEEL_DOWNLOAD) -d .whl/diarization-wheels $$($(PINNED) $(DIARIZATION_GPU_WHEELS))
	cd bench && PYANNOTE_METRICS_ENABLED=false ../$(PY) files_gpu.py --prepare ../.whl/files-gpu-cases
	cd bench && PYANNOTE_METRICS_ENABLED=false ../$(PY) diarization_gpu.py --prepare ../.whl/diarization-gpu-cases

clean:
	rm -rf $(VENV) .pytest_cache bench/results/*.json
