# Two commands on a fresh machine:  `make run` (set up, run the main job)  ·  `make test` (set up, pass the tests)
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
export HF_HUB_OFFLINE := 1           # models load from local files only (no hub downloads here)
export TOKENIZERS_PARALLELISM := false

.PHONY: setup llm-server run test test-fast lint clean-venv reranker fusion lock upgrade-check mlflow-shots slurm-up slurm-down

# Bytecode: where Python may write it (PYTHONDONTWRITEBYTECODE unset), each module is compiled once, when it
# is first imported, so only what memeval uses is ever compiled. Where it may not (this workplace's machines
# set PYTHONDONTWRITEBYTECODE=1), a module without its .pyc is compiled again in every process that imports
# it (~25 s of CPU for torch, mlflow and sentence-transformers; the last CI with neither: 3,568 s against
# 2,437 s), so the venv is compiled ahead, on every core: 85 s, where pip's own one-file-at-a-time compile
# took 121 s of a 240 s install. -x: a torch test helper in Python 3.12 syntax, which pip skips too.
COMPILE_VENV = $(if $(PYTHONDONTWRITEBYTECODE),$(PY) -m compileall -q -j 0 -x 'torch/testing/_internal/py312_intrinsics' \
	"$$($(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')",@:)

# The venv installs the committed lock (the exact versions CI was green with), then memeval itself.
$(VENV)/.installed: pyproject.toml requirements.lock
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# CPU torch first, pinned: an unpinned torch pulls a multi-gigabyte CUDA build. --no-compile: COMPILE_VENV.
	$(PY) -m pip install --quiet --no-compile torch==2.13.0
	$(PY) -m pip install --quiet --no-compile -r requirements.lock
	$(PY) -m pip install --quiet --no-compile --no-deps -e ".[dev]"
	$(COMPILE_VENV)
	touch $@

setup: $(VENV)/.installed

# The offline answer endpoint of the answer stage's tests (memeval[llm-server], requirements-llm-server.lock):
# llama-cpp-python compiles (no wheel for this platform: 27 min at load 10-15 on 2 cores, minutes idle).
# GGML_NATIVE=OFF with AVX2 only: the native build has segfaulted on these machines; no LLaVA library.
# The wheel is built once per machine into LLM_WHEELS, a folder named by the build flags' hash (pip's own
# wheel cache does not key on CMAKE_ARGS), and every venv installs it from there.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DGGML_AVX2=ON -DGGML_AVX512=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_TILE=OFF -DLLAVA_BUILD=OFF
LLM_WHEELS ?= $(HOME)/.cache/memeval/llama-wheels/$(shell printf '%s' '$(LLAMA_CMAKE_ARGS)' | sha256sum | cut -c1-16)
$(VENV)/.llm-server: $(VENV)/.installed requirements-llm-server.lock
	@mkdir -p "$(LLM_WHEELS)"; v=$$(sed -n 's/^llama-cpp-python==//p' requirements-llm-server.lock); \
	if ! ls "$(LLM_WHEELS)"/llama_cpp_python-$$v-*.whl >/dev/null 2>&1; then \
	  echo "building llama-cpp-python $$v into $(LLM_WHEELS) (once per machine: minutes)"; \
	  CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PY) -m pip wheel --quiet --no-deps -w "$(LLM_WHEELS)" llama-cpp-python==$$v; fi
	$(PY) -m pip install --quiet --no-compile --no-deps --find-links "$(LLM_WHEELS)" -r requirements-llm-server.lock
	$(COMPILE_VENV)
	touch $@

llm-server: $(VENV)/.llm-server

# The main job: every spark25 phase is one run; this runs the default suite and variant.
run: setup
	$(PY) -m experiments.run $(ARGS)

# The tests in one pytest session on WORKERS pytest-xdist processes (2 = this project's 2-core machines;
# WORKERS=0 runs in one process), its wall time printed: the slow and integration tests first (real BEAM
# runs, subprocess sweeps; a real mlflow server, launchers, SLURM), then the fast ones (tests/conftest.py
# orders them), which fill the integration tests' waits and the workers' last minutes: worksteal hands a
# worker that runs dry the other's queued tests. Two tiers one after another each paid pytest's collection
# (~27 s of CPU a worker) and ended on its longest test with one worker idle.
# `make test-fast` is the quick loop while editing. ARGS go to pytest (e.g. ARGS="-x").
# Tests share only the atomic, checksummed caches and each has its own tmp folder and stores.
WORKERS ?= 2
XDIST := -n $(WORKERS) --dist worksteal

