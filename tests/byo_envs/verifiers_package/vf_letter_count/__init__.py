"""Letter count: how many times a letter appears in a word (a classic SingleTurnEnv, installed as a package)."""

import verifiers as vf
from datasets import Dataset

from .words import WORDS


def counted(completion, answer, **kwargs) -> float:
    """1 when the reply starts with the count."""
    text = str(completion[-1]["content"] if completion else "")
    return float(text.strip().split()[:1] == [answer])


def load_environment(letter: str = "e", num_examples: int = 8) -> vf.Environment:
    """Count one letter in each word, scored by exact match.

    Args:
        letter: The letter to count.
        num_examples: How many words.
    """
    words = [WORDS[i % len(WORDS)] for i in range(num_examples)]
    rows = [
        {"question": f"How many times does '{letter}' appear in '{w}'?", "answer": str(w.count(letter))} for w in words
    ]
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[counted]))
