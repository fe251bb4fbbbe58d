"""The arithmetic task's data and reward, without torch or atroposlib: the environment
(arithmetic.py) and the TRL baseline of bench/learning.py both use exactly this.

Problems are graded by `level`: 1 = one- and two-digit sums, 2 = adds two-digit differences,
3 = adds products of 2..12 by 2..12. The held-out eval set is drawn first from its own seed and
no training item repeats one of its problems.
"""

from __future__ import annotations

import random
import re

_NUMBER = re.compile(r"-?\d+")
_OPS = {1: "+", 2: "+-", 3: "+-*"}

Problem = tuple[str, int]  # ("37 + 48", 85)


def problem(rng: random.Random, level: int) -> Problem:
    """One problem of the given level."""
    op = rng.choice(_OPS[level])
    if op == "*":
        a, b = rng.randint(2, 12), rng.randint(2, 12)
        return f"{a} * {b}", a * b
    a, b = rng.randint(1, 99), rng.randint(1, 99)
    if op == "-":
        a, b = max(a, b), min(a, b)
        return f"{a} - {b}", a - b
    return f"{a} + {b}", a + b


def split(level: int, eval_size: int, eval_seed: int, num_train: int, seed: int) -> tuple[list[Problem], list[Problem]]:
    """(train, eval): the eval set from `eval_seed` alone (the same in every run), the training
    problems from `seed`, none of them in the eval set."""
    eval_rng, train_rng = random.Random(eval_seed), random.Random(seed)
    evals: dict[str, int] = {}
    while len(evals) < eval_size:
        text, answer = problem(eval_rng, level)
        evals.setdefault(text, answer)
    train: list[Problem] = []
    for _ in range(100 * num_train):  # bounded: a tiny problem space could run out
        if len(train) == num_train:
            break
        text, answer = problem(train_rng, level)
        if text not in evals:
            train.append((text, answer))
    return train, list(evals.items())


def question(text: str) -> str:
    """The user turn that poses a problem."""
    return f"What is {text}? Answer with just the number."


def last_number(reply: str) -> int | None:
    numbers = _NUMBER.findall(reply.replace(",", ""))
    return int(numbers[-1]) if numbers else None


def is_correct(reply: str, answer: int) -> bool:
    """Exact-answer check: the reply's last number is the answer."""
    return last_number(reply) == answer


def arithmetic_reward(reply: str, answer: int) -> float:
    """1.0 for exactly the number; 0.7 for the right last number with extra words; else 0.3 times
    the closeness of the last number; 0 with no number."""
    if reply.strip().rstrip(".") == str(answer):
        return 1.0
    last = last_number(reply)
    if last is None:
        return 0.0
    if last == answer:
        return 0.7
    return round(0.3 * max(0.0, 1.0 - abs(last - answer) / max(abs(answer), 10)), 4)
