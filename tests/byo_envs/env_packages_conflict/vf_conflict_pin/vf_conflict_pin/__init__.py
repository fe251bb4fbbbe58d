"""Conflict: a classic environment that pins idna==3.6 (verifiers' venv has another): never installed."""

import verifiers as vf
from datasets import Dataset


def load_environment(num_examples: int = 2) -> vf.Environment:
    """Never runs: its pin is refused before anything is installed."""
    rows = [{"question": "Say yes.", "answer": "yes"}] * num_examples
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[]))
