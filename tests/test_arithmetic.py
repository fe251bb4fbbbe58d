"""The arithmetic environment: a held-out eval set disjoint from training and the same in every
run, exact answers, and a reward ladder that separates a small model's replies."""

from __future__ import annotations

import pytest

from tinker_atropos.environments.arithmetic import ArithmeticConfig, ArithmeticEnv
from tinker_atropos.environments.arithmetic_data import arithmetic_reward, last_number


def tasks(**config):
    env = ArithmeticEnv.__new__(ArithmeticEnv)  # load_tasks reads only the config
    env.config = ArithmeticConfig(tokenizer_name="x", **config)
    return env.load_tasks()


@pytest.mark.parametrize("level", [1, 2, 3])
def test_eval_set_is_disjoint_from_training_and_fixed(level: int) -> None:
    train, evals = tasks(level=level, num_train_items=2000, eval_size=64)
    assert len(evals) == 64 and len({t.prompt for t in evals}) == 64
    assert not {t.prompt for t in train} & {t.prompt for t in evals}
    assert len(train) == 2000
    again_train, again_evals = tasks(level=level, num_train_items=2000, eval_size=64, seed=7)
    assert again_evals == evals  # the eval set does not depend on the training seed
    assert again_train != train
    for t in evals:
        assert eval(t.prompt) == int(t.answer)
    ops = {t.prompt.split()[1] for t in train}
    assert ops == {1: {"+"}, 2: {"+", "-"}, 3: {"+", "-", "*"}}[level]


def test_reward_ladder_and_exact_answers() -> None:
    assert arithmetic_reward("85", 85) == 1.0 and arithmetic_reward(" 85.", 85) == 1.0
    assert arithmetic_reward("37 + 48 = 85", 85) == 0.7
    close, far = arithmetic_reward("84", 85), arithmetic_reward("12", 85)
    assert 0.0 < far < close < 0.3
    assert arithmetic_reward("I cannot say", 85) == 0.0
    assert last_number("1,234 apples") == 1234 and last_number("-7") == -7 and last_number("none") is None
