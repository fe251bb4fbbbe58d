"""Roman numerals: write a number as Roman numerals (a classic SingleTurnEnv whose answers come from `roman`)."""

import roman
import verifiers as vf
from datasets import Dataset

from .numbers import NUMBERS


def numeral(completion, answer, **kwargs) -> float:
    """1 when the reply starts with the numeral."""
    text = str(completion[-1]["content"] if completion else "")
    return float(text.strip().split()[:1] == [answer])


def load_environment(num_examples: int = 8) -> vf.Environment:
    """Write a number in Roman numerals, scored by exact match.

    Args:
        num_examples: How many numbers.
    """
    numbers = [NUMBERS[i % len(NUMBERS)] for i in range(num_examples)]
    rows = [{"question": f"Write {n} in Roman numerals.", "answer": roman.toRoman(n)} for n in numbers]
    return vf.SingleTurnEnv(dataset=Dataset.from_list(rows), rubric=vf.Rubric(funcs=[numeral]))
