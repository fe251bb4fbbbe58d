"""A supervised step on the local backend with the batch's common beginning shared (the
environment's system prompt and tool schemas run once, as a group's prompt is in RL) against every
example run whole, side by side in one process on the same batches of SmolLM2-135M-Instruct.

The examples are a supervised set as the stage writes it (`sft/examples.jsonl` in a run folder,
or `RL_MCP_HOME/sft_previews/<...>/sft/examples.jsonl` after rl_preview_sft): `bench/sft.py` leaves
one for mcp:time in each stage arm's run. Printed: the median seconds of a forward_backward plus
optimizer step each way, the ratio, and the tokens each way runs.

    .venv/bin/python bench/sft_step.py EXAMPLES_JSONL [--batch 8] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from tinker import types

from tinker_atropos.backends.local import LocalTrainingClient, load_base_model, microbatches
from tinker_atropos.models.paths import SMOLLM2
from tinker_atropos.sft.steps import batches, example_datum, sft_step
from tinker_atropos.sft.supervised_set import read_examples


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("examples", type=Path)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--runs", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as run_dir:
        return compare(a, Path(run_dir))


def compare(a: argparse.Namespace, run_dir: Path) -> int:
    """Each batch both ways on one client (checkpoints, if any, in `run_dir`)."""
    examples = read_examples(a.examples)
    client = LocalTrainingClient(load_base_model(SMOLLM2, "cpu"), rank=8, run_dir=run_dir, run_name="b", seed=0)
    adam = types.AdamParams(learning_rate=1e-4)
    shared_min = microbatches.MIN_SHARED_PREFIX
    seconds: dict[str, list[float]] = {"shared": [], "whole": []}
    tokens: dict[str, int] = {}
    vocab = client.model.config.vocab_size
    for k, batch in enumerate(batches(examples, a.batch, a.runs + 1)):
        data = [example_datum(e) for e in batch]
        ids = [d.model_input.to_ints() for d in data]
        trained = [microbatches.first_trained(d.loss_fn_inputs["weights"].tolist()) for d in data]
        for way in ("shared", "whole") if k % 2 else ("whole", "shared"):  # each batch both ways, in turn first
            microbatches.MIN_SHARED_PREFIX = 10**9 if way == "whole" else shared_min
            plan = microbatches.plan(ids, trained, vocab)
            tokens[way] = sum(g.prefix + sum(len(ids[i]) - g.prefix for p in g.passes for i in p) for g in plan)
            started = time.monotonic()
            asyncio.run(sft_step(client, batch, adam))
            if k:  # the first batch warms up
                seconds[way].append(time.monotonic() - started)
    shared, whole = (statistics.median(seconds[w]) for w in ("shared", "whole"))
    print(f"{len(examples)} examples, batches of {a.batch}, medians of {a.runs}")
    print(f"shared beginning  {shared:6.2f} s a step  ({tokens['shared']} tokens run)")
    print(f"every row whole   {whole:6.2f} s a step  ({tokens['whole']} tokens run)")
    print(f"shared / whole    {shared / whole:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
