"""The TRL baseline of bench/learning.py: the same model, task, reward, group size, batch and
training-time budget through TRL's GRPOTrainer, scored before and after by heldout.py (as are
rl-mcp's final weights). Runs in .venv-bench; prints one JSON object on stdout.

    .venv-bench/bin/python bench/baselines/trl_grpo.py --model DIR --minutes M [--lr ..] [--rank ..]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time

import torch
from datasets import Dataset
from heldout import chat, evaluate
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from tinker_atropos.environments.arithmetic_data import arithmetic_reward, split


class Deadline(TrainerCallback):
    """Stop after the wall-clock budget; keep each step's seconds."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.started, self.step_times, self._last = seconds, 0.0, [], 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self.started = self._last = time.monotonic()

    def on_step_end(self, args, state, control, **kwargs):
        now = time.monotonic()
        self.step_times.append(now - self._last)
        self._last = now
        if now - self.started >= self.seconds:
            control.should_training_stop = True


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--minutes", type=float, required=True)
    ap.add_argument("--lr", type=float, required=True)
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--group-size", type=int, required=True)
    ap.add_argument("--batch-size", type=int, required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--eval-size", type=int, required=True)
    ap.add_argument("--level", type=int, required=True)
    ap.add_argument("--eval-seed", type=int, required=True)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    ap.add_argument("--seed", type=int, default=0, help="torch's and the trainer's seed (sampling, data order)")
    a = ap.parse_args()
    if a.threads:  # 1 when it runs beside rl-mcp; else torch's default, every core
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    model = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    train, problems = split(a.level, a.eval_size, a.eval_seed, 4096, 0)
    before = evaluate(model, tokenizer, problems, a.max_tokens)

    def reward(completions, answer, **_):
        return [arithmetic_reward(c[0]["content"], x) for c, x in zip(completions, answer)]

    data = Dataset.from_list([{"prompt": chat(text), "answer": answer} for text, answer in train])
    deadline = Deadline(a.minutes * 60)
    with tempfile.TemporaryDirectory() as out:
        args = GRPOConfig(
            output_dir=out,
            learning_rate=a.lr,
            num_generations=a.group_size,
            per_device_train_batch_size=a.batch_size,
            gradient_accumulation_steps=1,
            max_completion_length=a.max_tokens,
            temperature=1.0,
            beta=0.0,
            max_steps=100_000,
            use_cpu=True,
            bf16=False,
            logging_steps=1,
            report_to=[],
            save_strategy="no",
            seed=a.seed,
        )
        peft = LoraConfig(r=a.rank, lora_alpha=32, lora_dropout=0.0, target_modules="all-linear")
        trainer = GRPOTrainer(
            model=model,
            reward_funcs=reward,
            args=args,
            train_dataset=data,
            peft_config=peft,
            processing_class=tokenizer,
            callbacks=[deadline],
        )
        started = time.monotonic()
        trainer.train()
        trained = time.monotonic() - started
        after = evaluate(trainer.model, tokenizer, problems, a.max_tokens)
    json.dump(
        {
            "before": before,
            "after": after,
            "steps": len(deadline.step_times),
            "train_minutes": trained / 60,
            "median_step_seconds": statistics.median(deadline.step_times) if deadline.step_times else None,
        },
        sys.stdout,
    )
    print()


if __name__ == "__main__":
    main()
