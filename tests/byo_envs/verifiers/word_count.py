"""Word count: say how many words a sentence has (a classic verifiers SingleTurnEnv, never imported by the tests)."""

import random

import verifiers as vf
from datasets import Dataset

WORDS = ["apple", "river", "stone", "cloud", "lamp", "green", "quiet", "table", "north", "seven"]
SYSTEM_PROMPT = "Answer with a single number: how many words the sentence has."
LENGTHS = {"easy": (2, 4), "hard": (6, 12)}


def _rows(count: int, difficulty: str, seed: int) -> list[dict[str, str]]:
    rng = random.Random(seed)
    low, high = LENGTHS[difficulty]
    rows = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(low, high))]
        rows.append({"question": " ".join(words), "answer": str(len(words))})
    return rows


def exact_count(completion, answer, **kwargs) -> float:
    text = completion[-1]["content"] if isinstance(completion, list) else str(completion)
    return 1.0 if text.strip().split()[:1] == [answer] else 0.0


def load_environment(
    num_examples: int = 50,
    difficulty: str = "easy",
    system_prompt: str = SYSTEM_PROMPT,
    *,
    shuffle_seed: int | None = None,
    **kwargs,
) -> vf.Environment:
    """A single-turn word-counting task scored by exact match.

    Args:
        num_examples: How many sentences the dataset holds.
        difficulty: `easy` (2-4 words) or `hard` (6-12 words).
        system_prompt: The instruction the model sees first.
        shuffle_seed: Seed of the generated sentences (none: 0).
    """
    dataset = Dataset.from_list(_rows(num_examples, difficulty, shuffle_seed or 0))
    rubric = vf.Rubric(funcs=[exact_count], weights=[1.0])
    return vf.SingleTurnEnv(dataset=dataset, system_prompt=system_prompt, rubric=rubric, **kwargs)
