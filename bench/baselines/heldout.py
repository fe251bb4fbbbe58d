"""The held-out arithmetic eval that scores the final weights of both sides of bench/learning.py:
greedy, one item at a time (no padding), Hugging Face `generate`, the environment's prompt and
answer check. As a script it scores a saved LoRA adapter (an rl-mcp run's final sampler weights)
on its base model and prints one JSON object. Runs in .venv-bench.

    .venv-bench/bin/python bench/baselines/heldout.py --model DIR --adapter DIR --max-tokens N \
        --eval-size N --level N --eval-seed N
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tinker_atropos.environments.arithmetic_data import Problem, is_correct, question, split


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": question(text)}]


def held_out(eval_size: int, level: int, eval_seed: int) -> list[Problem]:
    return split(level, eval_size, eval_seed, 0, 0)[1]  # drawn from eval_seed alone


def evaluate(model: Any, tokenizer: Any, problems: list[Problem], max_tokens: int) -> float:
    model.eval()
    correct = 0
    with torch.inference_mode():
        for text, answer in problems:
            ids = tokenizer.apply_chat_template(
                chat(text), add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            out = model.generate(**ids, max_new_tokens=max_tokens, do_sample=False)
            reply = tokenizer.decode(out[0, ids["input_ids"].shape[1] :], skip_special_tokens=True)
            correct += is_correct(reply, answer)
    return correct / len(problems)


def main() -> None:
    from peft import PeftModel

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--adapter", required=True)
    ap.add_argument("--max-tokens", type=int, required=True)
    ap.add_argument("--eval-size", type=int, required=True)
    ap.add_argument("--level", type=int, required=True)
    ap.add_argument("--eval-seed", type=int, required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    tokenizer = AutoTokenizer.from_pretrained(a.model)
    base = AutoModelForCausalLM.from_pretrained(a.model, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, a.adapter)
    accuracy = evaluate(model, tokenizer, held_out(a.eval_size, a.level, a.eval_seed), a.max_tokens)
    json.dump({"accuracy": accuracy}, sys.stdout)
    print()


if __name__ == "__main__":
    main()
