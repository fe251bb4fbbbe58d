"""Environment folders as packages: a folder with a `pyproject.toml` (verifiers' `environments/<name>/`,
Atropos' packaged environments) installed with its dependencies into a venv of its own, layered on
the venv of its generation, so that no shared venv is ever changed by an environment."""