# The cross-encoder the `cross_encoder` and `spark_phase2/3` variants need (none ships): a compact 2-layer
# reranker at 64 tokens trained from the bundled MiniLM on BEAM 500K, exported for OpenVINO (docs/reranker.md).
# It stops on steps and patience (2 epochs, 3 validations every 25 steps without gain), so an idle and a
# loaded machine build the same model; the 60-minute wall-clock cap is only a safety net and warns if it cuts.
# ARGS adds Hydra overrides, e.g. ARGS="train_suite.path=/data/beam/500K".
reranker: setup
	$(PY) -m experiments.training.reranker num_layers=2 epochs=2 patience=3 eval_every=25 val_max_queries=16 \
		max_train_minutes=60 export_backend=openvino $(ARGS)

# The learned-fusion models the `learned_fusion` (fit on BEAM 500K) and `beam_best` (fit on BEAM 100K, so
# BEAM 500K stays held out) variants read, and the one study learned_fusion_synth fits on graph_synth_long
# seed 1 (evaluated on seed 0); seconds of CPU once the suites' embeddings are cached.
fusion: setup
	$(PY) -m experiments.training.fusion $(ARGS)
	$(PY) -m experiments.training.fusion train_suite.path=../shared/beam/100K train_suite.name=beam100k \
		output=models/learned-fusion-beam100k.json $(ARGS)
	$(PY) -m experiments.training.fusion train_suite._target_=experiments.suites.generators.graph_synth.graph_synth \
		'~train_suite.path' train_suite.name=graph_synth_long_seed1 +train_suite.review_sentences=24 \
		+train_suite.seed=1 output=models/learned-fusion-graph-synth.json $(ARGS)

# The log ends with the failed and erroring tests by name (-rfE): what to look at, not only make's "Error 1".
test: setup llm-server
	@start=$$(date +%s); code=0; $(PY) -m pytest -q -rfE $(XDIST) --durations=8 $(ARGS) || code=$$?; \
	echo "== tests: $$(( $$(date +%s) - start )) s, exit $$code"; exit $$code

test-fast: setup
	$(PY) -m pytest -q $(XDIST) -m "not slow and not integration" $(ARGS)

lint: setup
	$(VENV)/bin/ruff check retrieval experiments hydra_plugins tests

# The README's MLflow screenshots (docs/img/mlflow-*.png): a 3-point spark25 sweep and a study into a fresh
# store, `mlflow ui` on 127.0.0.1, headless Chromium (Debian: apt-get install chromium). ARGS: --keep DIR...
mlflow-shots: setup
	$(PY) -m experiments.tools.mlflow_shots $(ARGS)

# A real single-node SLURM on 127.0.0.1 (Debian's slurm-wlm + munge, as root; installed if missing), for
# `hydra/launcher=slurm` sweeps and the integration tests' SLURM test; `slurm-down` stops its daemons.
# docs/slurm.md (running at scale).
# As root (a container, CI) directly; as a user through sudo (there may be no sudo where one is root).
AS_ROOT := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
slurm-up:
	$(AS_ROOT) .ci/slurm-up

slurm-down:
	$(AS_ROOT) .ci/slurm-down

clean-venv:
	rm -rf $(VENV)

# A new lock from pyproject.toml's ranges (newest versions that resolve), in a scratch venv: review the diff.
lock:
	rm -rf .venv-lock && $(PYTHON) -m venv .venv-lock
	.venv-lock/bin/python -m pip install --quiet --upgrade pip
	.venv-lock/bin/python -m pip install --quiet torch==2.13.0
	.venv-lock/bin/python -m pip install --quiet -e ".[dev]"
	{ sed -n '1,/^# tests\/project\/test_lock.py/p' requirements.lock; \
	  .venv-lock/bin/python -m pip freeze --exclude-editable | grep -v '^-e'; } > requirements.lock.new
	mv requirements.lock.new requirements.lock && rm -rf .venv-lock
	git diff --stat requirements.lock

# Do the newest versions still pass? A scratch venv from the ranges, the fast tests, the differences
# from the lock; nothing is changed (upgrades are deliberate: `make lock`, then commit).
upgrade-check:
	rm -rf .venv-latest && $(PYTHON) -m venv .venv-latest
	.venv-latest/bin/python -m pip install --quiet --upgrade pip
	.venv-latest/bin/python -m pip install --quiet torch==2.13.0
	.venv-latest/bin/python -m pip install --quiet --upgrade -e ".[dev]"
	.venv-latest/bin/python -m pip freeze --exclude-editable | grep -v '^-e' | sort > .venv-latest/freeze.txt
	grep -v '^#' requirements.lock | sort | diff - .venv-latest/freeze.txt || true
	.venv-latest/bin/python -m pytest -q $(XDIST) -m "not slow and not integration"
