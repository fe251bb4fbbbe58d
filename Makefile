# `make demo` and `make test` do all set-up on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
INSPECTOR := .ci/node/node_modules/.bin/mcp-inspector

.PHONY: demo test bench install inspector clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, as the CPU wheel: otherwise a dependency pulls a multi-GB CUDA build
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e ".[local,dev]"
	touch $@

install: $(STAMP)

$(INSPECTOR):
	npm install --silent --no-fund --no-audit --prefix .ci/node @modelcontextprotocol/inspector

inspector: $(INSPECTOR)

demo: $(STAMP)
	$(VENV)/bin/rl-mcp demo

test: $(STAMP) $(INSPECTOR)
	$(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	for b in bench/*.py; do $(PY) $$b || exit 1; done

clean:
	rm -rf $(VENV) .ci/node
